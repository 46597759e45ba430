// The epilogue: a tile's FP32 sums to bf16, through the output tile in shared memory (stmatrix into
// TMA-swizzled atoms) and out to global memory by one TMA store per atom, or by the math threads where
// only some rows or columns may be written. The TMA store runs on while the next tile's main loop
// starts; the tile's shared memory is rewritten only after bulk_wait_group_read0 says it was read.
#pragma once
#include "config.cuh"
#include "tile.cuh"
#include "trace.cuh"
#include "../ptx/memory.cuh"
#include "../ptx/stmatrix.cuh"
#include "../ptx/tma.cuh"

namespace cg8 {

template <class Cfg>
struct Epilogue {
    static constexpr uint32_t kSlabs = Cfg::kSlabsPerWG;
    static constexpr uint32_t kFrag = Cfg::kBlockN / 2;
    using Sums = float[kSlabs][kFrag];

    // Byte address of output element (row, col) in the swizzled shared-memory tile; col % 8 == 0.
    __device__ __forceinline__ static uint32_t tile_addr(uint32_t base, uint32_t row, uint32_t col) {
        const uint32_t atom = col / Cfg::kAtomCols;
        uint32_t off = row * Cfg::kAtomBytes + (col % Cfg::kAtomCols) * 2;
        if constexpr (Cfg::kSwizzleD != 0) off ^= ((off >> 7) & (Cfg::kSwizzleD / 16 - 1)) << 4;
        return base + atom * (Cfg::kBlockM * Cfg::kAtomBytes) + off;
    }

    // Rows whose bit is set in `zero` (bit 2w+h: slab w, row +8h of this thread) come out as zeros.
    __device__ __forceinline__ static void zero_rows(Sums& sum, uint32_t zero) {
#pragma unroll
        for (uint32_t w = 0; w < kSlabs; ++w) {
            const bool z0 = (zero >> (2 * w)) & 1u, z1 = (zero >> (2 * w + 1)) & 1u;
#pragma unroll
            for (uint32_t i = 0; i < Cfg::kBlockN / 8; ++i) {
                if (z0) sum[w][i * 4 + 0] = sum[w][i * 4 + 1] = 0.f;
                if (z1) sum[w][i * 4 + 2] = sum[w][i * 4 + 3] = 0.f;
            }
        }
    }

    // This thread's fragments, as bf16, into the output tile at `base`.
    __device__ __forceinline__ static void write_tile(const Sums& sum, uint32_t base, uint32_t wg, uint32_t warp,
                                                      uint32_t lane) {
#pragma unroll
        for (uint32_t w = 0; w < kSlabs; ++w) {
            const uint32_t row = (wg * kSlabs + w) * 64 + warp * 16 + (lane / 8 % 2) * 8 + lane % 8;
#pragma unroll
            for (uint32_t i = 0; i + 1 < Cfg::kBlockN / 8; i += 2) {
                const uint32_t addr = tile_addr(base, row, (i + lane / 16) * 8);
                stmatrix_x4(addr, pack_bf16x2(sum[w][i * 4 + 0], sum[w][i * 4 + 1]),
                            pack_bf16x2(sum[w][i * 4 + 2], sum[w][i * 4 + 3]),
                            pack_bf16x2(sum[w][i * 4 + 4], sum[w][i * 4 + 5]),
                            pack_bf16x2(sum[w][i * 4 + 6], sum[w][i * 4 + 7]));
            }
            if constexpr ((Cfg::kBlockN / 8) % 2 == 1) {
                constexpr uint32_t i = Cfg::kBlockN / 8 - 1;
                const uint32_t addr = tile_addr(base, row, i * 8);  // lanes 16..31: ignored
                stmatrix_x2(addr, pack_bf16x2(sum[w][i * 4 + 0], sum[w][i * 4 + 1]),
                            pack_bf16x2(sum[w][i * 4 + 2], sum[w][i * 4 + 3]));
            }
        }
    }

    // The whole tile, one TMA store per atom (thread `tid` < kNumAtoms stores atom tid). TMA clips rows
    // and columns past the tensor's end.
    __device__ __forceinline__ static void store_tma(const CUtensorMap& tmap_d, const uint8_t* tile, uint32_t tid,
                                                     bool store_thread, uint32_t n0, uint32_t row0) {
        fence_proxy_async_smem();
        named_barrier_sync(1, Cfg::kMathThreads);
        if (store_thread) {
            tma_store_2d(&tmap_d, tile + tid * (Cfg::kBlockM * Cfg::kAtomBytes), int32_t(n0 + tid * Cfg::kAtomCols),
                         int32_t(row0));
            bulk_commit_group();
        }
    }

    // The tile's valid rows (m0: its first), copied out by the math threads 16 bytes at a time: a split
    // tile's column chunk (t.split - 1), or a masked group's last block (only rows below masked_m may be
    // written). The operands are references, read where the loop uses them: taken by value, they moved
    // the masked kernels' code (NOTES.md v16).
    template <bool kSplitTile>
    __device__ __forceinline__ static void store_threads(const uint32_t& base, unsigned short* __restrict__ const& d,
                                                         const uint32_t& ldd, const uint32_t& row0, const uint32_t& n0,
                                                         const uint32_t& m0, const Tile<Cfg>& t) {
        named_barrier_sync(1, Cfg::kMathThreads);
        const uint32_t valid = min(t.rows - m0, Cfg::kBlockM);
        constexpr uint32_t kCols = kSplitTile ? Cfg::kBlockN / Cfg::kSplits : Cfg::kBlockN;
        constexpr uint32_t kChunks = kCols / 8;  // 16-byte chunks a row
        const uint32_t c0 = kSplitTile ? (t.split - 1) * kCols : 0u;
        for (uint32_t idx = threadIdx.x; idx < valid * kChunks; idx += Cfg::kMathThreads) {
            const uint32_t r = idx / kChunks, c = c0 + (idx % kChunks) * 8;
            if (n0 + c < Cfg::kShapeN) {
                uint32_t v0, v1, v2, v3;
                ld_shared_v4_u32(tile_addr(base, r, c), v0, v1, v2, v3);
                st_global_v4_u32(d + uint64_t(row0 + r) * ldd + n0 + c, v0, v1, v2, v3);
            }
        }
    }
};

}  // namespace cg8

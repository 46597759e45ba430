// The epilogue: a tile's FP32 sums to bf16 (stmatrix), to e4m3 with per-row scales, or as FP32, through the
// output tile in shared memory (TMA-swizzled atoms) and out to global memory by one TMA store per atom (FP32:
// one TMA reduce-add per atom, D += tile, or D loaded into the tile, added to and stored), or by the math threads
// where only some rows or columns may be written. The TMA store runs on while the next tile's main loop starts;
// the tile's shared memory is rewritten only after bulk_wait_group_read says it was read.
#pragma once
#include "config.cuh"
#include "tile.cuh"
#include "trace.cuh"
#include "../ptx/convert.cuh"
#include "../ptx/mbarrier.cuh"
#include "../ptx/memory.cuh"
#include "../ptx/stmatrix.cuh"
#include "../ptx/tma.cuh"

namespace cg8 {

template <class Cfg>
struct Epilogue {
    static constexpr uint32_t kUnits = Cfg::kUnitsPerWG;
    static constexpr uint32_t kFrag = Cfg::kUnitN / 2;  // a unit's sums a thread holds
    using Sums = float[kUnits][kFrag];

    // Byte address of output element (row, col) in the swizzled shared-memory tile; the element's 16-byte
    // chunk holds col .. col + 16 / kOutBytes - 1 (col a multiple of that for whole chunks).
    __device__ __forceinline__ static uint32_t tile_addr(uint32_t base, uint32_t row, uint32_t col) {
        const uint32_t atom = col / Cfg::kAtomCols;
        uint32_t off = row * Cfg::kAtomBytes + (col % Cfg::kAtomCols) * Cfg::kOutBytes;
        if constexpr (Cfg::kSwizzleD != 0) off ^= ((off >> 7) & (Cfg::kSwizzleD / 16 - 1)) << 4;
        return base + atom * Cfg::kAtomTileBytes + off;
    }

    // Byte offset, in a transposed atom (kTransposeD: 32 of the tile's rows as D's columns, over the tile's columns as
    // D's rows, 128-byte swizzled), of the tile's element (atom row r, column c). tile_addr with its atom stride made
    // kAtomRows' computes it too, and measured 1-2% slower at 7168x4096 (its other arithmetic; NOTES.md v47).
    __device__ __forceinline__ static uint32_t transposed_offset(uint32_t r, uint32_t c) {
        const uint32_t off = c * Cfg::kAtomBytes + r * 4;
        return off ^ (((off >> 7) & 7) << 4);
    }

    // Rows whose bit is set in `zero` (bit 2w+h: unit w, row +8h of this thread) come out as zeros.
    __device__ __forceinline__ static void zero_rows(Sums& sum, uint32_t zero) {
#pragma unroll
        for (uint32_t w = 0; w < kUnits; ++w) {
            const bool z0 = (zero >> (2 * w)) & 1u, z1 = (zero >> (2 * w + 1)) & 1u;
#pragma unroll
            for (uint32_t i = 0; i < Cfg::kUnitN / 8; ++i) {
                if (z0) sum[w][i * 4 + 0] = sum[w][i * 4 + 1] = 0.f;
                if (z1) sum[w][i * 4 + 2] = sum[w][i * 4 + 3] = 0.f;
            }
        }
    }

    // This thread's fragments, as bf16, into the output tile at `base`.
    __device__ __forceinline__ static void write_tile(const Sums& sum, uint32_t base, uint32_t wg, uint32_t warp,
                                                      uint32_t lane) {
#pragma unroll
        for (uint32_t w = 0; w < kUnits; ++w) {
            const uint32_t row = Cfg::slab(wg, w) * 64 + warp * 16 + (lane / 8 % 2) * 8 + lane % 8;
#pragma unroll
            for (uint32_t i = 0; i + 1 < Cfg::kUnitN / 8; i += 2) {
                const uint32_t addr = tile_addr(base, row, Cfg::unit_col(w) + (i + lane / 16) * 8);
                stmatrix_x4(addr, pack_bf16x2(sum[w][i * 4 + 0], sum[w][i * 4 + 1]),
                            pack_bf16x2(sum[w][i * 4 + 2], sum[w][i * 4 + 3]),
                            pack_bf16x2(sum[w][i * 4 + 4], sum[w][i * 4 + 5]),
                            pack_bf16x2(sum[w][i * 4 + 6], sum[w][i * 4 + 7]));
            }
            if constexpr ((Cfg::kUnitN / 8) % 2 == 1) {
                constexpr uint32_t i = Cfg::kUnitN / 8 - 1;
                const uint32_t addr = tile_addr(base, row, Cfg::unit_col(w) + i * 8);  // lanes 16..31: ignored
                stmatrix_x2(addr, pack_bf16x2(sum[w][i * 4 + 0], sum[w][i * 4 + 1]),
                            pack_bf16x2(sum[w][i * 4 + 2], sum[w][i * 4 + 3]));
            }
        }
    }

    // e4m3 output: the recipe of ptx/convert.cuh (e4m3_scale) on the FP32 sums, per row and 128-column group.
    // The code is straight-line from the sums to the stores (the divisions without their slow-path branch,
    // the exact ones taken by the whole warp in the rare case they are needed), so that ptxas interleaves the
    // rows: with a branch per row the epilogue ran row after row (NOTES.md v24).
    using RowValues = float[kUnits][2];  // one per row of this thread: unit w, row half h

    // The amax of this thread's row (w, h) over fragments kF0 .. kF0 + kFrags - 1 (8 columns each), shared by
    // the quad of lanes holding the row. Two chains, for latency.
    template <uint32_t kF0, uint32_t kFrags>
    __device__ __forceinline__ static float row_amax(const Sums& sum, uint32_t w, uint32_t h) {
        float a0 = 0.f, a1 = 0.f;
#pragma unroll
        for (uint32_t i = kF0; i < kF0 + kFrags; ++i) {
            a0 = fmaxf(a0, fabsf(sum[w][i * 4 + 2 * h]));
            a1 = fmaxf(a1, fabsf(sum[w][i * 4 + 2 * h + 1]));
        }
        float a = fmaxf(a0, a1);
        a = fmaxf(a, __shfl_xor_sync(~0u, a, 1));
        return fmaxf(a, __shfl_xor_sync(~0u, a, 2));
    }

    template <uint32_t kF0, uint32_t kFrags>
    __device__ __forceinline__ static void rows_amax(const Sums& sum, RowValues& amax) {
#pragma unroll
        for (uint32_t w = 0; w < kUnits; ++w)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) amax[w][h] = row_amax<kF0, kFrags>(sum, w, h);
    }

    // Fragment i of this thread's row (w, h) as two e4m3 bytes: its sums times the row's 1 / scale.
    __device__ __forceinline__ static uint32_t e4m3_pair(const Sums& sum, uint32_t w, uint32_t h, uint32_t i,
                                                         float inv) {
        return f32x2_to_e4m3x2_sat(__fmul_rn(sum[w][i * 4 + 2 * h], inv), __fmul_rn(sum[w][i * 4 + 2 * h + 1], inv));
    }

    // This thread's rows over fragments kF0 .. kF0 + kFrags - 1 (within one 128-column group, in one atom of
    // the tile), given each row's amax over the group, as e4m3 into the output tile at `base`: a lane holds
    // 2 bytes of a row per fragment and stores them (the quad's 8 bytes sit in one bank pair, rows on different
    // chunks through the swizzle: one wavefront a store). The quad's first lane writes each row's scale to
    // scale[row] if the row is below `valid` (0: no scales).
    template <uint32_t kF0, uint32_t kFrags>
    __device__ __forceinline__ static void write_rows(const Sums& sum, const RowValues& amax, uint32_t base,
                                                      float* __restrict__ scale, uint32_t valid, uint32_t wg,
                                                      uint32_t warp, uint32_t lane) {
        static_assert(Cfg::kOutBytes == 1 && Cfg::kSwizzleD == Cfg::kAtomBytes, "one swizzled atom of e4m3 a row");
        static_assert(kF0 * 8 / Cfg::kAtomCols == ((kF0 + kFrags) * 8 - 1) / Cfg::kAtomCols, "fragments of one atom");
        constexpr bool kUe8m0 = Cfg::kOutFormat == OutFormat::kE4m3Ue8m0;
        constexpr uint32_t kAtomCol0 = kF0 * 8 / Cfg::kAtomCols * Cfg::kAtomCols, kChunks = Cfg::kAtomBytes / 16;
        RowValues s, inv;
        bool fast = true;
#pragma unroll
        for (uint32_t w = 0; w < kUnits; ++w)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) fast = fast && e4m3_fast_ok(amax[w][h]);
        if (__all_sync(~0u, fast)) {
#pragma unroll
            for (uint32_t w = 0; w < kUnits; ++w)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h) e4m3_scale<kUe8m0, true>(amax[w][h], s[w][h], inv[w][h]);
        } else {
#pragma unroll
            for (uint32_t w = 0; w < kUnits; ++w)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h) e4m3_scale<kUe8m0, false>(amax[w][h], s[w][h], inv[w][h]);
        }
        // This thread's rows are row0 + unit_row(w) + 8 h: multiples of 8 rows, 256 bytes, past the swizzle's
        // bits, so each 16-byte chunk of the row lies at the same swizzled place in every one of them.
        const uint32_t row0 = Cfg::slab(wg, 0) * 64 + warp * 16 + lane / 4;
        if constexpr (Cfg::kPermuteB) {
            // B in fragment order: fragment 8 b + j of the 64-column block b holds output columns 64 b + 16 q + 2 j
            // and + 1 (q = lane % 4), so the thread's 16 values of a row in the block are one 16-byte chunk.
            static_assert(kF0 % 8 == 0 && kFrags % 8 == 0, "whole 64-column blocks");
#pragma unroll
            for (uint32_t b = kF0 / 8; b < (kF0 + kFrags) / 8; ++b) {
                const uint32_t addr = tile_addr(base, row0, b * 64 + 16 * (lane % 4));
#pragma unroll
                for (uint32_t w = 0; w < kUnits; ++w)
#pragma unroll
                    for (uint32_t h = 0; h < 2; ++h) {
                        uint32_t word[4];
#pragma unroll
                        for (uint32_t p = 0; p < 4; ++p) {
                            const uint32_t i = b * 8 + 2 * p;  // fragments i and i + 1: bytes 4 p .. 4 p + 3
                            word[p] = e4m3_pair(sum, w, h, i, inv[w][h]) | e4m3_pair(sum, w, h, i + 1, inv[w][h]) << 16;
                        }
                        st_shared_v4_u32(addr + (Cfg::unit_row(w) + h * 8) * Cfg::kAtomBytes, word[0], word[1], word[2],
                                         word[3]);
                    }
            }
        } else {
            uint32_t chunk[kChunks];
#pragma unroll
            for (uint32_t c = 0; c < kChunks; ++c) chunk[c] = tile_addr(base, row0, kAtomCol0 + c * 16) + 2 * (lane % 4);
#pragma unroll
            for (uint32_t w = 0; w < kUnits; ++w)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h)
#pragma unroll
                    for (uint32_t i = kF0; i < kF0 + kFrags; ++i)
                        st_shared_u16(chunk[i * 8 % Cfg::kAtomCols / 16] + (Cfg::unit_row(w) + h * 8) * Cfg::kAtomBytes +
                                          (i % 2) * 8,
                                      static_cast<unsigned short>(e4m3_pair(sum, w, h, i, inv[w][h])));
        }
#pragma unroll
        for (uint32_t w = 0; w < kUnits; ++w)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const uint32_t row = row0 + Cfg::unit_row(w) + h * 8;
                if (lane % 4 == 0 && row < valid) scale[row] = s[w][h];
            }
    }

    // The whole tile as e4m3, group by group; scales to scale[g * ld_scale + row].
    __device__ __forceinline__ static void write_tile_fp8(const Sums& sum, uint32_t base, float* __restrict__ scale,
                                                          uint32_t ld_scale, uint32_t valid, uint32_t wg, uint32_t warp,
                                                          uint32_t lane) {
        static_for<0, Cfg::kBlockN / 128>([&](auto group) {
            constexpr uint32_t g = group.value;
            RowValues amax;
            rows_amax<g * 16, 16>(sum, amax);
            write_rows<g * 16, 16>(sum, amax, base, scale + g * ld_scale, valid, wg, warp, lane);
        });
    }

    // The whole tile, one TMA store per atom (thread `tid` < kNumAtoms stores atom tid). TMA clips rows
    // and columns past the tensor's end.
    __device__ __forceinline__ static void store_tma(const CUtensorMap& tmap_d, const uint8_t* tile, uint32_t tid,
                                                     bool store_thread, uint32_t n0, uint32_t row0) {
        fence_proxy_async_smem();
        named_barrier_sync(1, Cfg::kMathThreads);
        if (store_thread) {
            tma_store_2d(&tmap_d, tile + tid * Cfg::kAtomTileBytes, int32_t(n0 + tid * Cfg::kAtomCols),
                         int32_t(row0));
            bulk_commit_group();
        }
    }

    // The FP32 tile added into D[group] (a 3-D tensor map: [groups][rows][N]) atom by atom, one TMA reduce-add
    // each, issued by the store thread. Atom j goes to buffer j % kTileAtoms of the tile at `base` (`tile` in the
    // generic space): 8 bytes a store, the quad's rows on different 16-byte chunks through the swizzle, so a
    // warp's stores take the minimum two wavefronts. The whole tile held: one barrier, then every atom's add.
    // Fewer atoms held than the tile has: a barrier per atom, and the buffer that atom j + 1 reuses must have
    // been read first: the store thread waits for that before the barrier that lets the threads write it. The
    // caller's barrier (after bulk_wait_group_read) freed every buffer.
    // TMA clips rows and columns past the group's matrix, so a partial tile adds nothing elsewhere.
    __device__ __forceinline__ static void reduce_tile_f32(const Sums& sum, const CUtensorMap& tmap_d, uint32_t base,
                                                           const uint8_t* tile, bool store_thread, uint32_t n0,
                                                           uint32_t row0, uint32_t group, uint32_t wg, uint32_t warp,
                                                           uint32_t lane) {
        static_assert(kUnits == 1 && Cfg::kAtomCols % 8 == 0, "one slab per warpgroup, whole fragments per atom");
        if constexpr (Cfg::kTransposeD) {
            reduce_tile_f32_transposed(sum, tmap_d, base, tile, store_thread, n0, row0, group, wg, warp);
            return;
        }
        constexpr uint32_t kBuffers = Cfg::kTileAtoms;
        constexpr uint32_t kFragsPerAtom = Cfg::kAtomCols / 8;
        const uint32_t row = wg * 64 + warp * 16 + lane / 4;
        auto write_atom = [&](uint32_t j) {
            const uint32_t buffer = base + (j % kBuffers) * Cfg::kAtomTileBytes;
#pragma unroll
            for (uint32_t f = 0; f < kFragsPerAtom; ++f) {
                const uint32_t i = j * kFragsPerAtom + f, col = f * 8 + 2 * (lane % 4);
                st_shared_v2_f32(tile_addr(buffer, row, col), sum[0][i * 4 + 0], sum[0][i * 4 + 1]);
                st_shared_v2_f32(tile_addr(buffer, row + 8, col), sum[0][i * 4 + 2], sum[0][i * 4 + 3]);
            }
        };
        auto reduce_atom = [&](uint32_t j) {
            tma_reduce_add_3d(&tmap_d, tile + (j % kBuffers) * Cfg::kAtomTileBytes, int32_t(n0 + j * Cfg::kAtomCols),
                              int32_t(row0), int32_t(group));
            bulk_commit_group();
        };
        if constexpr (kBuffers == Cfg::kNumAtoms) {  // the whole tile: one barrier
#pragma unroll
            for (uint32_t j = 0; j < Cfg::kNumAtoms; ++j) write_atom(j);
            fence_proxy_async_smem();
            named_barrier_sync(1, Cfg::kMathThreads);
            if (store_thread)
#pragma unroll 1
                for (uint32_t j = 0; j < Cfg::kNumAtoms; ++j) reduce_atom(j);
            return;
        }
        static_for<0, Cfg::kNumAtoms>([&](auto atom) {
            constexpr uint32_t j = atom.value;
            write_atom(j);
            fence_proxy_async_smem();
            // Atoms 0 .. j - 1 are committed; atom j + 1 - kBuffers must have been read.
            if constexpr (j + 1 >= kBuffers && j + 1 < Cfg::kNumAtoms)
                if (store_thread) bulk_wait_group_read<kBuffers - 2>();
            named_barrier_sync(1, Cfg::kMathThreads);
            if (store_thread) reduce_atom(j);
        });
    }

    // kLoadD: this thread's sums added to the tile's D, which TMA loaded into the output tile at `base` (d_full, the
    // tile's parity `phase`), in the places reduce_tile_f32 writes them; then d_written, and the producer warpgroup's
    // store warp stores the tile. D + sums in FP32, as TMA's reduce-add computes it: the results are the same bits.
    // A thread loads all its elements before it stores any, so that the loads overlap.
    __device__ __forceinline__ static void add_tile_f32(const Sums& sum, uint32_t base, uint64_t* d_full,
                                                        uint64_t* d_written, uint32_t phase, uint32_t wg, uint32_t warp,
                                                        uint32_t lane) {
        static_assert(Cfg::kLoadD && kUnits == 1 && Cfg::kTileAtoms == Cfg::kNumAtoms, "the whole FP32 tile, loaded");
        const uint32_t row = wg * 64 + warp * 16 + lane / 4;  // and row + 8
        // Element e of fragment i (row + 8 (e / 2), column i * 8 + 2 (lane % 4) + e % 2): its byte address.
        auto addr = [&](uint32_t i, uint32_t e) {
            const uint32_t col = i * 8 + 2 * (lane % 4) + e % 2, r = row + (e / 2) * 8;
            if constexpr (Cfg::kTransposeD) {  // as reduce_tile_f32_transposed lays atom r / 32 out
                return base + (r / Cfg::kAtomCols) * Cfg::kAtomTileBytes + transposed_offset(r % Cfg::kAtomCols, col);
            } else {
                return tile_addr(base + col / Cfg::kAtomCols * Cfg::kAtomTileBytes, r, col % Cfg::kAtomCols);
            }
        };
        float d[kFrag];
        mbar_wait(d_full, phase);
        if constexpr (Cfg::kTransposeD) {
#pragma unroll
            for (uint32_t i = 0; i < kFrag; ++i) d[i] = ld_shared_b32(addr(i / 4, i % 4));
#pragma unroll
            for (uint32_t i = 0; i < kFrag; ++i) st_shared_u32(addr(i / 4, i % 4), __float_as_uint(d[i] + sum[0][i]));
        } else {
#pragma unroll
            for (uint32_t i = 0; i < kFrag; i += 2) ld_shared_v2_f32(addr(i / 4, i % 4), d[i], d[i + 1]);
#pragma unroll
            for (uint32_t i = 0; i < kFrag; i += 2)
                st_shared_v2_f32(addr(i / 4, i % 4), d[i] + sum[0][i], d[i + 1] + sum[0][i + 1]);
        }
        fence_proxy_async_smem();
        mbar_arrive(d_written);
    }

    // reduce_tile_f32 for a transposed tile (kTransposeD): the tile's rows row0 .. are D's columns and its columns
    // n0 .. D's rows. Atom j holds the tile's rows 32 j .. 32 j + 31 as D's columns, over all kBlockN of D's rows,
    // so each warp's rows (16 of them) lie in one atom: the warps holding atoms 0 .. kTileAtoms - 1 write them at
    // once, and those holding the rest write them into the first buffers once TMA has read those. That wait is
    // long (every SM adds its tile into D at about the same time), so it is for those buffers only; all math
    // warps take part in it, since a warpgroup going on alone to its next tile's MMAs measured slower (NOTES.md
    // v47). A thread's 4-byte stores of one fragment go to 4 of D's rows, 8 consecutive columns each: through the
    // swizzle, one wavefront.
    __device__ __forceinline__ static void reduce_tile_f32_transposed(const Sums& sum, const CUtensorMap& tmap_d,
                                                                      uint32_t base, const uint8_t* tile,
                                                                      bool store_thread, uint32_t n0, uint32_t row0,
                                                                      uint32_t group, uint32_t wg, uint32_t warp) {
        constexpr uint32_t kHeld = Cfg::kTileAtoms;
        const uint32_t lane = threadIdx.x % 32;
        const uint32_t row = wg * 64 + warp * 16 + lane / 4;  // and row + 8: in the same atom
        const uint32_t atom = row / Cfg::kAtomCols;
        auto write_atom = [&](uint32_t buffer) {
            const uint32_t atom_base = base + buffer * Cfg::kAtomTileBytes;
#pragma unroll
            for (uint32_t i = 0; i < Cfg::kBlockN / 8; ++i)
#pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {  // (row + 8 (e / 2), column i * 8 + 2 (lane % 4) + e % 2)
                    const uint32_t r = row % Cfg::kAtomCols + (e / 2) * 8, c = i * 8 + 2 * (lane % 4) + e % 2;
                    st_shared_u32(atom_base + transposed_offset(r, c), __float_as_uint(sum[0][i * 4 + e]));
                }
        };
        auto reduce_atoms = [&](uint32_t first, uint32_t end) {  // one bulk group per atom
            if (store_thread)
                for (uint32_t j = first; j < end; ++j) {
                    tma_reduce_add_3d(&tmap_d, tile + (j % kHeld) * Cfg::kAtomTileBytes,
                                      int32_t(row0 + j * Cfg::kAtomCols), int32_t(n0), int32_t(group));
                    bulk_commit_group();
                }
        };
        if (atom < kHeld) write_atom(atom);
        fence_proxy_async_smem();
        named_barrier_sync(1, Cfg::kMathThreads);
        reduce_atoms(0, kHeld);
        if constexpr (kHeld < Cfg::kNumAtoms) {  // the rest, into buffers 0 .. kNumAtoms - kHeld - 1 once read
            if (store_thread) bulk_wait_group_read<2 * kHeld - Cfg::kNumAtoms>();
            named_barrier_sync(1, Cfg::kMathThreads);
            if (atom >= kHeld) write_atom(atom - kHeld);
            fence_proxy_async_smem();
            named_barrier_sync(1, Cfg::kMathThreads);
            reduce_atoms(kHeld, Cfg::kNumAtoms);
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
        constexpr uint32_t kCols = kSplitTile ? Cfg::kMaxChunkFrags * 8 : Cfg::kBlockN;  // a row's columns, at most
        constexpr uint32_t kChunkCols = 16 / Cfg::kOutBytes;  // elements of a 16-byte chunk
        constexpr uint32_t kChunks = kCols / kChunkCols;       // chunks a row
        // A split tile's chunk: columns c0 .. c1 - 1 (even chunks: kCols each, c < c1 always; their c0 in this form
        // keeps their code as it was).
        const uint32_t c0 = !kSplitTile ? 0u : Cfg::kEvenChunks ? (t.split - 1) * kCols : Cfg::chunk_first(t.split - 1) * 8;
        const uint32_t c1 = kSplitTile ? Cfg::chunk_first(t.split) * 8 : kCols;
        uint8_t* const out = reinterpret_cast<uint8_t*>(d);
        for (uint32_t idx = threadIdx.x; idx < valid * kChunks; idx += Cfg::kMathThreads) {
            const uint32_t r = idx / kChunks, c = c0 + (idx % kChunks) * kChunkCols;
            if ((!kSplitTile || Cfg::kEvenChunks || c < c1) && n0 + c < Cfg::kShapeN) {
                uint32_t v0, v1, v2, v3;
                ld_shared_v4_u32(tile_addr(base, r, c), v0, v1, v2, v3);
                st_global_v4_u32(out + (uint64_t(row0 + r) * ldd + n0 + c) * Cfg::kOutBytes, v0, v1, v2, v3);
            }
        }
    }
};

}  // namespace cg8

// A global group (kGlobalGroup > 1): e4m3 output in the narrow tiles bf16 picks at decode-sized M, where a
// 128-column scale group's CTAs (its kGlobalGroup tiles, each over kSplits CTAs) cannot all be one resident
// cluster. They share each row's amax through global memory: every CTA publishes its rows' amax over its
// columns, then reads the other members' and keeps the maximum, so each quantizes its own columns with the
// group's scale. Max is order-free: the bytes do not depend on who arrives when.
//
// Members wait for each other, so the host launches one tile per CTA with the whole grid resident at once
// (a cooperative launch: cugemm8/fp8_gemm.py). No memory fence: each amax is stored beside a tag in one 8-byte
// word (written and read whole), and a reader takes a word only once its tag is this launch's. The tag is the
// workspace's epoch + 1. Each CTA reads the epoch when its tile starts (after grid_dependency_wait: the launch
// before on the stream has finished), every CTA adds 1 to the arrivals once it has published, and the last of
// the launch's CTAs resets the arrivals and moves the epoch on for the next launch. Tags of older launches, of
// any configuration, are never this launch's, so the workspace is shared by every configuration on a stream
// (cugemm8/workspace.py keeps one per device and stream, zeroed when it is made).
//
// Workspace layout (cugemm8/workspace.py computes the same bytes): a u32 count of arrivals and a u32 epoch,
// padded to kHeaderBytes; then per slot (m-block x 128-column group) kMembers parts of kBlockM tagged words,
// member (tile of the group) x kSplits + split rank.
#pragma once
#include "config.cuh"
#include "epilogue.cuh"
#include "../ptx/memory.cuh"

namespace cg8 {

template <class Cfg>
struct GroupMeet {
    static constexpr uint32_t kMembers = Cfg::kGlobalGroup * Cfg::kSplits;  // a whole group's CTAs
    static constexpr uint32_t kHeaderBytes = 256;
    using RowValues = typename Epilogue<Cfg>::RowValues;

    // This launch's epoch, read when a tile starts (its value is needed only at the tile's end).
    __device__ __forceinline__ static uint32_t epoch(const uint8_t* ws) {
        return ld_relaxed_gpu_u32(reinterpret_cast<const uint32_t*>(ws) + 1);
    }

    // Whether this tile's CTA writes the group's scales: the group's first tile, split rank 0.
    __device__ __forceinline__ static bool writes_scales(uint32_t n_block, uint32_t rank) {
        return n_block % Cfg::kGlobalGroup == 0 && rank == 0;
    }

    // `amax` holds, per unit and row half, this thread's row's amax over this CTA's columns (shared by the quad);
    // it comes back as the amax over the group's columns. Called by every math thread of the launch's
    // `ctas` working CTAs (tiles x splits); `rank`: the split rank (0 unsplit).
    template <class Loop>
    __device__ __forceinline__ static void meet(Loop& loop, RowValues& amax, uint8_t* __restrict__ ws, uint32_t epoch,
                                                uint32_t ctas, uint32_t m_block, uint32_t n_block, uint32_t rank) {
#ifdef CG8_PROBE_NO_AMAX_EXCHANGE  // benchmarks.ablation_probe only: each CTA keeps its own amax (wrong scales)
        return;
#endif
        const uint32_t tag = epoch + 1;
        const uint32_t first_tile = n_block / Cfg::kGlobalGroup * Cfg::kGlobalGroup;
        const uint32_t members = min(Cfg::kGlobalGroup, Cfg::kNumNBlocks - first_tile) * Cfg::kSplits;
        const uint32_t member = (n_block - first_tile) * Cfg::kSplits + rank;
        uint64_t* parts = reinterpret_cast<uint64_t*>(ws + kHeaderBytes) +
                          (uint64_t(m_block) * Cfg::kScaleRowsB + n_block / Cfg::kGlobalGroup) * kMembers * Cfg::kBlockM;
        const uint32_t row0 = Cfg::slab(loop.wg, 0) * 64 + loop.warp * 16 + loop.lane / 4;
        if (loop.lane % 4 == 0) {
#pragma unroll
            for (uint32_t w = 0; w < Cfg::kUnitsPerWG; ++w)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h)
                    st_global_u64(parts + member * Cfg::kBlockM + row0 + Cfg::unit_row(w) + h * 8,
                                  (uint64_t(tag) << 32) | __float_as_uint(amax[w][h]));
        }
        if (threadIdx.x == 0) {  // (after its own tagged stores, which used the epoch it read: in order)
            uint32_t* words = reinterpret_cast<uint32_t*>(ws);
            if (atom_add_relaxed_gpu_u32(words, 1) == ctas - 1) {
                st_relaxed_gpu_u32(words, 0);
                st_relaxed_gpu_u32(words + 1, tag);
            }
        }
        // The quad's lanes read the members q, q + 4, ... of this thread's rows, then take the quad's max.
        for (uint32_t j = loop.lane % 4; j < members; j += 4) {
#pragma unroll
            for (uint32_t w = 0; w < Cfg::kUnitsPerWG; ++w)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h) {
                    const uint64_t* word = parts + j * Cfg::kBlockM + row0 + Cfg::unit_row(w) + h * 8;
                    uint64_t v;
                    do {
                        v = ld_relaxed_gpu_u64(word);
                    } while (uint32_t(v >> 32) != tag);
                    amax[w][h] = fmaxf(amax[w][h], __uint_as_float(uint32_t(v)));
                }
        }
#pragma unroll
        for (uint32_t w = 0; w < Cfg::kUnitsPerWG; ++w)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                amax[w][h] = fmaxf(amax[w][h], __shfl_xor_sync(~0u, amax[w][h], 1));
                amax[w][h] = fmaxf(amax[w][h], __shfl_xor_sync(~0u, amax[w][h], 2));
            }
    }
};

}  // namespace cg8

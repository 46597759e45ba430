// The k-grouped layout's tiles (the MoE weight gradient): G groups share M and N, each with its own K (the
// tokens routed to that expert). A is [M, sum K] and B is [N, sum K] with the groups' columns one after
// another, a multiple of 128 each, so group g's k-blocks are a run of the scale grids' columns; D is
// [G, M, N]. The per-group K live in an int32 array on the GPU (CUDA-graph safe) and are read here only.
// The tiles of every group with k-blocks are walked group by group, rasterized within a group; a group
// with K = 0 has no tiles, so its D is not touched.
#pragma once
#include "tile.cuh"

namespace cg8 {

template <class Cfg>
struct KGroupedTiles : WholeTiles<Cfg> {
    static_assert(Cfg::kRuntimeK && Cfg::kRecordSlots == 0 && Cfg::kSplits == 1,
                  "the k-grouped layout has K at run time, no record ring and no split");
    using Tile = cg8::Tile<Cfg>;
    static constexpr uint32_t kGroups = Cfg::kNumGroups;
    static constexpr StageWalk kStageWalk = StageWalk::kRolled;
    // Words: each group's k-blocks; the number of groups with k-blocks; then for each of those, in order,
    // (group, first k-block, end k-block).
    static constexpr uint32_t kFirstEntry = kGroups + 1;
    static constexpr uint32_t kSmemWordBytes = ((kGroups + 1 + 3 * kGroups) * 4 + 15) / 16 * 16;

    uint32_t m;               // rows of A and of each group's D
    const int32_t* entries;   // shared memory: (group, kb0, kb1) per group with k-blocks
    uint32_t num_m_blocks;
    uint32_t tiles_per_group;
    uint32_t num_tiles;
    uint32_t tile_idx;

    __device__ __forceinline__ KGroupedTiles(uint32_t m_, const int32_t*, int32_t* words, uint64_t*, uint32_t, uint32_t)
        : m(m_), entries(words + kFirstEntry) {
        num_m_blocks = (m + Cfg::kBlockM - 1) / Cfg::kBlockM;
        tiles_per_group = num_m_blocks * Cfg::kNumNBlocks;
        num_tiles = uint32_t(words[kGroups]) * tiles_per_group;
        tile_idx = blockIdx.x;
    }

    __device__ __forceinline__ static uint32_t rows_a_landing(const Tile&) { return Cfg::kBlockM; }  // whole tiles

    // Every thread, before the set-up barrier: each group's k-blocks (a negative K counts as 0, and none counts
    // more than the ceil(k / 128) k-blocks of A, which keeps the running sums below from overflowing).
    __device__ __forceinline__ static void load_layout(const int32_t* k_sizes, int32_t* words, uint32_t, uint32_t k) {
        const uint32_t total = (k + kBlockK - 1) / kBlockK;
        for (uint32_t g = threadIdx.x; g < kGroups; g += Cfg::kThreads) {
            const int32_t size = __ldg(k_sizes + g);
            words[g] = size <= 0 ? 0 : int32_t(min((uint32_t(size) + kBlockK - 1) / kBlockK, total));
        }
    }

    // After it: the groups' k-block ranges (a running sum, by the first warp 32 groups at a time), clamped to
    // the ceil(k / 128) columns of the scale grids so that sizes summing past A's columns read nothing beyond
    // them, and the groups left with k-blocks listed in order.
    __device__ __forceinline__ static void finish_layout(int32_t* words, uint32_t k) {
        if (threadIdx.x < 32) {
            const uint32_t lane = threadIdx.x, total = (k + kBlockK - 1) / kBlockK;
            uint32_t begin = 0, count = 0;
            for (uint32_t base = 0; base < kGroups; base += 32) {
                const uint32_t g = base + lane;
                const uint32_t kbs = g < kGroups ? uint32_t(words[g]) : 0u;
                uint32_t sum = kbs;
#pragma unroll
                for (uint32_t d = 1; d < 32; d *= 2) {
                    const uint32_t lower = __shfl_up_sync(~0u, sum, d);
                    if (lane >= d) sum += lower;
                }
                const uint32_t kb0 = min(begin + sum - kbs, total), kb1 = min(begin + sum, total);
                const uint32_t listed = __ballot_sync(~0u, kb1 > kb0);
                if (kb1 > kb0) {
                    int32_t* e = words + kFirstEntry + 3 * (count + __popc(listed & ((1u << lane) - 1u)));
                    e[0] = int32_t(g), e[1] = int32_t(kb0), e[2] = int32_t(kb1);
                }
                count += __popc(listed);
                begin = min(begin + __shfl_sync(~0u, sum, 31), total);
            }
            if (lane == 0) words[kGroups] = int32_t(count);
        }
        __syncthreads();
    }

    __device__ __forceinline__ bool next(Tile& t) {
        if (tile_idx >= num_tiles) return false;
        const uint32_t j = tile_idx / tiles_per_group;
        raster<Cfg>(tile_idx - j * tiles_per_group, num_m_blocks, t.m_block, t.n_block);
        const int32_t* e = entries + 3 * j;
        t.group = e[0];
        t.kb0 = uint32_t(e[1]), t.kb1 = uint32_t(e[2]);
        t.rows = m;
        t.passes = 1;
        tile_idx += gridDim.x;
        return true;
    }

    // A and B are shared by the groups (a group is a run of their columns: the tile's k-blocks), so B's rows
    // are the tile's whatever its group; t.group selects D's matrix (the epilogue's third coordinate).
    __device__ __forceinline__ int32_t pass_group(const Tile&, uint32_t) const { return 0; }
};

}  // namespace cg8

// The masked layout's tiles: G groups of max_m rows each (A, its scales and D stack them), of which
// masked_m[g] are valid. The counts are read on the GPU only, so the tile count is only known here.
#pragma once
#include "tile.cuh"
#include "../ptx/memory.cuh"

namespace cg8 {

template <class Cfg>
struct MaskedTiles {
    static_assert(Cfg::kRecordSlots == 0, "only the contiguous layout has a record ring");
    static_assert(Cfg::kSplitK == 1, "only the normal layout splits K");
    using Tile = cg8::Tile<Cfg>;
    static constexpr uint32_t kGroups = Cfg::kNumGroups;
    static constexpr bool kFetchEarly = false;
    static constexpr bool kPinnedBase = false;
    static constexpr StageWalk kStageWalk = StageWalk::kRolled;
    // Tiles of one slab per math warpgroup: a slab wholly past its group's valid rows is idle (its
    // warpgroup computes nothing), so a group's last block of at most 64 valid rows is about half a tile.
    static constexpr bool kIdleSlabs = Cfg::kUnitsPerWG == 1 && Cfg::kNumMathWG == 2;
    // Every group's valid rows (clamped to [0, max_m]), then the running total of tiles up to and
    // including each group: the search in locate().
    static constexpr bool kZeroRows = false;        // zero_rows() may be non-zero
    static constexpr bool kStoresByThreads = true;  // store_by_threads() may be true
    static constexpr bool kScalesPerGroup = true;   // e4m3 output: a block of out_scale per group
    static constexpr uint32_t kSmemWordBytes = (kGroups * 8 + 15) / 16 * 16;
    static constexpr uint32_t kRingBarriers = 0;
    // The search for a tile's group takes log2 steps over the groups' tile totals.
    static constexpr uint32_t kGroupSearchTop = [] {
        uint32_t p = 1;
        while (p < kGroups) p *= 2;
        return p;
    }();

    uint32_t m;               // max_m: rows per group
    const int32_t* layout;    // kGroups valid rows, then kGroups running tile totals (shared memory)
    uint32_t num_m_blocks;
    uint32_t tile_idx;
    uint32_t split_from;      // kTailSplit: the first tile of the split last wave (the tile count if none)
    uint32_t total;           // kTailSplit: the tile count

    __device__ __forceinline__ MaskedTiles(uint32_t m_, const int32_t*, int32_t* words, uint64_t*, uint32_t, uint32_t)
        : m(m_), layout(words) {
        num_m_blocks = (m + Cfg::kBlockM - 1) / Cfg::kBlockM;
        tile_idx = blockIdx.x;
        if constexpr (Cfg::kTailSplit) {
            total = uint32_t(layout[2 * kGroups - 1]);
            const uint32_t tail = total % gridDim.x;
            split_from = (tail != 0 && 2 * tail <= gridDim.x) ? total - tail : total;
        }
    }

    static constexpr bool kTailMaps = false;
    __device__ __forceinline__ static uint32_t rows_a_landing(const Tile&) { return Cfg::kBlockM; }  // whole tiles
    __device__ __forceinline__ static void init_barriers(uint64_t*) {}

    // Every thread, before the set-up barrier: each group's valid rows into shared memory, so that the
    // loads' latency overlaps the set-up (a walk through global memory would put one dependent load
    // per group on the way to every CTA's next tile).
    __device__ __forceinline__ static void load_layout(const int32_t* masked_m, int32_t* words, uint32_t m, uint32_t) {
        for (uint32_t g = threadIdx.x; g < kGroups; g += Cfg::kThreads) {
            const int32_t rows = __ldg(masked_m + g);
            words[g] = rows < 0 ? 0 : int32_t(min(uint32_t(rows), m));
        }
    }

    // After it: the running tile totals, by the first warp 32 groups at a time.
    __device__ __forceinline__ static void finish_layout(int32_t* words, uint32_t) {
        if (threadIdx.x < 32) {
            uint32_t total = 0;
            for (uint32_t base = 0; base < kGroups; base += 32) {
                const uint32_t g = base + threadIdx.x;
                uint32_t sum = g < kGroups ? (uint32_t(words[g]) + Cfg::kBlockM - 1) / Cfg::kBlockM * Cfg::kNumNBlocks
                                           : 0u;
#pragma unroll
                for (uint32_t d = 1; d < 32; d *= 2) {
                    const uint32_t lower = __shfl_up_sync(~0u, sum, d);
                    if (threadIdx.x >= d) sum += lower;
                }
                if (g < kGroups) words[kGroups + g] = int32_t(total + sum);
                total += __shfl_sync(~0u, sum, 31);
            }
        }
        __syncthreads();
    }

    __device__ __forceinline__ bool next(Tile& t) {
        if (Cfg::kTailSplit && tile_idx >= split_from) return false;  // the split tiles: see tail()
        if (!locate(tile_idx, t)) return false;
        tile_idx += gridDim.x;
        return true;
    }

    // kTailSplit, once next() has returned false: this CTA's share of the split last wave, if any. The
    // cluster of CTAs 2c and 2c+1 takes tile split_from + c, the first CTA the first half of its
    // k-blocks (rounded up), the second the rest.
    __device__ __forceinline__ bool tail(Tile& t) const {
        const uint32_t idx = split_from + blockIdx.x / 2;
        if (idx >= total || !locate(idx, t)) return false;
        t.split = 1 + blockIdx.x % 2;
        return true;
    }

    // Tile `idx` of the groups' tiles, in the group holding it; false past the last.
    __device__ __forceinline__ bool locate(uint32_t idx, Tile& t) const {
        // The group: the first whose running tile total exceeds idx, found in a fixed number of steps
        // (a cursor carried from tile to tile took the main loop's descriptors off the uniform
        // datapath: NOTES.md v8).
        const int32_t* tile_end = layout + kGroups;
        uint32_t g = 0;
#pragma unroll
        for (uint32_t step = kGroupSearchTop; step != 0; step /= 2)
            if (g + step <= kGroups && uint32_t(tile_end[g + step - 1]) <= idx) g += step;
        if (g >= kGroups) return false;
        const uint32_t first = g == 0 ? 0u : uint32_t(tile_end[g - 1]);
        t.rows = uint32_t(layout[g]);
        const uint32_t m_blocks = (t.rows + Cfg::kBlockM - 1) / Cfg::kBlockM;
        const uint32_t local = idx - first;
        // Light tiles last: when the last wave is no larger than one m-block's tiles and the last group
        // holding tiles ends in a block of at most 64 valid rows (kIdleSlabs), that block's tiles go to
        // the end, so the last wave is all light tiles. Otherwise the raster order stays, which keeps
        // the B tiles' L2 sharing (NOTES.md v15).
        const uint32_t total_tiles = uint32_t(tile_end[kGroups - 1]);
        const uint32_t last_wave = total_tiles % gridDim.x;
        const bool light_last = kIdleSlabs && (t.rows % Cfg::kBlockM) - 1u < 64u &&
                                uint32_t(tile_end[g]) == total_tiles && last_wave - 1u < Cfg::kNumNBlocks;
        const uint32_t full_tiles = light_last ? (m_blocks - 1) * Cfg::kNumNBlocks : ~0u;
        if (local >= full_tiles) {
            t.m_block = m_blocks - 1;
            t.n_block = local - full_tiles;
        } else {
            raster<Cfg>(local, light_last ? m_blocks - 1 : m_blocks, t.m_block, t.n_block);
        }
        t.group = int32_t(g);
        t.passes = 1;
        return true;
    }

    template <bool kMath>
    __device__ __forceinline__ void decode(Tile&) {}
    __device__ __forceinline__ void run_record_warp(uint32_t, uint32_t) const {}

    // Groups are stacked max_m rows apart in A and D, kNumKBlocks rows apart in A's scale grid.
    __device__ __forceinline__ uint32_t a_row(const Tile& t) const {
        return uint32_t(t.group) * m + t.m_block * Cfg::kBlockM;
    }
    __device__ __forceinline__ uint32_t sa_row(const Tile& t) const { return uint32_t(t.group) * Cfg::kNumKBlocks; }
    __device__ __forceinline__ int32_t pass_group(const Tile& t, uint32_t) const { return t.group; }
    __device__ __forceinline__ uint32_t active_slabs(const Tile&, uint32_t, uint32_t) const {
        return (1u << Cfg::kUnitsPerWG) - 1;
    }
    // Whether the slab of math warpgroup `wg` is wholly past the group's valid rows (warp-uniform).
    __device__ __forceinline__ bool slab_idle(const Tile& t, uint32_t wg) const {
        return kIdleSlabs && __reduce_or_sync(~0u, t.m_block * Cfg::kBlockM + wg * kSlabRows >= t.rows ? 1u : 0u);
    }
    __device__ __forceinline__ uint32_t zero_rows(const Tile&) const { return 0u; }
    // A group's last block: only rows below masked_m may be written, so the math threads copy it out.
    __device__ __forceinline__ bool store_by_threads(const Tile& t) const {
        return t.m_block * Cfg::kBlockM + Cfg::kBlockM > t.rows;
    }
};

}  // namespace cg8

// The normal layout's tiles: one GEMM of M rows, rasterized for L2 reuse. With split K (kSplitK > 1) each
// cluster of kSplitK CTAs walks the tiles as one, each CTA taking its share of every tile's k-blocks. With
// CTAs sharing a scale group (kGroupCtas > 1) each cluster walks the 128-column groups, each CTA taking its
// tile of every group (a group's last tiles may lie past N: they run on zeros and store nothing, so that
// every CTA of the cluster takes part in the amax exchange). With K at run time (the weight gradient) every
// tile takes all ceil(K / 128) k-blocks.
#pragma once
#include "tile.cuh"

namespace cg8 {

template <class Cfg>
struct NormalTiles : WholeTiles<Cfg> {
    static_assert(Cfg::kRecordSlots == 0, "only the contiguous layout has a record ring");
    static_assert(!Cfg::kTailSplit, "only the masked layout splits its last wave");
    using Tile = cg8::Tile<Cfg>;
    // (next() is arithmetic only: fetched early, it took the main loop's descriptors off the uniform datapath,
    // NOTES.md v8.)
    static constexpr StageWalk kStageWalk = StageWalk::kStageAligned;  // NOTES.md v11, v15
    static constexpr uint32_t kSmemWordBytes = 0;

    // What a cluster walks: tiles, or with CTAs sharing a scale group, the groups' columns of tiles.
    static constexpr uint32_t kClusterCtas = Cfg::kSplitK * Cfg::kGroupCtas;
    static constexpr uint32_t kWalkNBlocks = (Cfg::kNumNBlocks + Cfg::kGroupCtas - 1) / Cfg::kGroupCtas;

    uint32_t m;             // rows of A
    uint32_t num_m_blocks;
    uint32_t tile_idx;
    uint32_t num_k_blocks;  // kRuntimeK: ceil(K / 128)

    __device__ __forceinline__ NormalTiles(uint32_t m_, const int32_t*, int32_t*, uint64_t*, uint32_t, uint32_t k)
        : m(m_) {
        num_m_blocks = (m + Cfg::kBlockM - 1) / Cfg::kBlockM;
        if constexpr (Cfg::kRuntimeK) num_k_blocks = (k + kBlockK - 1) / kBlockK;
        tile_idx = blockIdx.x / kClusterCtas;  // the cluster's first tile (a cluster's CTAs are consecutive in x)
    }

    __device__ __forceinline__ static void load_layout(const int32_t*, int32_t*, uint32_t, uint32_t) {}
    __device__ __forceinline__ static void finish_layout(int32_t*, uint32_t) {}

    __device__ __forceinline__ bool next(Tile& t) {
        if (tile_idx >= num_m_blocks * kWalkNBlocks) return false;
        raster<Cfg, kWalkNBlocks>(tile_idx, num_m_blocks, t.m_block, t.n_block);
        if constexpr (Cfg::kGroupCtas > 1) t.n_block = t.n_block * Cfg::kGroupCtas + blockIdx.x % Cfg::kGroupCtas;
        t.rows = m;
        t.group = 0;
        t.passes = 1;
        if constexpr (Cfg::kSplitK > 1) t.split = 1 + blockIdx.x % Cfg::kSplitK;  // 1 + the rank in the cluster
        if constexpr (Cfg::kRuntimeK) t.kb0 = 0, t.kb1 = num_k_blocks;
        tile_idx += gridDim.x / kClusterCtas;
        return true;
    }

    // Rows of A (and of its scales) that land in a stage for tile t: the rows left in A, at most a tile. The
    // stage's other rows are never written; an MMA row depends only on its own row of A, and those rows are
    // never stored. Rows past the tensor are slow to load: up to 25% at K = 7168 when M is below a tile
    // (NOTES.md v18), 1.33–1.41x the time at 65x4096x16384 when they fill most of the last m-block (v46). So the
    // main maps' boxes hold min(M, kBlockM) rows (fp8_gemm.a_boxes), and a last m-block of fewer rows, after
    // others, loads through the tail maps, whose boxes hold just its rows. A multicast pair lands a whole tile.
    static constexpr bool kTailMaps = Cfg::kMulticast == 1;
    __device__ __forceinline__ uint32_t rows_a_landing(const Tile& t) const {
        if constexpr (kTailMaps) return min(m - t.m_block * Cfg::kBlockM, Cfg::kBlockM);
        else return Cfg::kBlockM;
    }
    __device__ __forceinline__ bool tail_maps(const Tile& t) const {
        return t.m_block != 0 && rows_a_landing(t) < Cfg::kBlockM;
    }
    // Whether any tile of M rows loads through the tail maps (the kernel prefetches them only then).
    __device__ __forceinline__ static bool has_tail(uint32_t m) { return m > Cfg::kBlockM && m % Cfg::kBlockM != 0; }

    __device__ __forceinline__ int32_t pass_group(const Tile& t, uint32_t) const { return t.group; }
};

}  // namespace cg8

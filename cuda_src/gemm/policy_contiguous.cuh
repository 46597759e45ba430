// The contiguous layout's tiles: the experts' rows concatenated, each expert's segment starting at a
// multiple of 64 rows, m_indices giving each row's expert (-1 on padding). Tiles run in the normal
// raster order; a tile's passes come from its slabs' experts. Pairs sharing B (kShareB) walk pairs of
// m-blocks in that order, the cluster's CTA of rank r taking m-block 2p + r of pair p.
#pragma once
#include "tile.cuh"
#include "record_ring.cuh"

namespace cg8 {

template <class Cfg>
struct ContiguousTiles {
    static_assert(Cfg::kRecordSlots > 0, "the contiguous layout needs its record ring");
    static_assert(!Cfg::kTailSplit, "only the masked layout splits its last wave");
    static_assert(Cfg::kSplitK == 1, "only the normal layout splits K");
    using Tile = cg8::Tile<Cfg>;
    using Records = RecordRing<Cfg>;
    static constexpr uint32_t kSlabs = Cfg::kSlabsPerTile;
    static constexpr uint32_t kUnitsPerWG = Cfg::kUnitsPerWG;
    // Each role fetches its next tile while the current one is in flight: the producer's slab-id loads
    // then cost nothing between tiles.
    static constexpr bool kFetchEarly = true;
    // The rolled main loops form shared-memory addresses from a base pinned in a uniform register (else
    // ptxas re-derived it from SR_CgaCtaId before every stage's wait: NOTES.md v11).
    static constexpr bool kPinnedBase = true;
    static constexpr StageWalk kStageWalk = StageWalk::kRingRounds;  // NOTES.md v15
    static constexpr bool kIdleSlabs = false;
    static constexpr bool kZeroRows = true;        // zero_rows() may be non-zero
    static constexpr bool kStoresByThreads = false;  // store_by_threads() may be true
    static constexpr bool kScalesPerGroup = false;  // e4m3 output: one block of out_scale
    static constexpr uint32_t kSmemWordBytes = Records::kBytes;
    static constexpr uint32_t kRingBarriers = 2 * Records::kSlots;
    static constexpr bool kPairs = Cfg::kShareB;

    uint32_t m;               // rows of A (sum M)
    const int32_t* layout;    // m_indices (global)
    uint32_t num_m_blocks;
    uint32_t tile_idx;
    uint32_t thread_row;      // math threads: this thread's first accumulator row in a tile (kBlockM: producer)
    uint32_t records = 0;     // math threads: tile records taken from the ring
    Records ring;

    __device__ __forceinline__ ContiguousTiles(uint32_t m_, const int32_t* m_indices, int32_t* words,
                                               uint64_t* ring_barriers, uint32_t thread_row_, uint32_t)
        : m(m_), layout(m_indices), thread_row(thread_row_), ring(words, ring_barriers) {
        num_m_blocks = (m + Cfg::kBlockM - 1) / Cfg::kBlockM;
        tile_idx = blockIdx.x;
    }

    static constexpr bool kTailMaps = false;
    __device__ __forceinline__ static uint32_t rows_a_landing(const Tile&) { return Cfg::kBlockM; }  // whole tiles
    __device__ __forceinline__ static void init_barriers(uint64_t* ring_barriers) {
        Records(nullptr, ring_barriers).init_barriers();
    }
    __device__ __forceinline__ static void load_layout(const int32_t*, int32_t*, uint32_t, uint32_t) {}
    __device__ __forceinline__ static void finish_layout(int32_t*, uint32_t) {}

    // The normal layout's raster walk, written out again: shared through a helper, it moved the normal
    // kernels' code (NOTES.md v16).
    __device__ __forceinline__ bool next(Tile& t) {
        if constexpr (kPairs) {  // (the grid is even, so tile_idx % 2 is the CTA's rank in its pair)
            const uint32_t pairs = (num_m_blocks + 1) / 2;  // an odd last m-block's peer is past M: no passes
            if (tile_idx / 2 >= pairs * Cfg::kNumNBlocks) return false;
            uint32_t pair;
            raster<Cfg>(tile_idx / 2, pairs, pair, t.n_block);
            t.m_block = 2 * pair + tile_idx % 2;
        } else {
            if (tile_idx >= num_m_blocks * Cfg::kNumNBlocks) return false;
            raster<Cfg>(tile_idx, num_m_blocks, t.m_block, t.n_block);
        }
        t.rows = m;
        t.group = 0;
        t.passes = 1;
        // The TMA thread reads its slabs' experts itself (the math threads take them from the record
        // ring). Only the loads are issued here; decode() looks at the values a whole tile later, so no
        // branch waits for them (branching on each id serialized the loads: NOTES.md v11).
        if (thread_row >= Cfg::kBlockM) {
#pragma unroll
            for (uint32_t s = 0; s < kSlabs; ++s) {
                t.slab_group[s] = __ldg(layout + min(t.m_block * Cfg::kBlockM + s * 64, m - 1));
                if constexpr (kPairs) t.peer_group[s] = __ldg(layout + min((t.m_block ^ 1) * Cfg::kBlockM + s * 64, m - 1));
            }
        }
        tile_idx += gridDim.x;
        return true;
    }
    __device__ __forceinline__ bool tail(Tile&) const { return false; }

    // The producer warpgroup's second warp: every tile's record, in the tile order of the other roles.
    __device__ __forceinline__ void run_record_warp(uint32_t warp, uint32_t lane) const {
        if (warp != 1) return;
        ContiguousTiles walk(m, layout, ring.words, ring.full, Cfg::kBlockM, 0u);
        Tile rt;
        for (uint32_t n = 0; walk.next(rt); ++n)
            ring.publish(rt.m_block, n, layout, m, lane, kPairs ? __popc(walk.peer_passes(rt)) : 0u);
    }

    // Pairs sharing B: the peer tile's passes (bit p: a pass starts at slab p), from the ids next() loaded.
    __device__ __forceinline__ uint32_t peer_passes(Tile& t) const {
        uint32_t passes, heads, valid;
        find_passes(t.m_block ^ 1, t.peer_group, passes, heads, valid);
        return passes;
    }

    // The passes (bit p: a pass starts at slab p), each slab's pass head (2 bits a slab) and the valid slabs
    // (bit s) of the tile at m_block whose slabs' expert ids are `ids`; ids of slabs past M become -1.
    __device__ __forceinline__ void find_passes(uint32_t m_block, int32_t (&ids)[kSlabs], uint32_t& passes,
                                                uint32_t& heads, uint32_t& valid) const {
        passes = heads = valid = 0;
        int32_t prev = -1;
        uint32_t head = 0;
#pragma unroll
        for (uint32_t s = 0; s < kSlabs; ++s) {
            const int32_t g = m_block * Cfg::kBlockM + s * 64 < m ? ids[s] : -1;
            ids[s] = g;
            if (g >= 0 && g < int32_t(Cfg::kNumGroups)) {  // ids past the last expert count as padding
                if (g != prev) head = s, passes |= 1u << s;
                valid |= 1u << s;
                heads |= head << (2 * s);
                prev = g;
            } else {
                prev = -1;
            }
        }
    }

    // The tile's passes (and a math thread's zero rows), from the slab ids next() loaded (the TMA
    // thread) or from the tile's record (the math threads).
    template <bool kMath>
    __device__ __forceinline__ void decode(Tile& t) {
        uint32_t zero_words[2 * kUnitsPerWG];
        uint32_t peer_count = 0;  // pairs sharing B: the peer tile's pass count (the math threads': its record's)
        if constexpr (kMath) ring.take(records++, thread_row, t.slab_group, zero_words, peer_count);
        find_passes(t.m_block, t.slab_group, t.passes, t.heads, t.valid);
        if constexpr (kPairs) {
            const uint32_t passes = __popc(t.passes);
            if constexpr (!kMath) {
                const uint32_t peer = peer_passes(t);
                peer_count = __popc(peer);
                t.share_b = passes == 1 && peer_count == 1 &&
                            slab_id(t.slab_group, __ffs(t.passes) - 1) == slab_id(t.peer_group, __ffs(peer) - 1);
            }
            t.pad_passes = peer_count > passes ? peer_count - passes : 0u;
        }
        // The math thread's own rows that come out as zeros (an id that is no expert's).
        t.zero = 0;
#pragma unroll
        for (uint32_t i = 0; i < 2 * kUnitsPerWG && kMath; ++i) {
            const uint32_t r = thread_row + Cfg::unit_row(i / 2) + (i % 2) * 8;
            if ((zero_words[i] >> (r % 32)) & 1u) t.zero |= 1u << i;
        }
    }

    // Pairs sharing B: the k-blocks this CTA walks through after the tile's own (Tile::pad_passes).
    __device__ __forceinline__ static uint32_t pad_kblocks(const Tile& t) { return t.pad_passes * Cfg::kNumKBlocks; }

    __device__ __forceinline__ uint32_t a_row(const Tile& t) const { return t.m_block * Cfg::kBlockM; }
    __device__ __forceinline__ uint32_t sa_row(const Tile&) const { return 0u; }

    // ids[p] by selects (an index at run time would put the array in local memory).
    __device__ __forceinline__ static int32_t slab_id(const int32_t (&ids)[kSlabs], uint32_t p) {
        int32_t g = ids[0];
#pragma unroll
        for (uint32_t s = 1; s < kSlabs; ++s)
            if (p == s) g = ids[s];
        return g;
    }

    // The expert whose B the pass starting at slab p multiplies with.
    __device__ __forceinline__ int32_t pass_group(const Tile& t, uint32_t p) const { return slab_id(t.slab_group, p); }

    // Units (bit w: math warpgroup wg's w-th, on slab Cfg::slab(wg, w)) that do MMAs in the pass starting at slab p.
    __device__ __forceinline__ uint32_t active_slabs(const Tile& t, uint32_t p, uint32_t wg) const {
        uint32_t mask = 0;
#pragma unroll
        for (uint32_t w = 0; w < kUnitsPerWG; ++w) {
            const uint32_t s = Cfg::slab(wg, w);
            if (((t.valid >> s) & 1u) && ((t.heads >> (2 * s)) & 3u) == p) mask |= 1u << w;
        }
        return mask;
    }
    __device__ __forceinline__ bool slab_idle(const Tile&, uint32_t) const { return false; }
    __device__ __forceinline__ uint32_t zero_rows(const Tile& t) const { return t.zero; }
    __device__ __forceinline__ bool store_by_threads(const Tile&) const { return false; }
};

}  // namespace cg8

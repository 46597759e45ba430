// A tile of the output and the order tiles are walked in: what every tile policy (scheduler.cuh)
// shares.
#pragma once
#include "config.cuh"

namespace cg8 {

// A tile of the output: kBlockM x kBlockN, worked in one or more passes, each with one group's B.
// Normal and masked tiles have one pass. A contiguous tile's rows may belong to several experts
// (segments start at multiples of 64 rows): each slab takes the expert of its first row, and every
// run of slabs with the same valid expert is one pass; slabs of other passes (and padding slabs) skip
// their MMAs in it. A tile with no valid slab has no pass: no loads, no MMA, zeros out.
template <class Cfg>
struct Tile {
    static constexpr uint32_t kSlabs = Cfg::kSlabsPerTile;
    uint32_t m_block;  // block index within the group's rows
    uint32_t n_block;
    int32_t group;     // the group of the tile's rows (normal: 0; contiguous: see slab_group)
    uint32_t rows;     // rows of that group (masked: its valid rows)
    uint32_t passes;   // bit p: a pass starts at slab p
    uint32_t heads;    // contiguous: 2 bits per slab, the slab its pass starts at
    uint32_t valid;    // contiguous: bit s: slab s has a valid expert
    uint32_t zero;     // contiguous, math threads: bit 2w+h: this thread's row (unit w, +8h) is no expert's
    int32_t slab_group[kSlabs];  // contiguous: each slab's expert id (valid slabs only)
    // Pairs sharing B (kShareB): the peer tile's slab ids (the TMA thread's), whether the pair shares this tile's B
    // (both tiles one pass of one expert), and the passes the peer tile has beyond this one's, whose stages this
    // CTA walks through (a pair uses the ring in step: each multicast lands in the same stage of both CTAs).
    int32_t peer_group[kSlabs];
    bool share_b;
    uint32_t pad_passes;
    uint32_t split;    // a split tile: 1 + this CTA's share of it (its rank in the cluster); 0: not split
    uint32_t kb0, kb1; // K at run time (kRuntimeK): the tile's k-blocks, as columns of A's and B's scale grids

    // The k-blocks of a split tile's share s (of kSplits, the earlier shares rounded up), and this CTA's
    // (all of them when the tile is not split). Each CTA stores column chunk split - 1 (split.cuh).
    __device__ __forceinline__ static uint32_t kb_first(uint32_t s) {
        return (s * Cfg::kNumKBlocks + Cfg::kSplits - 1) / Cfg::kSplits;
    }
    __device__ __forceinline__ uint32_t kb_begin() const {
        if constexpr (Cfg::kRuntimeK) return kb0;
        else return split ? kb_first(split - 1) : 0u;
    }
    __device__ __forceinline__ uint32_t kb_end() const {
        if constexpr (Cfg::kRuntimeK) return kb1;
        else return split ? kb_first(split) : Cfg::kNumKBlocks;
    }

    // One pass in which every slab works (no expert boundary or padding slab in the tile): the common
    // case, which runs code without the pass bookkeeping. Normal and masked tiles are always whole.
    __device__ __forceinline__ bool whole() const { return passes == 1u && valid == (1u << kSlabs) - 1; }
};

// The answers a tile policy gives when its tiles are whole (one pass in which every slab computes, no rows
// to zero), stored by TMA and walked without fetching ahead: the normal and k-grouped layouts' policies
// start from these (scheduler.cuh lists the interface).
template <class Cfg>
struct WholeTiles {
    using Tile = cg8::Tile<Cfg>;
    static constexpr bool kFetchEarly = false;
    static constexpr bool kPinnedBase = false;
    static constexpr bool kIdleSlabs = false;
    static constexpr bool kZeroRows = false;        // zero_rows() may be non-zero
    static constexpr bool kStoresByThreads = false;  // store_by_threads() may be true
    static constexpr bool kScalesPerGroup = false;  // e4m3 output: one block of out_scale
    static constexpr uint32_t kRingBarriers = 0;
    static constexpr bool kTailMaps = false;        // tail_maps() may be true

    __device__ __forceinline__ static void init_barriers(uint64_t*) {}
    __device__ __forceinline__ bool tail(Tile&) const { return false; }
    template <bool kMath>
    __device__ __forceinline__ void decode(Tile&) {}
    __device__ __forceinline__ void run_record_warp(uint32_t, uint32_t) const {}

    // Row of A and D where the tile starts; row of A's scale grid (M-major: its k-block) for k-block 0.
    __device__ __forceinline__ uint32_t a_row(const Tile& t) const { return t.m_block * Cfg::kBlockM; }
    __device__ __forceinline__ uint32_t sa_row(const Tile&) const { return 0u; }
    __device__ __forceinline__ uint32_t active_slabs(const Tile&, uint32_t, uint32_t) const {
        return (1u << Cfg::kUnitsPerWG) - 1;
    }
    __device__ __forceinline__ bool slab_idle(const Tile&, uint32_t) const { return false; }
    __device__ __forceinline__ uint32_t zero_rows(const Tile&) const { return 0u; }
    __device__ __forceinline__ bool store_by_threads(const Tile&) const { return false; }
};

// Rasterize `local` over (m_blocks x kNBlocks): bands of kRasterGroup n-blocks, m-blocks within a band, so a
// wave of CTAs shares both A and B tiles in L2.
template <class Cfg, uint32_t kNBlocks = Cfg::kNumNBlocks>
__device__ __forceinline__ void raster(uint32_t local, uint32_t m_blocks, uint32_t& mb, uint32_t& nb) {
    const uint32_t per_band = Cfg::kRasterGroup * m_blocks;
    const uint32_t band = local / per_band;
    const uint32_t first_n = band * Cfg::kRasterGroup;
    const uint32_t width = min(Cfg::kRasterGroup, kNBlocks - first_n);
    const uint32_t r = local - band * per_band;
    mb = r / width;
    nb = first_n + r % width;
}

// How whole tiles walk the stage ring with compile-time shared-memory addresses (mainloop.cuh).
enum class StageWalk : uint32_t {
    kRolled,        // a rolled loop over the k-blocks
    kStageAligned,  // every tile starts at stage 0; stages a tile leaves unused are passed through
    kRingRounds,    // a tile takes the ring where the last one left it: rolled up to stage 0, whole rounds
};

}  // namespace cg8

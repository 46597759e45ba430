// The producer warpgroup. Its first thread issues every TMA load: per k-block, A's tile and its scales
// (multicast to both CTAs of a pair when kMulticast == 2), B's tile (with kShareB, the pair's B, half from
// each CTA, multicast to both), and with 1x128 B scales (the weight gradient) B's scales, all landing on the
// stage's `full` barrier. Its second warp publishes the contiguous layout's tile records (record_ring.cuh), or
// with kScalesByWarp stages each tile's B scales (stage_scales), or with kLoadD stores each tile's D (store_tiles).
#pragma once
#include "ring.cuh"
#include "smem.cuh"
#include "trace.cuh"
#include "../ptx/tma.cuh"

namespace cg8 {

template <class Cfg>
struct Producer {
    using Tiles = TilePolicy<Cfg>;
    using Tile = cg8::Tile<Cfg>;
    using Smem = SmemLayout<Cfg>;

    const CUtensorMap& tmap_a;
    const CUtensorMap& tmap_b;
    const CUtensorMap& tmap_sa;
    const CUtensorMap& tmap_sb;  // 1x128 B scales (kRowScalesB); the forward kernels pass tmap_sa, unused
    const CUtensorMap& tmap_a_tail;   // A and its scales with boxes of the last m-block's rows (tail_maps)
    const CUtensorMap& tmap_sa_tail;
    const CUtensorMap& tmap_d;        // kLoadD: D, loaded for each tile and stored back (load_d, store_tiles)
    const float* __restrict__ sb;  // B's 128x128 block scales (kScalesByWarp)
    const SharedMemory<Cfg> sm;
    Tiles& tiles;               // the tile walk (the kernel's)
    RingPosition<Cfg>& ring;    // the position in the stage ring (the kernel's)
    uint32_t cta_rank;
    uint32_t d_tiles = 0;       // kLoadD: tiles whose D this thread has loaded

    // D's coordinates (the 3-D map's: column, row, group) of atom j of tile t, as the epilogue stores it.
    __device__ __forceinline__ void d_atom(const Tile& t, uint32_t j, int32_t& c0, int32_t& c1) const {
        const int32_t n0 = int32_t(t.n_block * Cfg::kBlockN), row0 = int32_t(tiles.a_row(t));
        const int32_t first = int32_t(j * Cfg::kAtomCols);
        c0 = Cfg::kTransposeD ? row0 + first : n0 + first;
        c1 = Cfg::kTransposeD ? n0 : row0;
    }

    // kLoadD: tile t's D into the output tile once the previous tile's store has read it (d_empty), landing on
    // d_full; issued after the tile's last k-block, so it arrives while those k-blocks' MMAs run (issued earlier in
    // the tile, its bytes slowed the main loop: NOTES.md v49).
    __device__ __forceinline__ void load_d(const Tile& t) {
        mbar_wait(sm.d_empty, (d_tiles & 1) ^ 1);
        mbar_arrive_expect_tx(sm.d_full, Cfg::kNumAtoms * Cfg::kAtomTileBytes);
#pragma unroll 1
        for (uint32_t j = 0; j < Cfg::kNumAtoms; ++j) {
            int32_t c0, c1;
            d_atom(t, j, c0, c1);
            tma_load_3d(sm.d + j * Cfg::kAtomTileBytes, &tmap_d, sm.d_full, c0, c1, t.group);
        }
        ++d_tiles;
    }

    // kLoadD, the producer warpgroup's second warp (lane 0): each tile's D stored once every math thread has
    // added into it (d_written); d_empty once the store has read it. Every store completes before the CTA exits.
    __device__ __forceinline__ void store_tiles() {
        Tile t;
#pragma unroll 1
        for (uint32_t n = 0; tiles.next(t); ++n) {
            mbar_wait(sm.d_written, n & 1);
#pragma unroll 1
            for (uint32_t j = 0; j < Cfg::kNumAtoms; ++j) {
                int32_t c0, c1;
                d_atom(t, j, c0, c1);
                tma_store_3d(&tmap_d, sm.d + j * Cfg::kAtomTileBytes, c0, c1, t.group);
            }
            bulk_commit_group();
            bulk_wait_group_read();
            mbar_arrive(sm.d_empty);
        }
        bulk_wait_group0();
    }

    // Every load of one tile; after_load() runs after each k-block's.
    template <bool kSplitTile, bool kWhole, class AfterLoad>
    __device__ __forceinline__ void load_tile(const Tile& t, AfterLoad&& after_load) {
        const int32_t a_row = int32_t(tiles.a_row(t));
        const int32_t sa_row0 = int32_t(tiles.sa_row(t));
        const int32_t sa_col = int32_t(t.m_block * Cfg::kBlockM);
        const uint32_t rows_a = tiles.rows_a_landing(t);
        bool tail = false;  // a last m-block of fewer rows, after others: boxes of just its rows (the policy's)
        if constexpr (Tiles::kTailMaps) tail = tiles.tail_maps(t);
        const CUtensorMap* map_a = tail ? &tmap_a_tail : &tmap_a;
        const CUtensorMap* map_sa = tail ? &tmap_sa_tail : &tmap_sa;
        const uint32_t tx_bytes = Smem::stage_tx_bytes(rows_a);
        CG8_MARK(kTraceLoads, (t.n_block << 16) | t.m_block);
#pragma unroll 1
        for (uint32_t passes = kWhole ? 1u : t.passes; passes != 0; passes &= passes - 1) {
            const int32_t group = tiles.pass_group(t, kWhole ? 0u : __ffs(passes) - 1);
            const int32_t b_row = int32_t(uint32_t(group) * Cfg::kShapeN + t.n_block * Cfg::kBlockN);
            constexpr bool kRanged = kSplitTile || Cfg::kRuntimeK;  // the tile says which k-blocks
            const uint32_t kb_end = kRanged ? t.kb_end() : Cfg::kNumKBlocks;
#pragma unroll 1
            for (uint32_t kb = kRanged ? t.kb_begin() : 0u; kb < kb_end; ++kb) {
                mbar_wait(&sm.empty[ring.stage], ring.phase ^ 1);
                uint64_t* bar = &sm.full[ring.stage];
#ifdef CG8_PROBE_NO_LOADS  // benchmarks.ablation_probe only: the stage is declared full with nothing loaded
                mbar_arrive(bar);
                ring.advance();
                after_load();
                continue;
#endif
                mbar_arrive_expect_tx(bar, tx_bytes);
                const uint32_t half = cta_rank * Cfg::kMulticastRows;  // this CTA's share of the A rows
                if constexpr (Cfg::kMulticast > 1 && !Cfg::kShareB) {
                    tma_load_2d_multicast(sm.a + ring.stage * Smem::kStageA + half * kBlockK, &tmap_a, bar,
                                          int32_t(kb * kBlockK), a_row + int32_t(half), 0x3);
                    tma_load_2d_multicast(sm.sa + ring.stage * Cfg::kBlockM + half, &tmap_sa, bar,
                                          sa_col + int32_t(half), sa_row0 + int32_t(kb), 0x3);
                } else {
                    tma_load_2d(sm.a + ring.stage * Smem::kStageA, map_a, bar, int32_t(kb * kBlockK), a_row);
                    tma_load_2d(sm.sa + ring.stage * Cfg::kBlockM, map_sa, bar, sa_col, sa_row0 + int32_t(kb));
                }
                if constexpr (Cfg::kShareB) {  // B's box is half a tile: one half each, or both halves here
                    uint8_t* b = sm.b + ring.stage * Smem::kStageB;
                    constexpr uint32_t kHalf = Cfg::kBlockN / 2;  // B's box (fp8_gemm.tensor_maps)
                    const uint32_t own = cta_rank * kHalf;
                    if (t.share_b) {
                        tma_load_2d_multicast(b + own * kBlockK, &tmap_b, bar, int32_t(kb * kBlockK), b_row + int32_t(own), 0x3);
                    } else {
                        tma_load_2d(b, &tmap_b, bar, int32_t(kb * kBlockK), b_row);
                        tma_load_2d(b + kHalf * kBlockK, &tmap_b, bar, int32_t(kb * kBlockK), b_row + int32_t(kHalf));
                    }
                } else if constexpr (Cfg::kPermuteB)  // 64-row blocks of B in fragment order (fp8_gemm.tensor_maps)
                    tma_load_5d<Cfg::kStreamB>(sm.b + ring.stage * Smem::kStageB, &tmap_b, bar, int32_t(kb * kBlockK),
                                               int32_t(b_row / 64), Cfg::kStreamB ? l2_policy_evict_first() : 0);
                else if constexpr (Cfg::kStreamB)
                    tma_load_2d_hint(sm.b + ring.stage * Smem::kStageB, &tmap_b, bar, int32_t(kb * kBlockK), b_row,
                                     l2_policy_evict_first());
                else
                    tma_load_2d(sm.b + ring.stage * Smem::kStageB, &tmap_b, bar, int32_t(kb * kBlockK), b_row);
                if constexpr (Cfg::kRowScalesB)  // M-major as A's: the tile's columns of k-block kb
                    tma_load_2d(sm.sb_rows + ring.stage * (Smem::kStageSB / 4), &tmap_sb, bar,
                                int32_t(t.n_block * Cfg::kBlockN), int32_t(kb));
                CG8_MARK_KB(kTraceKbIssued, kb);
                ring.advance();
                after_load();
            }
        }
        if constexpr (Cfg::kLoadD) load_d(t);
        if constexpr (Cfg::kShareB) {  // the stages of the peer tile's extra passes: passed through
            for (uint32_t i = tiles.pad_kblocks(t); i != 0; --i, ring.advance()) {
                mbar_wait(&sm.empty[ring.stage], ring.phase ^ 1);
                mbar_arrive(&sm.full[ring.stage]);
            }
        }
        if constexpr (RingWalk<Cfg>::kAlignStages) {
            for (; ring.stage != 0; ring.advance()) {  // stages this tile leaves unused: pass them through
                mbar_wait(&sm.empty[ring.stage], ring.phase ^ 1);
                mbar_arrive(&sm.full[ring.stage]);
            }
        }
        CG8_MARK(kTraceLoadsDone);
    }

    // kScalesByWarp: each tile's B scales into registers while the tile before runs, then into shared memory once
    // the math warpgroups are past that tile's main loop, then every lane arrives on `sb_full`. (The layouts it
    // serves, config.cuh, walk their tiles by arithmetic, so this warp walks them alone; their tiles are whole, one
    // pass.) Their rows are found and laid out as math.cuh's load_b_scales does; a helper shared with it moved the
    // masked kernels' SASS (NOTES.md v43), as one shared with stage_b_scales did (v35).
    __device__ __forceinline__ void stage_scales(uint32_t lane) {
        constexpr uint32_t kStaged = Cfg::kNumKBlocks * Cfg::kScaleRowsPerTile, kPerLane = (kStaged + 31) / 32;
        float v[kPerLane];
        Tile t;
        auto load = [&] {
            const uint32_t first = uint32_t(tiles.pass_group(t, 0)) * Cfg::kScaleRowsB;
            const uint32_t sb_row = first + t.n_block * Cfg::kBlockN / 128;
            const float* row0 = sb + sb_row * Cfg::kNumKBlocks;
            const float* row1 = sb + min(sb_row + 1, first + Cfg::kScaleRowsB - 1) * Cfg::kNumKBlocks;
#pragma unroll
            for (uint32_t j = 0; j < kPerLane; ++j) {
                const uint32_t i = lane + 32 * j;
                if (i < kStaged) v[j] = __ldg(i < Cfg::kNumKBlocks ? row0 + i : row1 + (i - Cfg::kNumKBlocks));
            }
        };
        bool more = tiles.next(t);
        if (more) load();
#pragma unroll 1
        for (uint32_t n = 0; more; ++n) {
            mbar_wait(sm.sb_empty, (n & 1) ^ 1);  // the math warpgroups are past tile n - 1's main loop
#pragma unroll
            for (uint32_t j = 0; j < kPerLane; ++j)
                if (lane + 32 * j < kStaged) sm.sb[lane + 32 * j] = v[j];
            mbar_arrive(sm.sb_full);
            more = tiles.next(t);
            if (more) load();
        }
    }

    // The TMA thread (tid 0) loads every tile of this CTA in the policy's order.
    __device__ __forceinline__ void run(uint32_t tid, uint32_t warp, uint32_t lane) {
        tiles.run_record_warp(warp, lane);
        if constexpr (Cfg::kScalesByWarp)
            if (warp == 1) stage_scales(lane);
        if constexpr (Cfg::kLoadD)
            if (warp == 1 && lane == 0) store_tiles();
        Tile t, next_t;
        if constexpr (Tiles::kFetchEarly) {
            bool more = tid == 0 && tiles.next(t);
            while (more) {
                tiles.template decode<false>(t);
                bool fetched = false;
                auto after_load = [&] {
                    if (!fetched) fetched = true, more = tiles.next(next_t);
                };
                if (t.whole()) load_tile<false, true>(t, after_load);
                else load_tile<false, false>(t, after_load);
                if (!fetched) more = tiles.next(next_t);
                t = next_t;
            }
        } else {
            while (tid == 0 && tiles.next(t)) load_tile<(Cfg::kSplitK > 1), true>(t, [] {});
            if constexpr (Cfg::kTailSplit)
                if (tid == 0 && tiles.tail(t)) load_tile<true, true>(t, [] {});
        }
    }
};

}  // namespace cg8

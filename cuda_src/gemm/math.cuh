// The math warpgroups: for each tile of this CTA, its passes (stage the pass's B scales, run a main
// loop), the split tile's exchange, and the epilogue.
#pragma once
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "split.cuh"
#include "trace.cuh"

namespace cg8 {

template <class Cfg>
struct MathWarpgroups {
    using Tiles = TilePolicy<Cfg>;
    using Tile = cg8::Tile<Cfg>;
    using Loop = MainLoop<Cfg>;
    using Pass = typename Loop::Pass;

    const CUtensorMap& tmap_d;
    const float* sb;
    unsigned short* d;
    uint32_t ldd;
    const SharedMemory<Cfg> sm;
    Tiles tiles;                // this role's walk of the tile sequence
    uint32_t wg, tid, warp, lane;
    SplitExchange<Cfg> split;
    Loop loop;

    __device__ __forceinline__ MathWarpgroups(const CUtensorMap& tmap_d_, const float* sb_, unsigned short* d_,
                                              uint32_t ldd_, const SharedMemory<Cfg>& sm_, const Tiles& tiles_, uint32_t cta_rank, uint32_t wg_,
                                              uint32_t tid_, uint32_t warp_, uint32_t lane_)
        : tmap_d(tmap_d_), sb(sb_), d(d_), ldd(ldd_), sm(sm_), tiles(tiles_), wg(wg_), tid(tid_), warp(warp_),
          lane(lane_), split{sm_.split_ready, sm_.split_received, cta_rank}, loop(sm_, wg_, tid_, warp_, lane_) {}

    // Every tile of this CTA in the policy's order; then the output's last TMA stores must complete.
    __device__ __forceinline__ void run() {
        Tile t, next_t;
        if constexpr (Tiles::kFetchEarly) {
            bool more = tiles.next(t);
            while (more) {
                tiles.template decode<true>(t);
                auto fetch_next = [&] { more = tiles.next(next_t); };  // its loads overlap the main loop
                // (The reduction makes the branch warp-uniform to ptxas: see `slabs` in work_tile.)
                if (__reduce_or_sync(~0u, t.whole() ? 1u : 0u)) work_tile<false, true>(t, fetch_next);
                else work_tile<false, false>(t, fetch_next);
                t = next_t;
            }
        } else {
            while (tiles.next(t)) work_tile<false, true>(t, [] {});
            if constexpr (Cfg::kTailSplit)
                if (tiles.tail(t)) work_tile<true, true>(t, [] {});
        }
        if (loop.store_thread) bulk_wait_group0();
    }

    // The pass's B scales into shared memory, once: a global load per k-block would put an L2 round
    // trip on every k-block of small tiles. Every math thread is past the previous tile's main loop (the
    // epilogue's barrier); a later pass of the same tile must first wait for the previous pass's readers.
    __device__ __forceinline__ void stage_b_scales(bool first_pass, int32_t group, uint32_t n0) {
        const uint32_t sb_row = uint32_t(group) * Cfg::kScaleRowsB + n0 / 128;
        const float* sb0_ptr = sb + sb_row * Cfg::kNumKBlocks;
        const float* sb1_ptr =
            sb + min(sb_row + 1, uint32_t(group) * Cfg::kScaleRowsB + Cfg::kScaleRowsB - 1) * Cfg::kNumKBlocks;
        if (!first_pass) named_barrier_sync(1, Cfg::kMathThreads);
        for (uint32_t i = threadIdx.x; i < Cfg::kNumKBlocks * Cfg::kScaleRowsPerTile; i += Cfg::kMathThreads)
            sm.sb[i] = __ldg(i < Cfg::kNumKBlocks ? sb0_ptr + i : sb1_ptr + (i - Cfg::kNumKBlocks));
        named_barrier_sync(1, Cfg::kMathThreads);
    }

    // One tile: its passes, then the epilogue. fetch_next() (the policy's next tile) runs once, after
    // the first pass's staging barrier, or before the epilogue of a tile without passes.
    // kSplitTile: a tail() tile; kWhole: t.whole(), one pass of every slab.
    template <bool kSplitTile, bool kWhole, class FetchNext>
    __device__ __forceinline__ void work_tile(const Tile& t, FetchNext&& fetch_next) {
        const uint32_t n0 = t.n_block * Cfg::kBlockN;
        CG8_MARK(kTraceTile, (kSplitTile ? t.split << 30 : 0u) | (t.n_block << 16) | t.m_block);
        loop.clear_sums();
#pragma unroll 1
        for (uint32_t passes = kWhole ? 1u : t.passes; passes != 0; passes &= passes - 1) {
            const bool first_pass = kWhole || passes == t.passes;
            const uint32_t pass = kWhole ? 0u : __ffs(passes) - 1;
            const int32_t group = tiles.pass_group(t, pass);
            // Slabs of this warpgroup in the pass. The warp reduction tells ptxas the value is warp-uniform:
            // branches on it then keep the wgmma descriptors on the uniform datapath (NOTES.md v8).
            const uint32_t slabs = kWhole ? Loop::kAllSlabs : __reduce_or_sync(~0u, tiles.active_slabs(t, pass, wg));
            const Pass p{kSplitTile ? t.kb_begin() : 0u, kSplitTile ? t.kb_end() : Cfg::kNumKBlocks, 128 - n0 % 128};
            if constexpr (kSplitTile) split.before_staging(loop.store_thread);
            stage_b_scales(first_pass, group, n0);
            CG8_MARK(kTraceStaged);
            if constexpr (kSplitTile) split.signal_ready();
            if (first_pass) fetch_next();
            CG8_MARK(kTraceLoop);
            // A slab wholly past the valid rows (masked) leaves the tensor cores to the other warpgroup.
            if (slabs == 0 || (Tiles::kIdleSlabs && tiles.slab_idle(t, loop.wg_mma))) loop.walk_idle(p);
            else if constexpr (Cfg::kAccSets == 1) {
                if (slabs == Loop::kAllSlabs) loop.template one_accumulator<true, kWhole>(p, slabs);
                else loop.template one_accumulator<false, kWhole>(p, slabs);
            } else {
                loop.two_accumulators(p);
            }
        }
        if constexpr (RingWalk<Cfg>::kAlignStages && !kWhole) loop.realign();
        CG8_MARK(kTraceMainDone);
        if constexpr (kSplitTile) {
            const uint32_t tile = loop.smem_d_addr, ready = loop.shared(sm.split_ready);
            const uint32_t received = loop.shared(sm.split_received);
            if (t.split == 2) split.template exchange<true>(loop.sum, tile, ready, received);
            else split.template exchange<false>(loop.sum, tile, ready, received);
            CG8_MARK(kTraceExchanged);
        }
        if (!kWhole && t.passes == 0) fetch_next();
        epilogue<kSplitTile>(t, n0);
    }

    // The tile's sums out to D. The output tile in shared memory is rewritten only once the previous
    // tile's TMA store has read it, and every math thread is past that point (the barrier).
    template <bool kSplitTile>
    __device__ __forceinline__ void epilogue(const Tile& t, uint32_t n0) {
        using Out = Epilogue<Cfg>;
        const uint32_t row0 = tiles.a_row(t);
        const uint32_t m0 = t.m_block * Cfg::kBlockM;
        if constexpr (Tiles::kZeroRows) {
            if (tiles.zero_rows(t) != 0) Out::zero_rows(loop.sum, tiles.zero_rows(t));
        }
        if (loop.store_thread) bulk_wait_group_read0();
        named_barrier_sync(1, Cfg::kMathThreads);
        Out::write_tile(loop.sum, loop.smem_d_addr, wg, warp, lane);
        if (!(kSplitTile || (Tiles::kStoresByThreads && tiles.store_by_threads(t)))) {
            Out::store_tma(tmap_d, sm.d, tid, loop.store_thread, n0, row0);
        } else {
            Out::template store_threads<kSplitTile>(loop.smem_d_addr, d, ldd, row0, n0, t.rows, m0,
                                                    kSplitTile ? t.split : 1u);
        }
        CG8_MARK(kTraceStored);
    }
};

}  // namespace cg8

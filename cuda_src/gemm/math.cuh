// The math warpgroups: for each tile of this CTA, its passes (stage the pass's B scales, run a main
// loop), a split tile's exchange, and the epilogue.
#pragma once
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "split.cuh"
#include "trace.cuh"

namespace cg8 {

// A step a caller leaves out.
struct Nothing {
    __device__ __forceinline__ void operator()() const {}
};

template <class Cfg>
struct MathWarpgroups {
    using Tiles = TilePolicy<Cfg>;
    using Tile = cg8::Tile<Cfg>;
    using Loop = MainLoop<Cfg>;
    using Out = Epilogue<Cfg>;
    using Split = SplitExchange<Cfg>;

    // Where the next tile's B scales are loaded during this tile (run()): the layouts that do not fetch tiles
    // early, but for e4m3 output in tiles of two slabs a warpgroup, which lost 0.5-2% with it (ptxas moved their
    // epilogue: NOTES.md v35, v42); the weight gradient's B scales come with each stage.
    static constexpr bool kPrefetchScales =
        !Tiles::kFetchEarly && !Cfg::kRowScalesB && (!Cfg::kOutFp8 || Cfg::kUnitsPerWG == 1);

    // A pass's B scales as staged in shared memory: the tile's scale row of each k-block (then the next row's, where
    // the tile straddles two). Math thread i holds entries i, i + kMathThreads, ...
    static constexpr uint32_t kStagedScales = Cfg::kNumKBlocks * Cfg::kScaleRowsPerTile;
    struct BScales {
        float v[(kStagedScales + Cfg::kMathThreads - 1) / Cfg::kMathThreads];
    };

    const CUtensorMap& tmap_d;
    const float* __restrict__ sb;
    unsigned short* __restrict__ d;
    uint32_t ldd;
    float* __restrict__ d_scale;  // e4m3 output: its scales, M-major ([group][n / 128][ld_scale] floats)
    uint32_t ld_scale;
    const SharedMemory<Cfg>& sm;
    Tiles& tiles;                 // the tile walk (the kernel's)
    RingPosition<Cfg>& ring;      // the position in the stage ring (the kernel's)
    uint32_t wg, tid, warp, lane;

    // Every tile of this CTA in the policy's order; then the output's last TMA stores must complete.
    // The registers (accumulators, sums) are locals here, lent to the main loop: held in a struct, ptxas
    // allocated them differently (NOTES.md v16).
    __device__ __forceinline__ void run() {
        Tile t, next_t;
        float acc[2][Loop::kFrag];  // the second set only where kAccSets == 2
        float sum[Cfg::kUnitsPerWG][Loop::kFrag];
        Loop loop(sm, ring, acc, sum, wg, tid, warp, lane);
        uint32_t split_phase = 0;  // the parity of this CTA's split tiles so far (their exchange barriers)
        uint32_t tile_phase = 0;   // the parity of this CTA's tiles so far (kScalesByWarp: the B scales' barriers; kLoadD: D's)
        if constexpr (Tiles::kFetchEarly) {
            bool more = tiles.next(t);
            while (more) {
                tiles.template decode<true>(t);
                auto fetch_next = [&] { more = tiles.next(next_t); };  // its loads overlap the main loop
                // (The reduction makes the branch warp-uniform to ptxas: see `slabs` in work_tile.)
                if (__reduce_or_sync(~0u, t.whole() ? 1u : 0u))
                    work_tile<false, true>(loop, t, fetch_next, split_phase, tile_phase);
                else
                    work_tile<false, false>(loop, t, fetch_next, split_phase, tile_phase);
                t = next_t;
            }
        } else if constexpr (kPrefetchScales) {
            // Each tile's B scales are loaded into registers before the previous tile's epilogue, whose time
            // covers their L2 round trip; loaded at the tile's start, they were a load's latency a tile with
            // every math thread waiting at the staging barrier (NOTES.md v35).
            BScales staged;
            bool more = tiles.next(t);
            if (more) load_b_scales(staged, t);
            while (more) {
                auto prefetch = [&] {
                    more = tiles.next(next_t);
                    if (more) load_b_scales(staged, next_t);
                };
                work_tile<(Cfg::kSplitK > 1), true>(loop, t, [] {}, split_phase, tile_phase, prefetch, &staged);
                t = next_t;
            }
            if constexpr (Cfg::kTailSplit)
                if (tiles.tail(t)) work_tile<true, true>(loop, t, [] {}, split_phase, tile_phase);
        } else {
            while (tiles.next(t)) work_tile<(Cfg::kSplitK > 1), true>(loop, t, [] {}, split_phase, tile_phase);
            if constexpr (Cfg::kTailSplit)
                if (tiles.tail(t)) work_tile<true, true>(loop, t, [] {}, split_phase, tile_phase);
        }
        if (loop.store_thread) bulk_wait_group0();
    }

    // One tile: its passes, then the epilogue. fetch_next() (the policy's next tile) runs once, after
    // the first pass's staging barrier, or before the epilogue of a tile without passes; before_epilogue()
    // after the main loops. `staged`: the first pass's B scales, already in registers (else loaded here).
    // kSplitTile: a split tile (split K, or a tail() tile); kWhole: t.whole(), one pass of every slab.
    template <bool kSplitTile, bool kWhole, class FetchNext, class BeforeEpilogue = Nothing>
    __device__ __forceinline__ void work_tile(Loop& loop, const Tile& t, FetchNext&& fetch_next, uint32_t& split_phase,
                                              uint32_t& tile_phase, BeforeEpilogue&& before_epilogue = {},
                                              const BScales* staged = nullptr) {
        const uint32_t n0 = t.n_block * Cfg::kBlockN;
        CG8_MARK(kTraceTile, (kSplitTile ? t.split << 28 : 0u) | (t.n_block << 16) | t.m_block);
        loop.clear_sums();
#pragma unroll 1
        for (uint32_t passes = kWhole ? 1u : t.passes; passes != 0; passes &= passes - 1) {
            const bool first_pass = kWhole || passes == t.passes;
            const uint32_t pass = kWhole ? 0u : __ffs(passes) - 1;
            const int32_t group = tiles.pass_group(t, pass);
            // Slabs of this warpgroup in the pass. The warp reduction tells ptxas the value is warp-uniform:
            // branches on it then keep the wgmma descriptors on the uniform datapath (NOTES.md v8).
            const uint32_t slabs = kWhole ? Loop::kAllUnits : __reduce_or_sync(~0u, tiles.active_slabs(t, pass, wg));
            if constexpr (Cfg::kScalesByWarp) {  // staged by a producer warp (producer.cuh)
                mbar_wait(sm.sb_full, tile_phase);
            } else if constexpr (!Cfg::kRowScalesB) {  // 1x128 B scales come with each stage instead
                stage_b_scales<kSplitTile>(first_pass, group, n0, loop.store_thread, first_pass ? staged : nullptr);
            }
            CG8_MARK(kTraceStaged);
            if constexpr (kSplitTile) Split::signal_ready(sm.split_ready, sm.split_received, sm.split_amax, t.split - 1);
            else if constexpr (kGroupShared) Split::signal_ready(sm.split_ready, sm.split_received, sm.split_amax, group_rank());
            if (first_pass) fetch_next();
            CG8_MARK(kTraceLoop);
            constexpr bool kRanged = kSplitTile || Cfg::kRuntimeK;  // the tile says which k-blocks
            const uint32_t kb_begin = kRanged ? t.kb_begin() : 0u;
            const uint32_t kb_end = kRanged ? t.kb_end() : Cfg::kNumKBlocks;
            // A slab wholly past the valid rows (masked) leaves the tensor cores to the other warpgroup.
            const bool idle = Tiles::kIdleSlabs && tiles.slab_idle(t, loop.wg_mma);
            if (slabs == 0 || idle) {
                loop.walk_idle(kb_begin, kb_end);
            } else if constexpr (Cfg::kRowScalesB) {
                loop.row_scales(kb_begin, kb_end);
            } else {
                with_boundary(n0, [&](auto boundary) {
                    const typename Loop::template Pass<decltype(boundary)> p{kb_begin, kb_end, boundary};
                    if constexpr (Cfg::kAccSets == 1) {
                        if (slabs == Loop::kAllUnits) loop.template one_accumulator<true, kWhole>(p, slabs);
                        else loop.template one_accumulator<false, kWhole>(p, slabs);
                    } else {
                        loop.two_accumulators(p);
                    }
                });
            }
        }
        if constexpr (Cfg::kShareB) {  // the peer tile's extra passes: its stages walked through in step
            const uint32_t pad = tiles.pad_kblocks(t);
            if (pad != 0) loop.walk_idle(0u, pad);
        }
        if constexpr (RingWalk<Cfg>::kAlignStages && !kWhole) loop.realign();
        before_epilogue();
        CG8_MARK(kTraceMainDone);
        typename Out::RowValues amax;  // e4m3 output of a split tile: each row's amax over the whole tile
        if constexpr (kSplitTile) {
            Split::exchange(loop, sm.split_ready, sm.split_received, t.split - 1, split_phase);
            if constexpr (Cfg::kOutFp8) {
                static_for<0, Cfg::kSplits>([&](auto chunk) {
                    if (chunk.value == t.split - 1)
                        Out::template rows_amax<Cfg::chunk_first(chunk.value), Cfg::chunk_frags(chunk.value)>(loop.sum, amax);
                });
                Split::exchange_amax(loop, amax, sm.split_ready, sm.amax_inbox, sm.split_amax, t.split - 1,
                                     split_phase);
            }
            split_phase ^= 1;
            CG8_MARK(kTraceExchanged);
        } else if constexpr (kGroupShared) {  // each row's amax over the group's tiles
            Out::template rows_amax<0, Cfg::kBlockN / 8>(loop.sum, amax);
            Split::exchange_amax(loop, amax, sm.split_ready, sm.amax_inbox, sm.split_amax, group_rank(),
                                 split_phase);
            split_phase ^= 1;
            CG8_MARK(kTraceExchanged);
        }
        if (!kWhole && t.passes == 0) fetch_next();
        epilogue<kSplitTile>(loop, t, n0, amax, tile_phase);
        if constexpr (Cfg::kScalesByWarp || Cfg::kLoadD) tile_phase ^= 1;
    }

    // f(b) with b the first column of the tile at n0 whose B scale is the next scale row (kBlockN: none). Where
    // the loops are one slab per warpgroup, b is a compile-time Const: one copy of the main loop per value
    // n0 % 128 can take, so that promotion picks no scale per fragment at run time (NOTES.md v26). Two-slab
    // loops take b at run time: their copies lost the uniform datapath and spilled. Tiles whose width divides
    // 128 never straddle.
    template <class F>
    __device__ __forceinline__ static void with_boundary(uint32_t n0, F&& f) {
        if constexpr (!Cfg::kMayStraddle) {
            f(Const<Cfg::kBlockN>{});
        } else if constexpr (Cfg::kUnitsPerWG > 1) {
            f(128 - n0 % 128);
        } else {
            constexpr uint32_t kStep = gcd(Cfg::kBlockN, 128u);  // n0 % 128 is a multiple of this
            const uint32_t offset = n0 % 128;
            if (128 - offset >= Cfg::kBlockN) f(Const<Cfg::kBlockN>{});
            static_for<0, 128 / kStep>([&](auto i) {
                constexpr uint32_t kBoundary = 128 - i.value * kStep;
                if constexpr (kBoundary < Cfg::kBlockN)
                    if (offset == i.value * kStep) f(Const<kBoundary>{});
            });
        }
    }

    // e4m3 tiles narrower than a scale group, whose row amax the group's CTAs share (kGroupCtas).
    static constexpr bool kGroupShared = Cfg::kGroupCtas > 1;
    // This CTA's place among them: its tile is the group's rank-th (the cluster's CTAs are consecutive in x).
    __device__ __forceinline__ static uint32_t group_rank() { return blockIdx.x % Cfg::kGroupCtas; }

    // This thread's entries of tile t's (first pass's) B scales. (The row arithmetic repeats stage_b_scales': through
    // a shared helper, ptxas moved the main loops of kernels that do not prefetch, e4m3 at K = 16384 by an
    // instruction, NOTES.md v35.)
    __device__ __forceinline__ void load_b_scales(BScales& r, const Tile& t) const {
        const uint32_t group = uint32_t(tiles.pass_group(t, 0));
        const uint32_t sb_row = group * Cfg::kScaleRowsB + t.n_block * Cfg::kBlockN / 128;
        const float* sb0_ptr = sb + sb_row * Cfg::kNumKBlocks;
        const float* sb1_ptr =
            sb + min(sb_row + 1, group * Cfg::kScaleRowsB + Cfg::kScaleRowsB - 1) * Cfg::kNumKBlocks;
#pragma unroll
        for (uint32_t j = 0; j < sizeof(r.v) / sizeof(float); ++j) {
            const uint32_t i = threadIdx.x + j * Cfg::kMathThreads;
            if (i < kStagedScales)
                r.v[j] = __ldg(i < Cfg::kNumKBlocks ? sb0_ptr + i : sb1_ptr + (i - Cfg::kNumKBlocks));
        }
    }

    // The pass's B scales into shared memory, once: a global load per k-block would put an L2 round trip
    // on every k-block of small tiles. `staged`: this thread's entries, loaded already (else loaded here).
    // Every math thread is past the previous tile's main loop (the epilogue's barrier); a later pass of the
    // same tile must first wait for the previous pass's readers.
    template <bool kSplitTile>
    __device__ __forceinline__ void stage_b_scales(bool first_pass, int32_t group, uint32_t n0, bool store_thread,
                                                   const BScales* staged) {
        const uint32_t sb_row = uint32_t(group) * Cfg::kScaleRowsB + n0 / 128;
        const float* sb0_ptr = sb + sb_row * Cfg::kNumKBlocks;
        const float* sb1_ptr =
            sb + min(sb_row + 1, uint32_t(group) * Cfg::kScaleRowsB + Cfg::kScaleRowsB - 1) * Cfg::kNumKBlocks;
        if (!first_pass) named_barrier_sync(1, Cfg::kMathThreads);
        if constexpr (kSplitTile) Split::before_staging(store_thread);
        if (staged != nullptr) {
#pragma unroll
            for (uint32_t j = 0; j < sizeof(staged->v) / sizeof(float); ++j) {
                const uint32_t i = threadIdx.x + j * Cfg::kMathThreads;
                if (i < kStagedScales) sm.sb[i] = staged->v[j];
            }
        } else {
            for (uint32_t i = threadIdx.x; i < kStagedScales; i += Cfg::kMathThreads)
                sm.sb[i] = __ldg(i < Cfg::kNumKBlocks ? sb0_ptr + i : sb1_ptr + (i - Cfg::kNumKBlocks));
        }
        named_barrier_sync(1, Cfg::kMathThreads);
    }

    // The tile's sums out to D: by one TMA store, or by the math threads where only some rows (a masked
    // group's last block) or columns (a split tile's chunk) may be written.
    template <bool kSplitTile>
    __device__ __forceinline__ void epilogue(Loop& loop, const Tile& t, uint32_t n0,
                                             const typename Out::RowValues& amax, uint32_t tile_phase) {
        const uint32_t row0 = tiles.a_row(t);
        const uint32_t m0 = t.m_block * Cfg::kBlockM;
        if constexpr (Tiles::kZeroRows) {  // rows that are no expert's
            if (tiles.zero_rows(t) != 0) Out::zero_rows(loop.sum, tiles.zero_rows(t));
        }
        if constexpr (Cfg::kLoadD) {  // the tile's D has come in its place once the previous store read it
            Out::add_tile_f32(loop.sum, loop.smem_d_addr, sm.d_full, sm.d_written, tile_phase, wg, warp, lane);
            CG8_MARK(kTraceStored);
            return;
        }
        // The output tile is rewritten only once the previous tile's TMA store has read it.
        if (loop.store_thread) bulk_wait_group_read();
        named_barrier_sync(1, Cfg::kMathThreads);
        if constexpr (Cfg::kScalesByWarp) mbar_arrive(sm.sb_empty);  // past the main loop: the B scales may go
        if constexpr (Cfg::kOutFp8) {
            // Scales for rows of the tile below `valid` (rows past M, or past a masked group's count, stay as
            // they are), at row m0 + r of the group's scale block.
            const uint32_t valid = min(t.rows - m0, Cfg::kBlockM);
            float* scale = d_scale + uint64_t(n0 / 128) * ld_scale + m0;
            if constexpr (Tiles::kScalesPerGroup) scale += uint64_t(t.group) * Cfg::kScaleRowsB * ld_scale;
            if constexpr (kSplitTile) {  // this CTA's chunk, with the tile rows' amax; the first CTA writes the scales
                static_assert(Cfg::kBlockN == 128, "a split tile is one scale group");
                static_for<0, Cfg::kSplits>([&](auto chunk) {
                    if (chunk.value == t.split - 1)
                        Out::template write_rows<Cfg::chunk_first(chunk.value), Cfg::chunk_frags(chunk.value)>(
                            loop.sum, amax, loop.smem_d_addr, scale, chunk.value == 0 ? valid : 0u, wg, warp, lane);
                });
            } else if constexpr (kGroupShared) {  // the group's first CTA writes the scales
                Out::template write_rows<0, Cfg::kBlockN / 8>(loop.sum, amax, loop.smem_d_addr, scale,
                                                              group_rank() == 0 ? valid : 0u, wg, warp, lane);
            } else {
                Out::write_tile_fp8(loop.sum, loop.smem_d_addr, scale, ld_scale, valid, wg, warp, lane);
            }
        } else if constexpr (Cfg::kOutF32) {  // added into D (the group's: t.group) by TMA reduce-add
            Out::reduce_tile_f32(loop.sum, tmap_d, loop.smem_d_addr, sm.d, loop.store_thread, n0, row0,
                                 uint32_t(t.group), wg, warp, lane);
        } else {
            Out::write_tile(loop.sum, loop.smem_d_addr, wg, warp, lane);
        }
        if constexpr (!Cfg::kOutF32) {
            const bool by_threads = kSplitTile || (Tiles::kStoresByThreads && tiles.store_by_threads(t));
            if (!by_threads) {
                Out::store_tma(tmap_d, sm.d, tid, loop.store_thread, n0, row0);
            } else {
                Out::template store_threads<kSplitTile>(loop.smem_d_addr, d, ldd, row0, n0, m0, t);
            }
        }
        CG8_MARK(kTraceStored);
    }
};

}  // namespace cg8

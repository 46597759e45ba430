// The tile sequence: which output tile each CTA computes next, and everything that depends on how the
// rows of A are organized. One tile policy per layout (policy_normal.cuh, policy_contiguous.cuh,
// policy_masked.cuh, policy_k_grouped.cuh) answers it all; TilePolicy<Cfg> picks the configuration's, and no
// other code asks which layout it is.
//
// A policy is constructed in every thread, with the same arguments (M and, for the weight gradients, the
// columns K of A and B), and each role walks the same
// sequence: the producer and the math warpgroups only have to agree on the tiles' order. Its interface:
//   kFetchEarly              each role fetches its next tile while the current one is in flight
//   kPinnedBase              the rolled main loops form their shared-memory addresses from a pinned base
//   kStageWalk               how whole tiles prefer to walk the stage ring (mainloop.cuh)
//   kIdleSlabs               a slab past the valid rows may sit out its tile (tiles of one slab per warpgroup)
//   kZeroRows, kStoresByThreads   zero_rows() may be non-zero; store_by_threads() may be true
//                            (optional behaviours are traits, tested at compile time, so a layout that
//                            lacks one emits no code for it: NOTES.md v16)
//   kSmemWordBytes, kRingBarriers   its shared memory: layout words and barriers (smem.cuh)
//   rows_a_landing(t)        rows of A (and of its scales) landing in a stage for tile t (fp8_gemm.a_boxes)
//   kTailMaps, tail_maps(t), has_tail(m)   whether tile t (any tile of M rows) loads them through the tail
//                            maps (producer.cuh)
//   init_barriers, load_layout, finish_layout   its part of the kernel's set-up
//   next(t), tail(t)         the next tile of this CTA (with split K, t.split names its share; with K at run
//                            time, t.kb0 and t.kb1 its k-blocks); its share of a split last-wave tile (masked
//                            kTailSplit)
//   decode<kMath>(t)         the tile's passes once its turn comes (contiguous)
//   run_record_warp(...)     the producer warpgroup's second warp (contiguous)
//   a_row, sa_row, pass_group, active_slabs, slab_idle, zero_rows, store_by_threads
#pragma once
#include "policy_normal.cuh"
#include "policy_contiguous.cuh"
#include "policy_masked.cuh"
#include "policy_k_grouped.cuh"

namespace cg8 {

template <class Cfg, Layout kLayout = Cfg::kLayout>
struct TilePolicyOf;
template <class Cfg> struct TilePolicyOf<Cfg, Layout::kNormal> { using type = NormalTiles<Cfg>; };
template <class Cfg> struct TilePolicyOf<Cfg, Layout::kContiguous> { using type = ContiguousTiles<Cfg>; };
template <class Cfg> struct TilePolicyOf<Cfg, Layout::kMasked> { using type = MaskedTiles<Cfg>; };
template <class Cfg> struct TilePolicyOf<Cfg, Layout::kKGrouped> { using type = KGroupedTiles<Cfg>; };

// The configuration's tile policy: the one place where the layout selects code.
template <class Cfg>
using TilePolicy = typename TilePolicyOf<Cfg>::type;

}  // namespace cg8

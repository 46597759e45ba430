// The stage ring: kStages shared-memory stages, each guarded by a `full` barrier (1 arrival with the
// stage's TMA byte count: the loads have landed) and an `empty` barrier (one arrival per math warp of
// every CTA the stage was loaded into: it may be overwritten). Stage index and phase run on across
// tiles, so the producer and the math warpgroups only have to walk the same tile sequence.
#pragma once
#include "config.cuh"
#include "scheduler.cuh"
#include "../ptx/mbarrier.cuh"

namespace cg8 {

// A role's position in the ring: the stage it works on next and that use's barrier phase.
template <class Cfg>
struct RingPosition {
    uint32_t stage = 0, phase = 0;
    __device__ __forceinline__ void advance() {
        if (++stage == Cfg::kStages) stage = 0, phase ^= 1;
    }
};

template <class Cfg>
__device__ __forceinline__ void init_stage_barriers(uint64_t* full, uint64_t* empty) {
    for (uint32_t s = 0; s < Cfg::kStages; ++s) {
        mbar_init(&full[s], 1);
        mbar_init(&empty[s], Cfg::kNumMathWG * 4 * Cfg::kMulticast);  // every math warp of every CTA
    }
}

// How the tiles of this configuration walk the ring (the loops are in mainloop.cuh). Both unrolled walks
// need whole tiles of two slabs per math warpgroup and one accumulator set:
// - stage-aligned: every tile's k-loop starts at stage 0, and the producer and the consumers pass
//   through the stages a tile leaves unused; not where those would be a large share of the ring (K=512
//   with 3 stages passed 2 of every 6 through: NOTES.md v11).
// - ring rounds: a tile takes the ring where the previous one left it (rolled k-blocks up to stage 0,
//   whole rounds unrolled, rolled k-blocks for the rest); nothing is passed through (NOTES.md v15).
template <class Cfg>
struct RingWalk {
    static constexpr StageWalk kPreferred = TilePolicy<Cfg>::kStageWalk;
    // (A split tile's k-blocks start anywhere in the ring; with K at run time the count is not known.)
    static constexpr bool kUnrolled = Cfg::kAccSets == 1 && Cfg::kUnitsPerWG == 2 && Cfg::kMulticast == 1 &&
                                      Cfg::kSplits == 1 && !Cfg::kRuntimeK;
    static constexpr bool kAlignStages = kUnrolled && kPreferred == StageWalk::kStageAligned &&
                                         (Cfg::kNumKBlocks % Cfg::kStages == 0 || Cfg::kNumKBlocks >= 4 * Cfg::kStages);
    static constexpr bool kRingRounds = kUnrolled && kPreferred == StageWalk::kRingRounds &&
                                        Cfg::kNumKBlocks >= Cfg::kStages;
};

}  // namespace cg8

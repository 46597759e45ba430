// The shared-memory map: where each buffer lives in the kernel's dynamic shared memory. kBytes is
// the launch's size; cugemm8/heuristics.py computes the same number (smem_bytes), and every rendered
// kernel static_asserts that the two agree.
//
//   [ D tile | A x stages | B x stages | A scales x stages | B row scales x stages | B scales | row amax inbox
//     | layout words | barriers ]
//
// D: the output tile (TMA-swizzled atoms; bf16-sized for e4m3 too; FP32 for the weight gradient, kTileAtoms of them); a split
// tile's inbox of partial sums (split.cuh) overlays it, and extends it where it is larger.
// A, B: one 128-deep k-block per stage, 128-byte swizzled as TMA writes them (1024-byte aligned).
// A scales: kBlockM floats per stage. B row scales (1x128, the weight gradient): kBlockN floats per stage.
// B scales (128x128 blocks): the tile's every k-block, one or two scale rows.
// Row amax inbox: a split tile with e4m3 output, the peers' amax of each row over their column chunks (or
// over their tiles, for CTAs sharing a scale group).
// Layout words: the tile policy's (masked: rows and tile totals per group; contiguous: the record ring).
// Barriers: full and empty per stage; `ready` and `received` for a split tile's exchange (and `amax` with
// e4m3 output; CTAs sharing a scale group use `ready` and `amax`); with kScalesByWarp, the B scales' full and
// empty; with kLoadD, D's full, written and empty; the policy's.
#pragma once
#include "config.cuh"
#include "scheduler.cuh"

namespace cg8 {

template <class Cfg>
struct SmemLayout {
    using Tiles = TilePolicy<Cfg>;
    static constexpr uint32_t kTileD =
        Cfg::kOutF32 ? Cfg::kAtomTileBytes * Cfg::kTileAtoms : Cfg::kBlockM * Cfg::kBlockN * 2;
    static constexpr uint32_t kStageA = Cfg::kBlockM * kBlockK;
    static constexpr uint32_t kStageB = Cfg::kBlockN * kBlockK;
    static constexpr uint32_t kStageSA = Cfg::kBlockM * 4;
    // B's row scales (kRowScalesB): kBlockN floats land per stage, each stage's at a 128-byte boundary (a TMA
    // destination's alignment; kStageSA, kBlockM floats, is a multiple of 128 already).
    static constexpr uint32_t kTxSB = Cfg::kRowScalesB ? Cfg::kBlockN * 4 : 0;
    static constexpr uint32_t kStageSB = (kTxSB + 127) / 128 * 128;
    // TMA bytes landing per stage with `rows_a` rows of A (TilePolicy::rows_a_landing): A, B, A's scales
    // (rows_a rounded up to 4 floats: TMA's 16-byte box rule) and B's row scales.
    __device__ __forceinline__ static constexpr uint32_t stage_tx_bytes(uint32_t rows_a) {
        return rows_a * kBlockK + kStageB + (rows_a + 3) / 4 * 16 + kTxSB;
    }
    static constexpr uint32_t kScalesB =
        Cfg::kRowScalesB ? 0 : (Cfg::kNumKBlocks * Cfg::kScaleRowsPerTile * 4 + 15) / 16 * 16;
    static constexpr uint32_t kScaleBarriers = Cfg::kScalesByWarp ? 2 : 0;
    static constexpr uint32_t kDBarriers = Cfg::kLoadD ? 3 : 0;
    static constexpr uint32_t kSplitBarriers = Cfg::kExchangeCtas > 1 ? (Cfg::kOutFp8 ? 3 : 2) : 0;
    // A split tile's inbox: (kSplits - 1) peers' partial sums of this CTA's column chunk (the largest's size), FP32.
    static constexpr uint32_t kInbox = (Cfg::kSplits - 1) * Cfg::kBlockM * (Cfg::kMaxChunkFrags * 8) * 4;
    // ... and with e4m3 output, the peers' amax of each of the tile's rows (FP32).
    static constexpr uint32_t kAmaxInbox = Cfg::kOutFp8 ? (Cfg::kExchangeCtas - 1) * Cfg::kBlockM * 4 : 0;

    static constexpr uint32_t kOffA = kTileD > kInbox ? kTileD : kInbox;
    static constexpr uint32_t kOffB = kOffA + Cfg::kStages * kStageA;
    static constexpr uint32_t kOffSA = kOffB + Cfg::kStages * kStageB;
    static constexpr uint32_t kOffSBRows = kOffSA + Cfg::kStages * kStageSA;
    static constexpr uint32_t kOffSB = kOffSBRows + Cfg::kStages * kStageSB;
    static constexpr uint32_t kOffAmax = kOffSB + kScalesB;
    static constexpr uint32_t kOffWords = kOffAmax + kAmaxInbox;
    static constexpr uint32_t kOffBarriers = kOffWords + Tiles::kSmemWordBytes;
    static constexpr uint32_t kBytes =
        kOffBarriers + 8 * (2 * Cfg::kStages + kSplitBarriers + kScaleBarriers + kDBarriers + Tiles::kRingBarriers);

    static_assert(kOffA % 1024 == 0 && kStageA % 1024 == 0 && kStageB % 1024 == 0,
                  "swizzled stages must stay 1024-byte aligned");
    static_assert(kOffSA % 128 == 0 && kStageSA % 128 == 0 && kOffSBRows % 128 == 0 && kStageSB % 128 == 0,
                  "TMA destinations (the scales' stages) must be 128-byte aligned");
};

// Typed views of the buffers.
template <class Cfg>
struct SharedMemory {
    using Map = SmemLayout<Cfg>;
    uint8_t* base;
    uint8_t* d;
    uint8_t* a;
    uint8_t* b;
    float* sa;
    float* sb_rows;            // B's row scales per stage (kRowScalesB)
    float* sb;
    int32_t* words;
    uint64_t* full;            // per stage: the TMA bytes have landed
    uint64_t* empty;           // per stage: every math warp (of every CTA it was loaded into) is done with it
    uint64_t* split_ready;     // split tiles: every peer may push into this CTA's inbox
    uint64_t* split_received;  // split tiles: the peers' partial sums have landed
    uint64_t* split_amax;      // split tiles with e4m3 output: the peers' row amax have landed
    float* amax_inbox;         // split tiles with e4m3 output: [peer slot][row] amax over the peer's chunk
    uint64_t* sb_full;         // kScalesByWarp: the producer warp has staged a tile's B scales
    uint64_t* sb_empty;        // ... and the math warpgroups are past that tile's main loop
    uint64_t* d_full;          // kLoadD: a tile's D has landed
    uint64_t* d_written;       // ... every math thread has added its sums into it
    uint64_t* d_empty;         // ... and its TMA store has read it
    uint64_t* ring_barriers;   // the tile policy's

    __device__ __forceinline__ explicit SharedMemory(uint8_t* smem)
        : base(smem), d(smem), a(smem + Map::kOffA), b(smem + Map::kOffB),
          sa(reinterpret_cast<float*>(smem + Map::kOffSA)), sb_rows(reinterpret_cast<float*>(smem + Map::kOffSBRows)),
          sb(reinterpret_cast<float*>(smem + Map::kOffSB)),
          words(reinterpret_cast<int32_t*>(smem + Map::kOffWords)),
          full(reinterpret_cast<uint64_t*>(smem + Map::kOffBarriers)), empty(full + Cfg::kStages),
          split_ready(empty + Cfg::kStages), split_received(split_ready + 1), split_amax(split_ready + 2),
          amax_inbox(reinterpret_cast<float*>(smem + Map::kOffAmax)),
          sb_full(empty + Cfg::kStages + Map::kSplitBarriers), sb_empty(sb_full + 1),
          d_full(sb_full + Map::kScaleBarriers), d_written(d_full + 1), d_empty(d_full + 2),
          ring_barriers(full + 2 * Cfg::kStages + Map::kSplitBarriers + Map::kScaleBarriers + Map::kDBarriers) {}
};

}  // namespace cg8

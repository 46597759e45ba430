// The GEMM kernel's compile-time configuration: the values cugemm8/fp8_gemm.py renders (one
// `using Config = GemmConfig<...>` per compile), the constants derived from them, and the rules they
// must satisfy. M is the only run-time shape.
#pragma once
#include "../ptx/types.cuh"

namespace cg8 {

// How the rows of A (and D) are organized; each has its tile policy (scheduler.cuh).
enum class Layout : uint32_t {
    kNormal,      // one GEMM
    kContiguous,  // MoE: experts' rows concatenated, an expert id per row (m_indices)
    kMasked,      // MoE: a fixed capacity of rows per group, the valid count per group (masked_m)
    kKGrouped,    // MoE weight gradient: groups' k-blocks concatenated along K, a K per group, D per group
};

// What D holds: bf16, or e4m3 with one float32 scale per row and 128 columns (the A operand's format, so
// the next GEMM reads it as it is): the scale amax / 448, or that rounded up to a power of two (UE8M0);
// or FP32 added into D in global memory (TMA reduce-add: the weight gradient's D += A·Bᵀ).
enum class OutFormat : uint32_t { kBf16, kE4m3, kE4m3Ue8m0, kF32Add };

// B's scales: one per 128x128 block (the forward GEMMs, staged once per tile), or one per row and k-block
// (1x128 as A's: the weight gradient, loaded with every stage by TMA).
enum class ScaleB : uint32_t { kBlock, kRow };

constexpr uint32_t kBlockK = 128;    // K per promotion: the k-block of the scaling recipe
constexpr uint32_t kSlabRows = 64;   // rows of one wgmma (m64): a slab, the unit a math warpgroup computes

template <Layout kLayout_, uint32_t kShapeN_, uint32_t kShapeK_, uint32_t kNumGroups_, uint32_t kBlockM_,
          uint32_t kBlockN_, uint32_t kStages_, uint32_t kNumMathWG_, uint32_t kSwizzleD_, uint32_t kRasterGroup_,
          uint32_t kMulticast_, bool kTailSplit_, uint32_t kRecordSlots_, uint32_t kSplitK_, bool kStreamB_,
          OutFormat kOutFormat_ = OutFormat::kBf16, ScaleB kScaleB_ = ScaleB::kBlock, uint32_t kTileAtoms_ = 0,
          uint32_t kGroupCtas_ = 1, bool kShareB_ = false, uint32_t kColHalves_ = 1, bool kTransposeD_ = false,
          bool kLoadD_ = false>
struct GemmConfig {
    static constexpr Layout kLayout = kLayout_;
    static constexpr uint32_t kShapeN = kShapeN_;
    static constexpr uint32_t kShapeK = kShapeK_;         // 0: K at run time (the weight gradients)
    static constexpr bool kRuntimeK = kShapeK == 0;      // each tile carries its k-block range (Tile::kb0, kb1)
    static constexpr uint32_t kNumGroups = kNumGroups_;   // experts / groups (1: normal)
    static constexpr uint32_t kBlockM = kBlockM_;
    static constexpr uint32_t kBlockN = kBlockN_;
    static constexpr uint32_t kStages = kStages_;         // shared-memory stages of the load ring
    static constexpr uint32_t kNumMathWG = kNumMathWG_;
    static constexpr uint32_t kSwizzleD = kSwizzleD_;     // bytes of the output tile's TMA swizzle span (0: none)
    static constexpr uint32_t kRasterGroup = kRasterGroup_;  // n-blocks per rasterization band
    // 2: the two CTAs of a cluster work on tiles of the same rows (adjacent n-blocks), and each loads
    // half of the shared A tile (and its scales) into both with a multicast TMA load.
    static constexpr uint32_t kMulticast = kMulticast_;
    // With kMulticast == 2, the pair shares B instead (the contiguous layout): its CTAs hold adjacent m-blocks
    // of one n-block, and where both are one expert's, each loads half of the B tile into both.
    static constexpr bool kShareB = kShareB_;
    // Masked layout: a last wave that would leave at least half of the CTAs idle is split in K over the
    // two CTAs of a cluster (split.cuh).
    static constexpr bool kTailSplit = kTailSplit_;
    static constexpr uint32_t kRecordSlots = kRecordSlots_;  // contiguous: slots of the tile-record ring
    // Normal layout, few tiles (decode-sized M): every tile's k-blocks are divided over the kSplitK CTAs of
    // a cluster, which add their partial sums in rank order through distributed shared memory (split.cuh).
    static constexpr uint32_t kSplitK = kSplitK_;
    // B's tiles are read once (decode-sized M): loaded evict-first in L2 (tma.cuh, NOTES.md v17).
    static constexpr bool kStreamB = kStreamB_;
    static constexpr OutFormat kOutFormat = kOutFormat_;
    static constexpr bool kOutFp8 = kOutFormat == OutFormat::kE4m3 || kOutFormat == OutFormat::kE4m3Ue8m0;
    static constexpr bool kOutF32 = kOutFormat == OutFormat::kF32Add;
    static constexpr uint32_t kOutBytes = kOutFp8 ? 1 : kOutF32 ? 4 : 2;  // bytes of an output element
    static constexpr ScaleB kScaleB = kScaleB_;
    static constexpr bool kRowScalesB = kScaleB == ScaleB::kRow;
    // CTAs a split tile's k-blocks are divided over (1: tiles are not split).
    static constexpr uint32_t kSplits = kTailSplit ? 2 : kSplitK;
    // e4m3 output in tiles narrower than a scale group (normal layout, decode-sized M): the kGroupCtas CTAs of
    // a cluster hold the adjacent kBlockN-wide tiles of one 128-column group and share each row's amax through
    // distributed shared memory (split.cuh), so e4m3 output can take the narrow tiles bf16 picks.
    static constexpr uint32_t kGroupCtas = kGroupCtas_;
    // 2: a 128x256 tile as two 128-column halves, each math warpgroup computing both halves of its 64-row slab, one
    // after the other into one accumulator: the registers and shared-memory traffic of 256x128 in tiles of 128 rows
    // (NOTES.md v39).
    static constexpr uint32_t kColHalves = kColHalves_;
    // The weight gradient computing Dᵀ = B·Aᵀ (the host passes B as this kernel's A and A as its B, so that a shape
    // whose tiles fill the SMs better one way round runs that way): each tile is stored transposed, its rows
    // becoming D's columns (epilogue.cuh, reduce_tile_f32; NOTES.md v47).
    static constexpr bool kTransposeD = kTransposeD_;
    // The weight gradient's D tile loaded into shared memory by TMA while the tile's last k-blocks run, the sums
    // added to it there and the tile stored by TMA (a producer warp issues the store), in place of a TMA
    // reduce-add in the L2 (epilogue.cuh, add_tile_f32): faster where D has 2 to 4 m-blocks (NOTES.md v49).
    static constexpr bool kLoadD = kLoadD_;
    // e4m3 output of unsplit tiles of whole 64-column blocks (N too): B's rows land in the order of the accumulator's
    // fragments (a 5-D TMA box, fp8_gemm.tensor_maps), so that the 16 values a thread holds of a row in a 64-column
    // block are 16 adjacent output columns, quantized into one 16-byte store in place of eight 2-byte ones
    // (epilogue.cuh, write_rows; NOTES.md v50).
    static constexpr bool kPermuteB = kOutFp8 && kSplits == 1 && !kShareB && kBlockN % 64 == 0 && kShapeN % 64 == 0;
    // CTAs of a cluster that exchange partial sums or row amax (1: none).
    static constexpr uint32_t kExchangeCtas = kSplits > 1 ? kSplits : kGroupCtas;
    // A split tile's column chunks (split.cuh): rank r owns the 8-column fragments chunk_first(r) ..
    // chunk_first(r + 1) - 1. The tile's 16-byte output units (kChunkUnit fragments: two for e4m3) are dealt out
    // as evenly as they go, so a split need not divide them (e4m3's 128-wide tiles over 3, 5, 6 or 7 CTAs fill
    // the SMs that clusters of those sizes reach: NOTES.md v44).
    static constexpr uint32_t kChunkUnit = kOutFp8 ? 2 : 1;
    static constexpr uint32_t kChunkUnits = kBlockN / 8 / kChunkUnit;
    static constexpr bool kEvenChunks = kChunkUnits % kSplits == 0;
    __host__ __device__ static constexpr uint32_t chunk_first(uint32_t r) {
        return (kEvenChunks ? r * (kChunkUnits / kSplits) : r * kChunkUnits / kSplits) * kChunkUnit;
    }
    __host__ __device__ static constexpr uint32_t chunk_frags(uint32_t r) { return chunk_first(r + 1) - chunk_first(r); }
    static constexpr uint32_t kMaxChunkFrags = (kChunkUnits + kSplits - 1) / kSplits * kChunkUnit;

    // ------------------------------------------------------------------ threads
    static constexpr uint32_t kMathThreads = 128 * kNumMathWG;
    static constexpr uint32_t kThreads = kMathThreads + 128;  // + the producer warpgroup
    static constexpr uint32_t kClusterDims = kExchangeCtas > 1 ? kExchangeCtas : kMulticast;  // CTAs per cluster as launched
    static constexpr uint32_t kMulticastRows = kShareB ? kBlockM : kBlockM / kMulticast;  // A rows a CTA loads

    // ------------------------------------------------------------------ tiles
    static constexpr uint32_t kSlabsPerTile = kBlockM / kSlabRows;  // 64-row slabs of a tile
    // A unit: one slab's rows by kUnitN columns, one MMA chain. A math warpgroup computes kUnitsPerWG of them.
    static constexpr uint32_t kUnitN = kBlockN / kColHalves;
    static constexpr uint32_t kUnitsPerWG = kSlabsPerTile / kNumMathWG * kColHalves;
    // The slab (64-row block of the tile) of math warpgroup wg's w-th unit: interleaved, so that each pass of a
    // contiguous tile split between two experts at its middle has work for both warpgroups (NOTES.md v27).
    __host__ __device__ static constexpr uint32_t slab(uint32_t wg, uint32_t w) { return w / kColHalves * kNumMathWG + wg; }
    // The first column of the w-th unit in the tile.
    __host__ __device__ static constexpr uint32_t unit_col(uint32_t w) { return w % kColHalves * kUnitN; }
    static constexpr uint32_t kSlabStride = kSlabRows * kNumMathWG;  // rows from a warpgroup's slab to its next
    // Rows from a warpgroup's first unit to its w-th.
    __host__ __device__ static constexpr uint32_t unit_row(uint32_t w) { return w / kColHalves * kSlabStride; }
    static constexpr uint32_t kNumKBlocks = (kShapeK + kBlockK - 1) / kBlockK;
    static constexpr uint32_t kNumNBlocks = (kShapeN + kBlockN - 1) / kBlockN;
    static constexpr uint32_t kScaleRowsB = (kShapeN + 127) / 128;  // rows of B's scale grid per group
    static constexpr bool kMayStraddle = !kRowScalesB && (128 % kUnitN) != 0;  // a unit may span two rows of it
    static constexpr uint32_t kScaleRowsPerTile = kMayStraddle || kColHalves > 1 ? 2 : 1;
    // Two accumulator sets (the MMA of one k-block overlaps the promotion of the previous) where
    // registers allow: one slab per warpgroup and 3 x kBlockN/2 live FP32 registers. B's per-column scales
    // (kBlockN/4 registers) leave room for one set only.
    static constexpr uint32_t kAccSets = (kUnitsPerWG == 1 && kBlockN <= 128 && !kRowScalesB) ? 2 : 1;
    // B's block scales staged for each tile by a producer warp (loaded during the tile before, stored once the math
    // warpgroups are past its main loop): the normal layout's e4m3 tiles of two slabs a warpgroup, where the math
    // threads' own prefetch of them moved the epilogue, and of at most 16 k-blocks, where a tile's staging is not
    // negligible (NOTES.md v42, v43; heuristics.scales_by_warp agrees). Elsewhere the math threads stage them (math.cuh).
    static constexpr bool kScalesByWarp =
        kLayout == Layout::kNormal && kOutFp8 && kUnitsPerWG > 1 && kNumKBlocks <= 16;

    // ------------------------------------------------------------------ output tile in shared memory
    // kBlockN columns split into atoms of kAtomBytes per row (the TMA swizzle span), each atom kBlockM
    // rows, stored one after another. Transposed (kTransposeD), D's tile is kBlockN rows (the tile's columns)
    // of kBlockM columns (its rows), in atoms of kAtomCols of the tile's rows.
    static constexpr uint32_t kAtomBytes = kSwizzleD ? kSwizzleD : kBlockN * kOutBytes;
    static constexpr uint32_t kAtomCols = kAtomBytes / kOutBytes;
    static constexpr uint32_t kNumAtoms = (kTransposeD ? kBlockM : kBlockN) / kAtomCols;
    static constexpr uint32_t kAtomRows = kTransposeD ? kBlockN : kBlockM;  // rows of D an atom holds
    static constexpr uint32_t kAtomTileBytes = kAtomRows * kAtomBytes;          // an atom in shared memory
    // Atoms of the output tile that shared memory holds (0: all). The weight gradient's FP32 tile may hold
    // fewer, filled in turn while TMA adds the others into D, to leave shared memory to the stage ring.
    static constexpr uint32_t kTileAtoms = kTileAtoms_ == 0 ? kNumAtoms : kTileAtoms_;

    static_assert(kBlockM % kSlabRows == 0 && kSlabsPerTile % kNumMathWG == 0 && kUnitsPerWG >= 1,
                  "BLOCK_M must be 64 x the math warpgroups x their slabs");
    static_assert(kColHalves == 1 || (kColHalves == 2 && kBlockM == 128 && kBlockN == 256 && kNumMathWG == 2 &&
                                      (kLayout == Layout::kNormal || kLayout == Layout::kContiguous) &&
                                      kOutFormat == OutFormat::kBf16 && kSplits == 1 && (kMulticast == 1 || kShareB)),
                  "column halves: 128x256 tiles of two math warpgroups, the normal or contiguous layout, bf16 output, "
                  "unsplit, no multicast but pairs sharing B");
    static_assert(kSlabsPerTile <= 4, "the contiguous pass bookkeeping packs 2 bits per slab");
    static_assert(kBlockN % 8 == 0 && kBlockN >= 8 && kBlockN <= 256, "BLOCK_N must be a multiple of 8 in [8, 256]");
    static_assert(kBlockN <= 128 || kRowScalesB || (128 % (kBlockN - 128)) == 0,
                  "BLOCK_N > 128 must span at most two sb rows (128x128 B scales)");
    static_assert((kTransposeD ? kBlockM : kBlockN) % kAtomCols == 0, "output atoms must tile the tile's D rows");
    static_assert(kMulticast == 1 || (kMulticast == 2 && (kShareB || kNumNBlocks % 2 == 0)),
                  "pairs sharing A need even n-blocks");
    // A half of a 128-byte swizzled B tile must start on the swizzle's 1024-byte period (8 rows).
    static_assert(!kShareB || (kMulticast == 2 && kLayout == Layout::kContiguous && kBlockM == 128 && kBlockN % 16 == 0),
                  "pairs sharing B: the contiguous layout, BLOCK_M 128 (the tiles tested), BLOCK_N a multiple of 16");
    // Each CTA of a split tile owns a column chunk of at least one 16-byte output unit and at least one k-block.
    // (Which layouts may split, or have a record ring, their tile policies say.)
    static_assert(kSplitK >= 1 && kSplitK <= 8 && !(kTailSplit && kSplitK > 1), "split K over 1 to 8 CTAs, or the tail split");
    static_assert(kSplits == 1 || (kMulticast == 1 && kNumKBlocks >= kSplits && kChunkUnits >= kSplits),
                  "a split tile needs a k-block and a column chunk of at least 16 bytes of output per CTA");
    // An e4m3 output's scale group (128 columns) must lie in one tile: its amax is taken there (a split
    // tile's CTAs share their chunks' row amax, split.cuh).
    static_assert(!kOutFp8 || ((kBlockN % 128 == 0 || kBlockN * kGroupCtas == 128) && (kSplits == 1 || kBlockN == 128) &&
                               kAtomCols == (kBlockN < 128 ? kBlockN : 128) && kSwizzleD == kAtomBytes),
                  "e4m3 output needs BLOCK_N a multiple of 128 (128 when split) or a group's share, and one swizzled "
                  "atom per group (or share)");
    static_assert(kGroupCtas == 1 || (kOutFp8 && kLayout == Layout::kNormal && kSplits == 1 && kMulticast == 1 &&
                                      kBlockN * kGroupCtas == 128 && kGroupCtas <= 4),
                  "CTAs sharing a scale group: e4m3 output of the normal layout, unsplit, 2 or 4 of them, their tiles "
                  "making up 128 columns");
    // The weight gradient: row scales of B, K at run time and FP32 output go together; its tiles are one slab
    // per warpgroup (registers: sums, one accumulator, B's column scales), unsplit and without multicast.
    static_assert(kRowScalesB == kOutF32 && kRowScalesB == kRuntimeK && ((kLayout == Layout::kKGrouped) <= kRuntimeK),
                  "1x128 B scales, K at run time and FP32 output make the weight gradient, and only they");
    static_assert(!kRowScalesB || (kUnitsPerWG == 1 && kSplits == 1 && kMulticast == 1 && kSwizzleD != 0),
                  "the weight gradient needs one slab per math warpgroup, no split or multicast and a swizzled "
                  "output tile");
    static_assert(!kLoadD || (kOutF32 && kTileAtoms == kNumAtoms), "D loaded: the weight gradient's, its whole tile held");
    static_assert(kTileAtoms == kNumAtoms || (kOutF32 && kTileAtoms >= 2 && kTileAtoms < kNumAtoms),
                  "only the FP32 output tile may be held in part, at least two atoms of it");
    // Transposed, a warp's rows lie in one atom, and the atoms not held are written in one second round.
    static_assert(!kTransposeD || (kOutF32 && kSwizzleD == 128 && kAtomCols == 32 && 2 * kTileAtoms >= kNumAtoms),
                  "a transposed tile: the weight gradient's, 128-byte swizzled atoms, at least half of them held");
};

// A typical configuration, for compiling the headers on their own (tests/unit/test_codegen.py).
using DefaultConfig = GemmConfig<Layout::kNormal, 4096, 7168, 1, 128, 128, 8, 2, 128, 8, 1, false, 0, 1, false>;

// The greatest common divisor (the step of the values n0 % 128 takes for tiles of a given width: math.cuh).
__host__ __device__ constexpr uint32_t gcd(uint32_t a, uint32_t b) { return b == 0 ? a : gcd(b, a % b); }

// f(Const<I>{}), f(Const<I + 1>{}), ..., f(Const<N - 1>{}): a loop unrolled with compile-time indices.
template <uint32_t V> struct Const {
    static constexpr uint32_t value = V;
    __device__ constexpr operator uint32_t() const { return V; }
};
template <uint32_t I, uint32_t N, class F> __device__ __forceinline__ void static_for(F&& f) {
    if constexpr (I < N) {
        f(Const<I>{});
        static_for<I + 1, N>(f);
    }
}

}  // namespace cg8

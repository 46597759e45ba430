// Persistent, warp-specialized FP8 GEMM with fine-grained scaling for Hopper (sm_90a).
//
//   D[m, n] = sum_kb  sa[m, kb] * sb[n / 128, kb] * sum_{k in kb} A[m, k] * B[n, k]      (bf16 out)
//
// The includer defines, in namespace cg8, the compile-time configuration (kShapeN, kShapeK, kBlockM,
// kBlockN, kStages, kNumMathWG, kSwizzleD, kGemmType, kNumGroups, kRasterGroup, kClusterSize, kTailSplit,
// kRecordSlots) and
// `wgmma_m64k32(float (&)[kBlockN / 2], desc_a, desc_b, scale_d)` for N = kBlockN
// (see cugemm8/kernels.py). M (the only run-time shape) arrives as an argument.
//
// Masked layout with kTailSplit: when the tiles' last wave would leave at least half of the CTAs idle,
// each of its tiles is shared by the two CTAs of a cluster, each taking half of the k-blocks. Each
// then owns half of the tile's columns: it pushes its FP32 partial sums of the other half into the
// peer's shared memory (st.async, counted on the peer's barrier), adds the peer's, and stores its
// half. (The tile count is only known on the GPU, so the host cannot pick a tile that fits the waves.)
//
// Block roles: warpgroups 0 .. kNumMathWG-1 do the math, the last warpgroup's first thread issues
// every TMA load. A ring of kStages shared-memory stages, each guarded by a `full` barrier (TMA
// bytes landed) and an `empty` barrier (every math warp finished reading it). Stage index and phase
// run on across tiles, so producer and consumers only have to walk the same tile sequence.
#pragma once

namespace cg8 {

enum : uint32_t { kGemmNormal = 0, kGemmContiguous = 1, kGemmMasked = 2 };

constexpr uint32_t kBlockK = 128;
template <bool B> struct Bool { static constexpr bool value = B; };
template <uint32_t V> struct Const { static constexpr uint32_t value = V; };
// f(Const<I>{}), f(Const<I + 1>{}), ..., f(Const<N - 1>{}): a loop unrolled with compile-time indices.
template <uint32_t I, uint32_t N, class F> __device__ __forceinline__ void static_for(F&& f) {
    if constexpr (I < N) {
        f(Const<I>{});
        static_for<I + 1, N>(f);
    }
}
// kClusterSize == 2: the two CTAs of a cluster work on tiles of the same rows (adjacent n-blocks),
// and each loads half of the shared A tile (and its scales) into both CTAs with a multicast TMA load.
constexpr uint32_t kMulticastRows = kBlockM / kClusterSize;
constexpr uint32_t kClusterDims = (kClusterSize > 1 || kTailSplit) ? 2 : 1;  // CTAs per cluster as launched
constexpr uint32_t kMathThreads = 128 * kNumMathWG;
constexpr uint32_t kThreads = kMathThreads + 128;
constexpr uint32_t kWaves = kBlockM / (64 * kNumMathWG);  // m64 row slabs per math warpgroup
constexpr uint32_t kNumKBlocks = (kShapeK + kBlockK - 1) / kBlockK;
constexpr uint32_t kScaleRowsB = (kShapeN + 127) / 128;
constexpr uint32_t kNumNBlocks = (kShapeN + kBlockN - 1) / kBlockN;
constexpr bool kMayStraddle = (128 % kBlockN) != 0;  // a tile may span two 128-row blocks of sb
// Two accumulator sets (MMA of one k-block overlaps the promotion of the previous) where registers
// allow: one 64-row slab per warpgroup and 3 x kBlockN/2 live FP32 registers.
constexpr uint32_t kAccSets = (kWaves == 1 && kBlockN <= 128) ? 2 : 1;
// Masked tiles of one 64-row slab per math warpgroup: a slab wholly past its group's valid rows is idle (its
// warpgroup computes nothing), so a group's last block of at most 64 valid rows is about half a tile's work.
constexpr bool kIdleSlabs = kGemmType == kGemmMasked && kWaves == 1 && kNumMathWG == 2;
// Two ways to walk the stage ring with compile-time shared-memory and barrier addresses (two slabs per
// math warpgroup). Both unroll the main loop over the stages, one round of the ring at a time.
// - Stage-aligned tiles (normal layout): every tile's k-loop starts at stage 0; the producer and the
//   consumers pass through the stages a tile leaves unused (H200, 256x128: 3-4% faster at K = 1536..16384).
//   Not where the unused stages would be a large share of the ring: K = 512 with 3 stages passed 2 of every
//   6 through and measured 5-8% slower.
// - Ring rounds (contiguous layout): a tile takes the ring where the previous one left it: rolled k-blocks
//   up to stage 0, whole rounds, rolled k-blocks for the rest; nothing is passed through. Against the
//   stage-aligned walk it measured 2.5% faster at K = 2048 (there the aligned walk had lost 0.8% to the
//   rolled loop) and 1% at K = 7168. For the normal layout it measured mixed (1.3-1.5% faster at K = 2048,
//   0.3-1.2% slower at K = 512, 1536 and 16384), so that keeps the stage-aligned walk (NOTES.md v15).
constexpr bool kAlignStages = kAccSets == 1 && kWaves == 2 && kGemmType == kGemmNormal && kClusterSize == 1 &&
                              (kNumKBlocks % kStages == 0 || kNumKBlocks >= 4 * kStages);
constexpr bool kRingRounds = kAccSets == 1 && kWaves == 2 && kGemmType == kGemmContiguous && kClusterSize == 1 &&
                             !kTailSplit && kNumKBlocks >= kStages;

// Output tile in shared memory: kBlockN columns split into atoms of kAtomBytes per row (the TMA
// swizzle span), each atom kBlockM rows, stored one after another.
constexpr uint32_t kAtomBytes = kSwizzleD ? kSwizzleD : kBlockN * 2;
constexpr uint32_t kAtomCols = kAtomBytes / 2;
constexpr uint32_t kNumAtoms = kBlockN / kAtomCols;

constexpr uint32_t kSmemD = kBlockM * kBlockN * 2;
constexpr uint32_t kSmemA = kBlockM * kBlockK;
constexpr uint32_t kSmemB = kBlockN * kBlockK;
constexpr uint32_t kSmemSA = kBlockM * 4;
constexpr uint32_t kStageTxBytes = kSmemA + kSmemB + kSmemSA;
constexpr uint32_t kOffA = kSmemD;
constexpr uint32_t kOffB = kOffA + kStages * kSmemA;
constexpr uint32_t kOffSA = kOffB + kStages * kSmemB;
// B's scales for the current tile: every k-block of the (one or two) 128-row scale blocks it spans.
constexpr uint32_t kScaleRowsPerTile = kMayStraddle ? 2 : 1;
constexpr uint32_t kSmemSB = (kNumKBlocks * kScaleRowsPerTile * 4 + 15) / 16 * 16;
constexpr uint32_t kOffSB = kOffSA + kStages * kSmemSA;
// Layout words. Masked, read from global memory once per CTA: every group's valid rows, clamped to [0, M],
// and the running total of tiles up to and including each group. Contiguous: a ring of tile records (each
// slab's expert id, then one bit per row that is no expert's), written ahead by the producer warpgroup's
// second warp, so that the math threads read m_indices from shared memory only (see Scheduler::publish).
// kRecordSlots (heuristics.RECORD_SLOTS) is 0 outside the contiguous layout.
constexpr uint32_t kRecordWords = kBlockM / 64 + kBlockM / 32;
constexpr uint32_t kSmemRows = kGemmType == kGemmMasked ? (kNumGroups * 8 + 15) / 16 * 16
                                                        : (kRecordSlots * kRecordWords * 4 + 15) / 16 * 16;
constexpr uint32_t kOffRows = kOffSB + kSmemSB;
constexpr uint32_t kOffBar = kOffRows + kSmemRows;
// Barriers: full and empty per stage; for the split tail, `ready` (the peer may push into this CTA's output
// tile) and `received`; for the contiguous record ring, full and empty per slot.
constexpr uint32_t kSmemBytes = kOffBar + kStages * 16 + (kTailSplit ? 16 : 0) + kRecordSlots * 16;

static_assert((kRecordSlots > 0) == (kGemmType == kGemmContiguous), "the record ring is the contiguous layout's");
static_assert(kBlockM % 64 == 0 && kWaves >= 1 && kBlockM == kWaves * 64 * kNumMathWG, "bad BLOCK_M");
static_assert(kBlockN % 8 == 0 && kBlockN >= 8 && kBlockN <= 256, "BLOCK_N must be a multiple of 8 in [8, 256]");
static_assert(kBlockN <= 128 || (128 % (kBlockN - 128)) == 0, "BLOCK_N > 128 must span at most two sb rows");
static_assert(kSmemD % 1024 == 0 && kSmemA % 1024 == 0 && kSmemB % 1024 == 0, "stages must stay 1024-aligned");
static_assert(kBlockN % kAtomCols == 0, "output atoms must tile BLOCK_N");
static_assert(kClusterSize == 1 || (kClusterSize == 2 && kNumNBlocks % 2 == 0), "multicast pairs need even n-blocks");
// A split tile's halves are column halves of whole 8-column fragments; the half of the partial sums a
// CTA receives (kBlockM x kBlockN/2 FP32) fills exactly its output tile's shared memory.
static_assert(!kTailSplit || (kGemmType == kGemmMasked && kClusterSize == 1 && kNumKBlocks >= 2 &&
                              kBlockN % 16 == 0), "bad tail split");

// Tile sequence shared by the producer and the math warpgroups.
//
// A tile is worked in one or more passes, each with one group's B. Normal and masked tiles have one
// pass. A contiguous tile's rows may belong to several experts (segments start at multiples of 64):
// each 64-row slab takes the expert of its first row, and every run of slabs with the same valid
// expert is one pass; slabs of other passes (and padding slabs) skip their MMAs in it. A tile with
// no valid slab has no pass: no loads, no MMA, zeros out.
constexpr uint32_t kSlabs = kBlockM / 64;
static_assert(kSlabs <= 4, "pass bookkeeping packs 2 bits per slab");
struct Tile {
    uint32_t m_block;  // block index within the group's rows
    uint32_t n_block;
    int32_t group;     // normal: 0; masked: the group; contiguous: see pass_group
    uint32_t rows;     // rows of the group (masked: valid rows; otherwise M)
    uint32_t passes;   // bit p: a pass starts at slab p
    uint32_t heads;    // contiguous: 2 bits per slab, the slab its pass starts at
    uint32_t valid;    // contiguous: bit s: slab s has a valid expert
    uint32_t zero;     // contiguous, math threads: bit 2w+h: this thread's row (slab w, +8h) is no expert's
    int32_t slab_group[kSlabs];  // contiguous: each slab's expert id (valid slabs only)
    uint32_t split;    // tail(): 1 the first k-blocks, 2 the rest; each CTA stores column half split - 1

    // The k-blocks this CTA works on: all, or its half of a split tile (the first half rounded up).
    static constexpr uint32_t kHalfKBlocks = (kNumKBlocks + 1) / 2;
    __device__ __forceinline__ uint32_t kb_begin() const { return split == 2 ? kHalfKBlocks : 0u; }
    __device__ __forceinline__ uint32_t kb_end() const { return split == 1 ? kHalfKBlocks : kNumKBlocks; }

    // Contiguous, after decode: one pass in which every slab works (no expert boundary or padding slab
    // in the tile), the common case. Such tiles run code without the pass bookkeeping (`kWhole` below;
    // H200: 1.5-4% faster end to end). Normal and masked tiles are always of this kind.
    __device__ __forceinline__ bool whole() const { return passes == 1u && valid == (1u << kSlabs) - 1; }

    // The group whose B the pass starting at slab p multiplies with.
    __device__ __forceinline__ int32_t pass_group(uint32_t p) const {
        if constexpr (kGemmType != kGemmContiguous) return group;
        int32_t g = slab_group[0];
#pragma unroll
        for (uint32_t s = 1; s < kSlabs; ++s)
            if (p == s) g = slab_group[s];
        return g;
    }

    // Slabs (within this math warpgroup's kWaves) that do MMAs in the pass starting at slab p.
    __device__ __forceinline__ uint32_t active_waves(uint32_t p, uint32_t wg) const {
        if constexpr (kGemmType != kGemmContiguous) return (1u << kWaves) - 1;
        uint32_t mask = 0;
#pragma unroll
        for (uint32_t w = 0; w < kWaves; ++w) {
            const uint32_t s = wg * kWaves + w;
            if (((valid >> s) & 1u) && ((heads >> (2 * s)) & 3u) == p) mask |= 1u << w;
        }
        return mask;
    }
};
// Masked layout: the search for a tile's group takes log2 steps over the groups' tile totals.
constexpr uint32_t kGroupSearchTop = [] {
    uint32_t p = 1;
    while (p < kNumGroups) p *= 2;
    return p;
}();

struct Scheduler {
    uint32_t m;               // normal/contiguous: rows of A; masked: max_m (rows per group)
    const int32_t* layout;    // contiguous: m_indices (global); masked: kNumGroups valid rows, then
                              // kNumGroups running tile totals (shared)
    uint32_t num_m_blocks;    // normal/contiguous
    uint32_t tile_idx;
    uint32_t thread_row;      // contiguous, math threads: this thread's first accumulator row in a tile
    uint32_t records = 0;     // contiguous, math threads: tile records taken from the ring
    uint32_t split_from;      // kTailSplit: the first tile of the split last wave (the tile count if none)
    uint32_t total;           // kTailSplit: the tile count

    __device__ __forceinline__ Scheduler(uint32_t m_, const int32_t* layout_, uint32_t thread_row_)
        : m(m_), layout(layout_), thread_row(thread_row_) {
        num_m_blocks = (m + kBlockM - 1) / kBlockM;
        tile_idx = blockIdx.x;
        if constexpr (kTailSplit) {
            total = uint32_t(layout[2 * kNumGroups - 1]);
            const uint32_t tail = total % gridDim.x;
            split_from = (tail != 0 && 2 * tail <= gridDim.x) ? total - tail : total;
        }
    }

    // Rasterize `local` over (m_blocks x kNumNBlocks): bands of kRasterGroup n-blocks, m-blocks
    // within a band, so a wave of CTAs shares both A and B tiles in L2.
    __device__ __forceinline__ static void raster(uint32_t local, uint32_t m_blocks, uint32_t& mb, uint32_t& nb) {
        const uint32_t per_band = kRasterGroup * m_blocks;
        const uint32_t band = local / per_band;
        const uint32_t first_n = band * kRasterGroup;
        const uint32_t width = min(kRasterGroup, kNumNBlocks - first_n);
        const uint32_t r = local - band * per_band;
        mb = r / width;
        nb = first_n + r % width;
    }

    __device__ __forceinline__ bool next(Tile& t) {
        if constexpr (kGemmType == kGemmMasked) {
            if (kTailSplit && tile_idx >= split_from) return false;  // the split tiles: see tail()
            if (!locate(tile_idx, t)) return false;
        } else {
            if (tile_idx >= num_m_blocks * kNumNBlocks) return false;
            raster(tile_idx, num_m_blocks, t.m_block, t.n_block);
            t.rows = m;
            t.group = 0;
            t.passes = 1;
            if constexpr (kGemmType == kGemmContiguous) {
                // The TMA thread reads its slabs' experts itself (the math threads take them from the
                // record ring). Only the loads are issued here; decode() looks at the values when the
                // tile's turn comes, a whole tile later, so no branch waits for them. (Branching on each
                // slab's id serialized the loads: several L2 round trips without TMA issue.)
                if (thread_row >= kBlockM) {
#pragma unroll
                    for (uint32_t s = 0; s < kSlabs; ++s)
                        t.slab_group[s] = __ldg(layout + min(t.m_block * kBlockM + s * 64, m - 1));
                }
            }
        }
        tile_idx += gridDim.x;
        return true;
    }

    // Masked: tile `idx` of the groups' tiles, in the group holding it; false past the last.
    __device__ __forceinline__ bool locate(uint32_t idx, Tile& t) const {
        // The group holding the tile: the first whose running tile total exceeds idx, found in a fixed
        // number of steps. (A cursor carried from tile to tile, advanced through the groups with
        // shared-memory loads, took the tile loop's stage counters, and with them the main loop's
        // wgmma descriptor arithmetic, off the uniform datapath: an R2UR before every wgmma, ncu 13%
        // slower than dense at the same tile.)
        const int32_t* tile_end = layout + kNumGroups;
        uint32_t g = 0;
#pragma unroll
        for (uint32_t step = kGroupSearchTop; step != 0; step /= 2)
            if (g + step <= kNumGroups && uint32_t(tile_end[g + step - 1]) <= idx) g += step;
        if (g >= kNumGroups) return false;
        const uint32_t first = g == 0 ? 0u : uint32_t(tile_end[g - 1]);
        t.rows = uint32_t(layout[g]);
        const uint32_t m_blocks = (t.rows + kBlockM - 1) / kBlockM;
        const uint32_t local = idx - first;
        // Longest first: a last m-block of at most 64 valid rows is light (kIdleSlabs). When the last wave
        // is no larger than one m-block's tiles, and the last group holding tiles ends in such a block, its
        // tiles go to the end of the sequence: the last wave (or split tail) is then all light tiles instead
        // of lengthening some CTAs' runs of full tiles. Otherwise the order stays, since moving them only
        // loses their B tiles' L2 sharing with the group's other m-blocks (3% slower at 807 rows, H200).
        const uint32_t total = uint32_t(tile_end[kNumGroups - 1]);
        const uint32_t last_wave = total % gridDim.x;
        const bool light_last = kIdleSlabs && (t.rows % kBlockM) - 1u < 64u && uint32_t(tile_end[g]) == total &&
                                last_wave - 1u < kNumNBlocks;
        const uint32_t full_tiles = light_last ? (m_blocks - 1) * kNumNBlocks : ~0u;
        if (local >= full_tiles) {
            t.m_block = m_blocks - 1;
            t.n_block = local - full_tiles;
        } else {
            raster(local, light_last ? m_blocks - 1 : m_blocks, t.m_block, t.n_block);
        }
        t.group = int32_t(g);
        t.passes = 1;
        return true;
    }

    // kTailSplit, once next() has returned false: this CTA's share of the split last wave, if any.
    // The cluster of CTAs 2c and 2c+1 takes tile split_from + c, the first CTA the first half of its
    // k-blocks (rounded up), the second the rest.
    __device__ __forceinline__ bool tail(Tile& t) const {
        const uint32_t idx = split_from + blockIdx.x / 2;
        if (idx >= total || !locate(idx, t)) return false;
        t.split = 1 + blockIdx.x % 2;
        return true;
    }

    // Contiguous: the slot of the ring holding the n-th tile record, and the barrier phase of that use.
    __device__ __forceinline__ static uint32_t record_slot(uint32_t n) { return n % kRecordSlots; }
    __device__ __forceinline__ static uint32_t record_phase(uint32_t n) { return (n / kRecordSlots) & 1u; }

    // Contiguous, the producer warpgroup's second warp (one lane per row of each 32): tile t's record, the
    // n-th, into its slot of the ring. The math threads then hold no m_indices load in flight through the main loop: with
    // them, ptxas spilled the stage-aligned loop's tile code (NOTES.md v12, v13), and without the aligned
    // loop the contiguous kernel ran 5-7% behind the normal one.
    __device__ __forceinline__ void publish(const Tile& t, uint32_t n, uint64_t* full_bars, uint64_t* empty_bars,
                                            int32_t* ring, uint32_t lane) const {
        const uint32_t slot = record_slot(n);
        constexpr uint32_t kChunks = kBlockM / 32;
        int32_t id[kChunks];
#pragma unroll
        for (uint32_t j = 0; j < kChunks; ++j) id[j] = __ldg(layout + min(t.m_block * kBlockM + j * 32 + lane, m - 1));
        mbar_wait(&empty_bars[slot], record_phase(n) ^ 1);
        int32_t* words = ring + slot * kRecordWords;
#pragma unroll
        for (uint32_t j = 0; j < kChunks; ++j) {
            const uint32_t row = t.m_block * kBlockM + j * 32 + lane;
            const uint32_t none = __ballot_sync(~0u, row < m && uint32_t(id[j]) >= kNumGroups);  // -1 wraps high
            if (lane == 0) {
                words[kSlabs + j] = int32_t(none);
                if (j % 2 == 0) words[j / 2] = row < m ? id[j] : -1;
            }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&full_bars[slot]);
    }

    // Contiguous: the tile's passes (and a math thread's zero rows), from the slab ids next() loaded (the TMA
    // thread) or from the tile's record (the math threads, which then free its slot).
    template <class MathRole>
    __device__ __forceinline__ void decode(Tile& t, const int32_t* ring, uint64_t* ring_full, uint64_t* ring_empty,
                                           MathRole) {
        if constexpr (kGemmType == kGemmContiguous) {
            constexpr bool kMath = MathRole::value;
            uint32_t zero_words[2 * kWaves];
            if constexpr (kMath) {
                const uint32_t slot = record_slot(records);
                mbar_wait(&ring_full[slot], record_phase(records++));
                const int32_t* words = ring + slot * kRecordWords;
#pragma unroll
                for (uint32_t s = 0; s < kSlabs; ++s) t.slab_group[s] = words[s];
#pragma unroll
                for (uint32_t i = 0; i < 2 * kWaves; ++i)
                    zero_words[i] = uint32_t(words[kSlabs + (thread_row + (i / 2) * 64 + (i % 2) * 8) / 32]);
                // Every math thread arrives (a release) after its own reads: all of them free the slot. (One
                // arrival per warp after a __syncwarp is as correct, but ptxas drops the warp barrier in
                // converged code, and compute-sanitizer's racecheck then reports the record warp's next
                // write into the slot as a race with the other lanes' reads.)
                mbar_arrive(&ring_empty[slot]);
            }
            t.passes = t.heads = t.valid = 0;
            int32_t prev = -1;
            uint32_t head = 0;
#pragma unroll
            for (uint32_t s = 0; s < kSlabs; ++s) {
                const int32_t g = t.m_block * kBlockM + s * 64 < m ? t.slab_group[s] : -1;
                t.slab_group[s] = g;
                if (g >= 0 && g < int32_t(kNumGroups)) {  // ids past the last expert count as padding
                    if (g != prev) head = s, t.passes |= 1u << s;
                    t.valid |= 1u << s;
                    t.heads |= head << (2 * s);
                    prev = g;
                } else {
                    prev = -1;
                }
            }
            // The math thread's own rows that come out as zeros (an id that is no expert's).
            t.zero = 0;
#pragma unroll
            for (uint32_t i = 0; i < 2 * kWaves && kMath; ++i) {
                const uint32_t r = thread_row + (i / 2) * 64 + (i % 2) * 8;
                if ((zero_words[i] >> (r % 32)) & 1u) t.zero |= 1u << i;
            }
        }
    }
};

// Row of the 2-D A / D views where a tile starts (masked groups are stacked max_m rows apart).
__device__ __forceinline__ uint32_t tile_row(const Tile& t, uint32_t m) {
    return (kGemmType == kGemmMasked ? uint32_t(t.group) * m : 0u) + t.m_block * kBlockM;
}

// Byte address of output element (row, col) in the swizzled shared-memory tile; col % 8 == 0.
__device__ __forceinline__ uint32_t d_smem_addr(uint32_t base, uint32_t row, uint32_t col) {
    const uint32_t atom = col / kAtomCols;
    uint32_t off = row * kAtomBytes + (col % kAtomCols) * 2;
    if constexpr (kSwizzleD != 0) off ^= ((off >> 7) & (kSwizzleD / 16 - 1)) << 4;
    return base + atom * (kBlockM * kAtomBytes) + off;
}

}  // namespace cg8

#ifdef CG8_TRACE
#include "trace.cuh"
#define CG8_MARK(...) tracer.mark(__VA_ARGS__)
#else
#define CG8_MARK(...) ((void)0)
#endif

extern "C" __global__ void __launch_bounds__(cg8::kThreads, 1) CG8_CLUSTER_ATTRIBUTE
cugemm8_fp8_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                 const __grid_constant__ CUtensorMap tmap_sa, const __grid_constant__ CUtensorMap tmap_d,
                 const float* __restrict__ sb, const int* __restrict__ layout, unsigned short* __restrict__ d,
                 unsigned int ldd, unsigned int m) {
    using namespace cg8;
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_d = smem;
    uint8_t* smem_a = smem + kOffA;
    uint8_t* smem_b = smem + kOffB;
    float* smem_sa = reinterpret_cast<float*>(smem + kOffSA);
    float* smem_sb = reinterpret_cast<float*>(smem + kOffSB);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kOffBar);
    uint64_t* empty = full + kStages;
    uint64_t* split_ready = empty + kStages;        // kTailSplit only
    uint64_t* split_received = split_ready + 1;
    uint64_t* ring_full = full + 2 * kStages + (kTailSplit ? 2 : 0);  // contiguous only
    uint64_t* ring_empty = ring_full + kRecordSlots;

#ifdef CG8_TRACE
    Tracer tracer;
#endif
    CG8_MARK(kTraceStart);
    if (threadIdx.x == 0 && (smem_addr(smem) & 1023u) != 0) __trap();  // 128B swizzle needs 1024-byte alignment

    const uint32_t wg = threadIdx.x / 128;
    const uint32_t tid = threadIdx.x % 128;
    const uint32_t warp = tid / 32, lane = tid % 32;

    if (threadIdx.x == kMathThreads) {
        tma_prefetch_map(&tmap_a);
        tma_prefetch_map(&tmap_b);
        tma_prefetch_map(&tmap_sa);
        tma_prefetch_map(&tmap_d);
        for (uint32_t s = 0; s < kStages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kNumMathWG * 4 * kClusterSize);  // every math warp of every CTA
        }
        static_for<0, kRecordSlots>([&](auto s) {
            mbar_init(&ring_full[s.value], 1);                  // the record warp's arrival
            mbar_init(&ring_empty[s.value], kMathThreads);  // every math thread has read the record
        });
        if constexpr (kTailSplit) {
            mbar_init(split_ready, 1);     // the peer's arrival
            mbar_init(split_received, 1);  // this CTA's expect_tx, then the peer's bytes
        }
        fence_barrier_init();
        fence_proxy_async_smem();
    }
    // Masked: each group's valid rows, loaded before the barrier below, so that the loads' latency
    // overlaps the set-up (a walk over the groups through global memory would put one dependent load
    // per group on the way to every CTA's next tile).
    int32_t* smem_rows = reinterpret_cast<int32_t*>(smem + kOffRows);
    if constexpr (kGemmType == kGemmMasked) {
        for (uint32_t g = threadIdx.x; g < kNumGroups; g += kThreads) {
            const int32_t rows = __ldg(layout + g);
            smem_rows[g] = rows < 0 ? 0 : int32_t(min(uint32_t(rows), m));
        }
    }
    // With multicast, or the split tail's exchange, the peer CTA arrives on our barriers (and writes into
    // our shared memory): it must see them initialized first.
    // (The relaxed cluster barrier orders no memory: __syncthreads publishes the rows above.)
    if constexpr (kClusterSize > 1) {
        cluster_sync();
    } else {
        __syncthreads();
        if constexpr (kTailSplit) cluster_sync_relaxed();
    }
    if constexpr (kGemmType == kGemmMasked) {
        // Running tile totals per group (the scheduler's search), by the first warp 32 groups at a time.
        if (threadIdx.x < 32) {
            uint32_t total = 0;
            for (uint32_t base = 0; base < kNumGroups; base += 32) {
                const uint32_t g = base + threadIdx.x;
                uint32_t sum = g < kNumGroups ? (uint32_t(smem_rows[g]) + kBlockM - 1) / kBlockM * kNumNBlocks : 0u;
#pragma unroll
                for (uint32_t d = 1; d < 32; d *= 2) {
                    const uint32_t lower = __shfl_up_sync(~0u, sum, d);
                    if (threadIdx.x >= d) sum += lower;
                }
                if (g < kNumGroups) smem_rows[kNumGroups + g] = int32_t(total + sum);
                total += __shfl_sync(~0u, sum, 31);
            }
        }
        __syncthreads();
    }
    const uint32_t cta_rank = kClusterDims > 1 ? cluster_ctarank() : 0;
    CG8_MARK(kTraceSetUp);

    // Contiguous: each role fetches its next tile while the current one is still in flight (the TMA thread's
    // slab-id loads, so that their latency is not paid between tiles). (Elsewhere fetching is pure
    // arithmetic, and fetching early moved the normal kernels' wgmma descriptor arithmetic off the
    // uniform datapath: 64x2112x7168 measured 25% slower.)
    constexpr bool kFetchEarly = kGemmType == kGemmContiguous;
    Scheduler sched(m, kGemmType == kGemmMasked ? smem_rows : layout,
                    wg < kNumMathWG ? wg * kWaves * 64 + warp * 16 + lane / 4 : kBlockM);
    Tile t, next_t;
    uint32_t stage = 0, phase = 0;
    auto advance = [&]() {  // the next stage of the ring (both roles walk it in the same order)
        if (++stage == kStages) stage = 0, phase ^= 1;
    };

    if (wg == kNumMathWG) {
        // ------------------------------------------------------------ producer
        setmaxnreg_dec<40>();
        // All TMA loads of one tile; after_load() runs after each k-block's.
        auto load_tile = [&](const Tile& t, auto&& after_load, auto split_tile, auto whole_tile) {
            constexpr bool kSplitTile = decltype(split_tile)::value;
            constexpr bool kWhole = decltype(whole_tile)::value;  // t.whole(): one pass, from slab 0
            const int32_t a_row = int32_t(tile_row(t, m));
            const int32_t sa_row0 = int32_t(kGemmType == kGemmMasked ? uint32_t(t.group) * kNumKBlocks : 0u);
            const int32_t sa_col = int32_t(t.m_block * kBlockM);
            CG8_MARK(kTraceLoads, (t.n_block << 16) | t.m_block);
#pragma unroll 1
            for (uint32_t passes = kWhole ? 1u : t.passes; passes != 0; passes &= passes - 1) {
                const int32_t group = t.pass_group(kWhole ? 0u : __ffs(passes) - 1);
                const int32_t b_row = int32_t(uint32_t(group) * kShapeN + t.n_block * kBlockN);
                const uint32_t kb_end = kSplitTile ? t.kb_end() : kNumKBlocks;
#pragma unroll 1
                for (uint32_t kb = kSplitTile ? t.kb_begin() : 0u; kb < kb_end; ++kb) {
                    mbar_wait(&empty[stage], phase ^ 1);
                    uint64_t* bar = &full[stage];
                    mbar_arrive_expect_tx(bar, kStageTxBytes);
                    const uint32_t half = cta_rank * kMulticastRows;  // this CTA's share of the A rows
                    if constexpr (kClusterSize > 1) {
                        tma_load_2d_multicast(smem_a + stage * kSmemA + half * kBlockK, &tmap_a, bar,
                                              int32_t(kb * kBlockK), a_row + int32_t(half), 0x3);
                        tma_load_2d_multicast(smem_sa + stage * kBlockM + half, &tmap_sa, bar,
                                              sa_col + int32_t(half), sa_row0 + int32_t(kb), 0x3);
                    } else {
                        tma_load_2d(smem_a + stage * kSmemA, &tmap_a, bar, int32_t(kb * kBlockK), a_row);
                        tma_load_2d(smem_sa + stage * kBlockM, &tmap_sa, bar, sa_col, sa_row0 + int32_t(kb));
                    }
                    tma_load_2d(smem_b + stage * kSmemB, &tmap_b, bar, int32_t(kb * kBlockK), b_row);
                    advance();
                    after_load();
                }
            }
            if constexpr (kAlignStages) {
                for (; stage != 0; advance()) {  // stages this tile leaves unused: pass them through
                    mbar_wait(&empty[stage], phase ^ 1);
                    mbar_arrive(&full[stage]);
                }
            }
            CG8_MARK(kTraceLoadsDone);
        };
        if constexpr (kGemmType == kGemmContiguous) {
            if (warp == 1) {  // the record warp: every tile's record, up to kRecordSlots tiles ahead
                Scheduler walk(m, layout, kBlockM);
                Tile rt;
                for (uint32_t n = 0; walk.next(rt); ++n) walk.publish(rt, n, ring_full, ring_empty, smem_rows, lane);
            }
        }
        if constexpr (kFetchEarly) {
            bool more = tid == 0 && sched.next(t);
            while (more) {
                sched.decode(t, smem_rows, ring_full, ring_empty, Bool<false>{});
                bool fetched = false;
                auto after_load = [&] {
                    if (!fetched) fetched = true, more = sched.next(next_t);
                };
                if (t.whole()) load_tile(t, after_load, Bool<false>{}, Bool<true>{});
                else load_tile(t, after_load, Bool<false>{}, Bool<false>{});
                if (!fetched) more = sched.next(next_t);
                t = next_t;
            }
        } else {
            while (tid == 0 && sched.next(t)) load_tile(t, [] {}, Bool<false>{}, Bool<true>{});
            if constexpr (kTailSplit)
                if (tid == 0 && sched.tail(t)) load_tile(t, [] {}, Bool<true>{}, Bool<true>{});
        }
    } else {
        // ---------------------------------------------------------------- math warpgroups
        setmaxnreg_inc<kNumMathWG == 1 ? 240 : 232>();

        float acc[2][kBlockN / 2];  // the second set is only used when kAccSets == 2
        float fin[kWaves][kBlockN / 2];
        // Shared-memory addresses of the main loop, all formed from one base. For the contiguous layout's
        // rolled-only loops the base comes out of a warp reduction, which ptxas keeps in a uniform register:
        // otherwise (NVRTC 13.0) it re-derived the base from SR_CgaCtaId on every k-block, and the S2UR's
        // latency stood before each stage's barrier wait (ncu: 2% of all stall samples, at 256x128). (With
        // the ring rounds, pinned, ptxas formed the descriptors per thread, R2UR before every wgmma, and
        // spilled; unpinned, none of their loops re-derives the base: a CPU test checks.)
        constexpr bool kPinnedBase = kGemmType == kGemmContiguous && !kRingRounds;
        const uint32_t smem_base = kPinnedBase ? __reduce_or_sync(~0u, smem_addr(smem)) : smem_addr(smem);
        auto shared = [&](const void* p) -> uint32_t {
            if constexpr (kPinnedBase) return smem_base + uint32_t(static_cast<const uint8_t*>(p) - smem);
            else return smem_addr(p);
        };
        const uint32_t smem_a_addr = shared(smem_a);
        const uint32_t smem_b_addr = shared(smem_b);
        const uint32_t smem_d_addr = shared(smem_d);
        const uint64_t desc_a0 = smem_desc_sw128(smem_a_addr), desc_b0 = smem_desc_sw128(smem_b_addr);
        const bool store_thread = (wg == 0 && tid < kNumAtoms);
        // The warpgroup index in a form ptxas knows to be warp-uniform, for the A descriptors: they then
        // stay on the uniform datapath instead of being formed per thread and moved over by R2UR before
        // each wgmma (H200: 2-4% faster at 256x128 and 128x128). BLOCK_N > 128 keeps the per-thread
        // form: 128x192 measured 9-10% slower with it, in two runs (cause not found; NOTES.md v11).
        const uint32_t wg_mma = kBlockN <= 128 ? __shfl_sync(~0u, wg, 0) : wg;

        // One tile: main loop and epilogue. fetch_next() (the scheduler's next tile) runs once, after the
        // first pass's barrier, or before the epilogue of a tile without passes.
        auto work_tile = [&](const Tile& t, auto&& fetch_next, auto split_tile, auto whole_tile) {
                constexpr bool kSplitTile = decltype(split_tile)::value;  // a tail() tile
                constexpr bool kWhole = decltype(whole_tile)::value;      // t.whole(): one pass, every slab
                const uint32_t n0 = t.n_block * kBlockN;
                CG8_MARK(kTraceTile, (kSplitTile ? t.split << 30 : 0u) | (t.n_block << 16) | t.m_block);
                // Every CTA that loaded into (or multicast into) stage `st` must hear that it is free.
                auto release = [&](uint32_t st) {
                    if constexpr (kClusterSize > 1) {
                        if (lane < kClusterSize) mbar_arrive_cluster(&empty[st], lane);
                    } else {
                        if (lane == 0) mbar_arrive(shared(&empty[st]));
                    }
                };
#pragma unroll
                for (uint32_t w = 0; w < kWaves; ++w)
#pragma unroll
                    for (uint32_t i = 0; i < kBlockN / 2; ++i) fin[w][i] = 0.f;

#pragma unroll 1
                for (uint32_t passes = kWhole ? 1u : t.passes; passes != 0; passes &= passes - 1) {
                    const bool first_pass = kWhole || passes == t.passes;
                    const uint32_t pass = kWhole ? 0u : __ffs(passes) - 1;
                    const int32_t group = t.pass_group(pass);
                    // Slabs of this warpgroup in the pass. The warp reduction tells ptxas the value is
                    // warp-uniform: without it, the branches on it move the wgmma descriptor arithmetic
                    // off the uniform datapath (R2UR on every wgmma; measured 10% slower).
                    constexpr uint32_t kAllWaves = (1u << kWaves) - 1;
                    const uint32_t waves = kGemmType == kGemmContiguous && !kWhole
                                               ? __reduce_or_sync(~0u, t.active_waves(pass, wg)) : kAllWaves;
                    const uint32_t sb_row = uint32_t(group) * kScaleRowsB + n0 / 128;
                    const float* sb0_ptr = sb + sb_row * kNumKBlocks;
                    const float* sb1_ptr = sb + min(sb_row + 1, uint32_t(group) * kScaleRowsB + kScaleRowsB - 1) * kNumKBlocks;
                    const uint32_t boundary = 128 - n0 % 128;  // tile columns below this use sb row n0/128

                    // Stage the pass's B scales in shared memory once: a global load per k-block would put
                    // an L2 round trip on every k-block of short-k-block (small) tiles. Every math thread
                    // is past the previous tile's main loop (the epilogue's barrier); a later pass of the
                    // same tile must first wait for the previous pass's readers.
                    if (!first_pass) named_barrier_sync(1, kMathThreads);
                    if constexpr (kSplitTile) {
                        // The peer will push partial sums into this CTA's output tile: the previous tile's
                        // TMA store must be done reading it (the barrier below orders the other readers).
                        if (store_thread) bulk_wait_group_read0();
                    }
                    for (uint32_t i = threadIdx.x; i < kNumKBlocks * kScaleRowsPerTile; i += kMathThreads)
                        smem_sb[i] = __ldg(i < kNumKBlocks ? sb0_ptr + i : sb1_ptr + (i - kNumKBlocks));
                    named_barrier_sync(1, kMathThreads);
                    CG8_MARK(kTraceStaged);
                    if constexpr (kSplitTile) {
                        if (threadIdx.x == 0) {  // ready to receive: the bytes to expect, then tell the peer
                            mbar_arrive_expect_tx(split_received, kSmemD);
                            mbar_arrive_cluster(split_ready, cta_rank ^ 1);
                        }
                    }
                    if (first_pass) fetch_next();
                    CG8_MARK(kTraceLoop);
                    // Waits for k-block `kb`'s stage `st` and returns its promotion scales for 64-row slab `w`:
                    // {sa(r0) sb0, sa(r1) sb0, sa(r0) sb1, sa(r1) sb1}.
                    auto wait_stage = [&](uint32_t kb, float (&scale)[kWaves][4], uint32_t st) {
                        float sb0, sb1;
                        if constexpr (kPinnedBase) {
                            sb0 = ld_shared_f32(shared(smem_sb + kb));
                            sb1 = kMayStraddle ? ld_shared_f32(shared(smem_sb + kNumKBlocks + kb)) : sb0;
                            mbar_wait(shared(&full[st]), phase);
                        } else {
                            sb0 = smem_sb[kb], sb1 = kMayStraddle ? smem_sb[kNumKBlocks + kb] : sb0;
                            mbar_wait(&full[st], phase);
                        }
                        const float* sa = smem_sa + st * kBlockM;
#pragma unroll
                        for (uint32_t w = 0; w < kWaves; ++w) {
                            const uint32_t row = (wg * kWaves + w) * 64 + warp * 16 + lane / 4;
                            float sa0, sa1;
                            if constexpr (kPinnedBase) sa0 = ld_shared_f32(shared(sa + row)), sa1 = ld_shared_f32(shared(sa + row + 8));
                            else sa0 = sa[row], sa1 = sa[row + 8];
                            scale[w][0] = sa0 * sb0, scale[w][1] = sa1 * sb0, scale[w][2] = sa0 * sb1, scale[w][3] = sa1 * sb1;
                        }
                    };
                    // One 128-deep k-block (in stage `st`) of 64-row slab `w` into `d` (issued, committed, not
                    // waited for).
                    auto issue_mma = [&](float (&d)[kBlockN / 2], uint32_t w, uint32_t st) {
#pragma unroll
                        for (uint32_t i = 0; i < kBlockN / 2; ++i) fence_operand(d[i]);
                        wgmma_fence();
                        // Offsets in 16-byte descriptor units (every term a multiple of 16 bytes).
                        const uint32_t a_off = st * (kSmemA / 16) + (wg_mma * kWaves + w) * (64 * kBlockK / 16);
                        const uint32_t b_off = st * (kSmemB / 16);
#pragma unroll
                        for (uint32_t k = 0; k < kBlockK / 32; ++k)
                            wgmma_m64k32(d, smem_desc_add(desc_a0, a_off + k * 2), smem_desc_add(desc_b0, b_off + k * 2), k);
                        wgmma_commit();
                    };
                    // Promotion: scale a finished 128-deep partial sum and add it into the FP32 result.
                    auto promote = [&](float (&f)[kBlockN / 2], float (&d)[kBlockN / 2], const float (&sc)[4]) {
#pragma unroll
                        for (uint32_t i = 0; i < kBlockN / 2; ++i) fence_operand(d[i]);
#pragma unroll
                        for (uint32_t i = 0; i < kBlockN / 8; ++i) {
                            const bool first = !kMayStraddle || i * 8 < boundary;
                            const float s0 = first ? sc[0] : sc[2], s1 = first ? sc[1] : sc[3];
                            f[i * 4 + 0] += s0 * d[i * 4 + 0];
                            f[i * 4 + 1] += s0 * d[i * 4 + 1];
                            f[i * 4 + 2] += s1 * d[i * 4 + 2];
                            f[i * 4 + 3] += s1 * d[i * 4 + 3];
                        }
                    };
                    const uint32_t kb_begin = kSplitTile ? t.kb_begin() : 0u;
                    const uint32_t kb_end = kSplitTile ? t.kb_end() : kNumKBlocks;

                    // An idle slab (kIdleSlabs; a group's last m-block often holds few rows): its warpgroup
                    // walks the ring, and the other one has the tensor cores to itself.
                    const bool idle_slab = kIdleSlabs &&
                                           __reduce_or_sync(~0u, t.m_block * kBlockM + wg_mma * 64 >= t.rows ? 1u : 0u);
                    if ((kGemmType == kGemmContiguous && waves == 0) || idle_slab) {
                        // No slab of this warpgroup in the pass: walk the ring with the other warpgroup.
#pragma unroll 1
                        for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
                            mbar_wait(shared(&full[stage]), phase);
                            release(stage);
                            advance();
                        }
                    } else if constexpr (kAccSets == 1) {
                        // One accumulator: per k-block, each slab's MMAs then its promotion. The other math
                        // warpgroup's MMAs fill the tensor cores meanwhile. Instantiated twice: every slab
                        // (the hot loop, as if there were no passes) and some slabs (tiles of two experts).
                        auto mainloop = [&](auto every_wave) {
                            constexpr bool kEvery = decltype(every_wave)::value;
                            const uint32_t last = kEvery ? kWaves - 1 : 31 - __clz(waves);
                            float scale[kWaves][4];
                            auto kblock = [&](uint32_t kb, uint32_t st) {
                                wait_stage(kb, scale, st);
#pragma unroll
                                for (uint32_t w = 0; w < kWaves; ++w) {
                                    if (!kEvery && !((waves >> w) & 1u)) continue;
                                    issue_mma(acc[0], w, st);
                                    wgmma_wait<0>();
                                    // The stage's shared memory is no longer needed: release it before promoting.
                                    if (w == last) release(st);
                                    promote(fin[w], acc[0], scale[w]);
                                }
                            };
                            if constexpr (kAlignStages && kWhole) {
                                // k-block kb in stage kb % kStages: the stage a compile-time constant in each copy.
                                constexpr uint32_t kRounds = kNumKBlocks / kStages, kRest = kNumKBlocks % kStages;
#pragma unroll 1
                                for (uint32_t r = 0; r < kRounds; ++r) {
                                    static_for<0, kStages>([&](auto st) { kblock(r * kStages + st.value, st.value); });
                                    phase ^= 1;
                                }
                                if constexpr (kRest > 0) {
                                    static_for<0, kRest>([&](auto st) { kblock(kRounds * kStages + st.value, st.value); });
                                    static_for<kRest, kStages>([&](auto st) {  // unused: passed through, as the producer does
                                        mbar_wait(&full[st.value], phase);
                                        release(st.value);
                                    });
                                    phase ^= 1;
                                }
                            } else if constexpr (kRingRounds) {
                                // Rolled up to stage 0, whole rounds of the ring (the stage a compile-time
                                // constant in each copy), rolled again for the rest.
                                uint32_t kb = 0;
#pragma unroll 1
                                for (; stage != 0; ++kb) {  // at most kStages - 1 <= kNumKBlocks k-blocks
                                    kblock(kb, stage);
                                    advance();
                                }
#pragma unroll 1
                                for (uint32_t r = (kNumKBlocks - kb) / kStages; r != 0; --r, kb += kStages) {
                                    static_for<0, kStages>([&](auto st) { kblock(kb + st.value, st.value); });
                                    phase ^= 1;
                                }
#pragma unroll 1
                                for (; kb < kNumKBlocks; ++kb) {
                                    kblock(kb, stage);
                                    advance();
                                }
                            } else {
#pragma unroll 1
                                for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
                                    kblock(kb, stage);
                                    advance();
                                }
                            }
                        };
                        if (waves == kAllWaves) mainloop(Bool<true>{}); else mainloop(Bool<false>{});
                    } else {
                        // Two accumulators (one 64-row slab): k-block kb's MMAs run while kb-1 is promoted,
                        // so the MMA latency is hidden even when this is the only math warpgroup.
                        float scale0[kWaves][4], scale1[kWaves][4];  // kWaves == 1 here
                        uint32_t stage0, stage1;
                        auto retire = [&](float (&d)[kBlockN / 2], const float (&sc)[kWaves][4], uint32_t st) {
                            release(st);
                            promote(fin[0], d, sc[0]);
                        };
                        // Waits for k-block kb's stage, issues its MMAs into `d`, remembers the stage.
                        auto start = [&](uint32_t kb, float (&d)[kBlockN / 2], float (&sc)[kWaves][4], uint32_t& st) {
                            wait_stage(kb, sc, stage);
                            issue_mma(d, 0, stage);
                            st = stage;
                            advance();
                        };
                        start(kb_begin, acc[0], scale0, stage0);
                        uint32_t kb = kb_begin + 1;
#pragma unroll 1
                        for (; kb + 1 < kb_end; kb += 2) {
                            start(kb, acc[1], scale1, stage1);
                            wgmma_wait<1>();
                            retire(acc[0], scale0, stage0);
                            start(kb + 1, acc[0], scale0, stage0);
                            wgmma_wait<1>();
                            retire(acc[1], scale1, stage1);
                        }
                        if (kb < kb_end) {
                            start(kb, acc[1], scale1, stage1);
                            wgmma_wait<1>();
                            retire(acc[0], scale0, stage0);
                            wgmma_wait<0>();
                            retire(acc[1], scale1, stage1);
                        } else {
                            wgmma_wait<0>();
                            retire(acc[0], scale0, stage0);
                        }
                    }
                }

                if constexpr (kAlignStages && !kWhole) {
                    // Tiles with passes run the rolled loop; the next tile must start at stage 0 again.
                    for (; stage != 0; advance()) {  // the stages this tile leaves unused, as the producer does
                        mbar_wait(shared(&full[stage]), phase);
                        release(stage);
                    }
                }
                CG8_MARK(kTraceMainDone);
                // ------------------------------------------------------------ split tile: the two halves meet
                // This CTA stores column half t.split - 1 (its cluster rank): it pushes its partial sums of
                // the other half into the peer's output tile (free once the peer said `ready`), then adds
                // the peer's sums of its own half, which arrive the same way. Slot j of a thread holds its
                // j-th fragment of the half (slab j / kHalfGroups, 8-column group j % kHalfGroups of the
                // half), consecutive threads 16 bytes apart. The half is a compile-time index: fin[] must
                // stay in registers.
                if constexpr (kSplitTile) {
                    auto exchange = [&](auto second_half) {
                        constexpr uint32_t kMine = decltype(second_half)::value ? 1 : 0;
                        constexpr uint32_t kHalfGroups = kBlockN / 16;
                        constexpr uint32_t kHalfVecs = kWaves * kHalfGroups;
                        auto slot = [&](uint32_t j) { return (j * kMathThreads + threadIdx.x) * 16; };
                        mbar_wait(shared(split_ready), 0);
                        const uint32_t peer_tile = map_shared_rank(smem_d_addr, cta_rank ^ 1);
                        const uint32_t peer_received = map_shared_rank(shared(split_received), cta_rank ^ 1);
#pragma unroll
                        for (uint32_t j = 0; j < kHalfVecs; ++j) {
                            const float* f = &fin[j / kHalfGroups][((1 - kMine) * kHalfGroups + j % kHalfGroups) * 4];
                            st_async_v4(peer_tile + slot(j), f[0], f[1], f[2], f[3], peer_received);
                        }
                        mbar_wait(shared(split_received), 0);
#pragma unroll
                        for (uint32_t j = 0; j < kHalfVecs; ++j) {
                            float* f = &fin[j / kHalfGroups][(kMine * kHalfGroups + j % kHalfGroups) * 4];
                            float p0, p1, p2, p3;
                            ld_shared_v4(smem_d_addr + slot(j), p0, p1, p2, p3);
                            f[0] += p0, f[1] += p1, f[2] += p2, f[3] += p3;
                        }
                    };
                    if (t.split == 2) exchange(Bool<true>{}); else exchange(Bool<false>{});
                    CG8_MARK(kTraceExchanged);
                }

                // ------------------------------------------------------------ epilogue
                if (!kWhole && t.passes == 0) fetch_next();
                const uint32_t row0 = tile_row(t, m);
                const uint32_t m0 = t.m_block * kBlockM;

                // Contiguous layout: rows whose m_indices entry is not an expert (-1 on padding) come out
                // as zeros. (Slabs without a valid expert never accumulated: already zero.)
                if (kGemmType == kGemmContiguous && t.zero != 0) {
#pragma unroll
                    for (uint32_t w = 0; w < kWaves; ++w) {
                        const bool z0 = (t.zero >> (2 * w)) & 1u, z1 = (t.zero >> (2 * w + 1)) & 1u;
#pragma unroll
                        for (uint32_t i = 0; i < kBlockN / 8; ++i) {
                            if (z0) fin[w][i * 4 + 0] = fin[w][i * 4 + 1] = 0.f;
                            if (z1) fin[w][i * 4 + 2] = fin[w][i * 4 + 3] = 0.f;
                        }
                    }
                }

                // The previous tile's TMA store must have finished reading the tile before it is rewritten.
                if (store_thread) bulk_wait_group_read0();
                named_barrier_sync(1, kMathThreads);

#pragma unroll
                for (uint32_t w = 0; w < kWaves; ++w) {
                    const uint32_t row = (wg * kWaves + w) * 64 + warp * 16 + (lane / 8 % 2) * 8 + lane % 8;
#pragma unroll
                    for (uint32_t i = 0; i + 1 < kBlockN / 8; i += 2) {
                        const uint32_t addr = d_smem_addr(smem_d_addr, row, (i + lane / 16) * 8);
                        stmatrix_x4(addr, pack_bf16x2(fin[w][i * 4 + 0], fin[w][i * 4 + 1]),
                                    pack_bf16x2(fin[w][i * 4 + 2], fin[w][i * 4 + 3]),
                                    pack_bf16x2(fin[w][i * 4 + 4], fin[w][i * 4 + 5]),
                                    pack_bf16x2(fin[w][i * 4 + 6], fin[w][i * 4 + 7]));
                    }
                    if constexpr ((kBlockN / 8) % 2 == 1) {
                        constexpr uint32_t i = kBlockN / 8 - 1;
                        const uint32_t addr = d_smem_addr(smem_d_addr, row, i * 8);  // lanes 16..31: ignored
                        stmatrix_x2(addr, pack_bf16x2(fin[w][i * 4 + 0], fin[w][i * 4 + 1]),
                                    pack_bf16x2(fin[w][i * 4 + 2], fin[w][i * 4 + 3]));
                    }
                }

                // Copied out by the math threads: a split tile's column half, and a masked group's last block
                // (only rows below masked_m may be written); otherwise one TMA store of the whole tile.
                const bool by_threads = kSplitTile || (kGemmType == kGemmMasked && m0 + kBlockM > t.rows);
                if (!by_threads) {
                    fence_proxy_async_smem();
                    named_barrier_sync(1, kMathThreads);
                    if (store_thread) {
                        tma_store_2d(&tmap_d, smem_d + tid * (kBlockM * kAtomBytes), int32_t(n0 + tid * kAtomCols),
                                     int32_t(row0));
                        bulk_commit_group();
                    }
                    CG8_MARK(kTraceStored);
                } else {
                    named_barrier_sync(1, kMathThreads);
                    const uint32_t valid = min(t.rows - m0, kBlockM);
                    constexpr uint32_t kChunks = kSplitTile ? kBlockN / 16 : kBlockN / 8;  // 16-byte chunks a row
                    const uint32_t c0 = kSplitTile ? (t.split - 1) * (kBlockN / 2) : 0u;
                    for (uint32_t idx = threadIdx.x; idx < valid * kChunks; idx += kMathThreads) {
                        const uint32_t r = idx / kChunks, c = c0 + (idx % kChunks) * 8;
                        if (n0 + c < kShapeN) {
                            uint32_t v0, v1, v2, v3;
                            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                                         : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3)
                                         : "r"(d_smem_addr(smem_d_addr, r, c)));
                            unsigned short* dst = d + uint64_t(row0 + r) * ldd + n0 + c;
                            asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v0), "r"(v1),
                                         "r"(v2), "r"(v3)
                                         : "memory");
                        }
                    }
                    CG8_MARK(kTraceStored);
                }
        };
        if constexpr (kFetchEarly) {
            bool more = sched.next(t);
            while (more) {
                sched.decode(t, smem_rows, ring_full, ring_empty, Bool<true>{});
                auto fetch_next = [&] { more = sched.next(next_t); };  // its loads overlap the main loop
                // (The reduction makes the branch warp-uniform to ptxas: see `waves` below.)
                if (__reduce_or_sync(~0u, t.whole() ? 1u : 0u)) work_tile(t, fetch_next, Bool<false>{}, Bool<true>{});
                else work_tile(t, fetch_next, Bool<false>{}, Bool<false>{});
                t = next_t;
            }
        } else {
            while (sched.next(t)) work_tile(t, [] {}, Bool<false>{}, Bool<true>{});
            if constexpr (kTailSplit)
                if (sched.tail(t)) work_tile(t, [] {}, Bool<true>{}, Bool<true>{});
        }
        if (store_thread) bulk_wait_group0();
    }
    CG8_MARK(kTraceEnd);
    // Neither CTA of a multicast pair may exit while the other can still arrive on its barriers.
    if constexpr (kClusterSize > 1) cluster_sync();
}

// The small-M kernel: D = A·Bᵀ for decode-sized M (up to 32 rows of A), where the GEMM is a read of B's weights
// and the WGMMA kernel's fixed costs (barriers, tensor maps, a producer's issue pace) outweigh its work.
//
// Swapped operands: B's rows are the MMA's 16-row side and A's rows (tokens) its 8-wide side, so no MMA row is
// wasted on missing tokens. Each warp streams its own chunks of B (kChunk k-blocks of the CTA's rows) into a
// private ring of shared-memory slots by 1-D bulk copies, one row a lane, kDepth chunks in flight; A's pieces and
// the scales come into registers when the chunk is issued. The fragments are read from the slot, e4m3 is converted
// to f16 with integer operations (ptx/mma_sync.cuh) and multiplied by mma.sync. A lane's k-slots are a fixed
// permutation of the k-block's 128 bytes, the same for A and B, so the dot products are unchanged.
//
// Work: a CTA owns kRows rows of B (one 128-row scale block holds them) and 1/kSplit of the chunks; its warps take
// those chunks in turn, each promoting its partial sums into FP32 accumulators with both scales after every
// k-block. The warps' sums are added in warp order through shared memory, then the kSplit CTAs of a cluster add
// theirs in rank order in rank 0 (distributed shared memory): the result does not depend on timing.
#pragma once
#include "ptx/cluster.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/memory.cuh"
#include "ptx/mma_sync.cuh"
#include "ptx/pdl.cuh"
#include "ptx/stmatrix.cuh"
#include "ptx/tma.cuh"

namespace cg8 {

template <uint32_t kN_, uint32_t kK_, uint32_t kTokenTiles_, uint32_t kRowTiles_, uint32_t kWarps_, uint32_t kSplit_,
          uint32_t kDepth_, uint32_t kChunk_>
struct SmallMConfig {
    static constexpr uint32_t kN = kN_, kK = kK_;
    static constexpr uint32_t kTokenTiles = kTokenTiles_;   // 8 tokens each: M <= 8 * kTokenTiles
    static constexpr uint32_t kRowTiles = kRowTiles_;       // 16 rows of B each
    static constexpr uint32_t kWarps = kWarps_;
    static constexpr uint32_t kSplit = kSplit_;             // CTAs of a cluster dividing the chunks
    static constexpr uint32_t kDepth = kDepth_;             // chunks a warp has in flight (its ring's slots)
    static constexpr uint32_t kChunk = kChunk_;             // k-blocks a row's bulk copy carries
    static constexpr uint32_t kTokens = 8 * kTokenTiles, kRows = 16 * kRowTiles, kThreads = 32 * kWarps;
    static constexpr uint32_t kKBlocks = (kK + 127) / 128;
    static constexpr uint32_t kChunks = (kKBlocks + kChunk - 1) / kChunk;
    // A slot row: the chunk's bytes, then 64 bytes of padding. Rows g and g + 1 then start 64 bytes apart modulo
    // 128, so the 16-byte reads of a quarter-warp (rows g and g + 1, four pieces each) hit eight bank groups.
    static constexpr uint32_t kRowStride = 128 * kChunk + 64;
    static constexpr uint32_t kSlotBytes = kRows * kRowStride;
    static constexpr uint32_t kRingBytes = kWarps * kDepth * kSlotBytes;   // dynamic shared memory
    static_assert(kRows <= 32 && 128 % kRows == 0, "one row a lane; a CTA's rows lie in one scale block of B");
    static_assert(kN % 8 == 0 && kK % 16 == 0, "N is a multiple of 8, K of 16 (the API checks)");
    static_assert(kSplit >= 1 && kSplit <= 8 && kSplit <= kChunks, "every CTA of a cluster has chunks");
};

// What a chunk needs besides B, in a lane's registers from the time it is issued: per k-block, row g of each
// 8-token tile of A (g = lane / 4), 32 bytes of it: bytes [16t, 16t + 16) and [64 + 16t, 80 + 16t) (t = lane % 4),
// and the scales, so that no multiply waits for a load of its own.
template <class C>
struct Staged {
    uint4 a[C::kChunk][C::kTokenTiles][2];
    float sa[C::kChunk][C::kTokenTiles][2];   // A's scales of tokens 2t and 2t + 1 of each token tile (0 past M)
    float sb[C::kChunk];                      // B's scale of the CTA's rows
};

__device__ __forceinline__ uint32_t word(const uint4 (&v)[2], uint32_t j) {
    const uint4& q = v[j / 4];
    return (j & 3) == 0 ? q.x : (j & 3) == 1 ? q.y : (j & 3) == 2 ? q.z : q.w;
}

// Issues chunk `chunk` into the warp's slot at `slot` (barrier `bar`): each lane copies its row of B, lane 0
// expects the bytes; then A's pieces and the scales into `st`. Rows past N are not copied (their sums are never
// stored); K's tail copies only what lies inside the row, and the reads mask the rest.
template <class C>
__device__ __forceinline__ void issue_chunk(Staged<C>& st, uint32_t slot, uint64_t* bar, const uint8_t* __restrict__ a,
                                            const uint8_t* __restrict__ b, const float* __restrict__ sa,
                                            const float* __restrict__ sb_row, uint32_t m, uint32_t a_ld, uint32_t b_ld,
                                            uint32_t sa_ld, uint32_t row0, uint32_t chunk, uint64_t policy) {
    const uint32_t lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const uint32_t kb0 = chunk * C::kChunk;
    const uint32_t bytes = min(128 * C::kChunk, C::kK - 128 * kb0);   // a multiple of 16
    const uint32_t rows = min(C::kRows, C::kN - row0);
    if (lane == 0) mbar_arrive_expect_tx(bar, rows * bytes);   // the phase cannot end before this arrival
    if (lane < rows)
        bulk_load_1d_hint(slot + lane * C::kRowStride, b + static_cast<uint64_t>(row0 + lane) * b_ld + 128 * kb0, bytes,
                          smem_addr(bar), policy);
#pragma unroll
    for (uint32_t j = 0; j < C::kChunk; ++j) {
        const uint32_t kb = kb0 + j;
        const bool in_kb = kb < C::kKBlocks;
        st.sb[j] = in_kb ? __ldg(sb_row + kb) : 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < C::kTokenTiles; ++i)
#pragma unroll
            for (uint32_t u = 0; u < 2; ++u) {
                const uint32_t token = 8 * i + 2 * t + u;
                st.sa[j][i][u] = in_kb && token < m ? __ldg(sa + kb * sa_ld + token) : 0.0f;
            }
#pragma unroll
        for (uint32_t c = 0; c < 2; ++c) {
            const uint32_t col = kb * 128 + 64 * c + 16 * t;
#pragma unroll
            for (uint32_t i = 0; i < C::kTokenTiles; ++i) {
                const uint32_t token = 8 * i + g;
                st.a[j][i][c] = col < C::kK && token < m
                                    ? __ldg(reinterpret_cast<const uint4*>(a + static_cast<uint64_t>(token) * a_ld + col))
                                    : make_uint4(0, 0, 0, 0);
            }
        }
    }
}

// B's fragments of k-block `j` of the slot: rows g and g + 8 of each 16-row tile, the lane's 32 bytes of each
// (zero past K).
template <class C>
__device__ __forceinline__ void read_b(uint4 (&bf)[C::kRowTiles][2][2], uint32_t slot, uint32_t kb, uint32_t j) {
    const uint32_t lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (uint32_t c = 0; c < 2; ++c) {
        const bool in_k = kb * 128 + 64 * c + 16 * t < C::kK;
#pragma unroll
        for (uint32_t r = 0; r < C::kRowTiles; ++r)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                uint4 v;
                ld_shared_v4_u32(slot + (16 * r + 8 * h + g) * C::kRowStride + 128 * j + 64 * c + 16 * t, v.x, v.y,
                                 v.z, v.w);
                bf[r][h][c] = in_k ? v : make_uint4(0, 0, 0, 0);
            }
    }
}

// One k-block: per tile pair, 8 MMAs into fresh sums, then sums * (A's scale * B's scale * 2^16) into acc
// (2^16 undoes the two 2^-8 of the conversion, exactly). acc[r][i][0..3]: rows g, g, g + 8, g + 8 of row tile
// r; tokens 2t, 2t + 1, 2t, 2t + 1 of token tile i (mma.sync's accumulator layout).
template <class C>
__device__ __forceinline__ void multiply(const uint4 (&bf)[C::kRowTiles][2][2], const uint4 (&af)[C::kTokenTiles][2],
                                         const float (&sa)[C::kTokenTiles][2], float sb_raw,
                                         float (&acc)[C::kRowTiles][C::kTokenTiles][4]) {
    uint32_t x[C::kTokenTiles][8][2];
    float scale[C::kTokenTiles][2];
    const float sb = sb_raw * 65536.0f;
#pragma unroll
    for (uint32_t i = 0; i < C::kTokenTiles; ++i) {
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) e4m3x4_to_f16x2_scaled(word(af[i], j), x[i][j][0], x[i][j][1]);
#pragma unroll
        for (uint32_t u = 0; u < 2; ++u) scale[i][u] = sa[i][u] * sb;
    }
#pragma unroll
    for (uint32_t r = 0; r < C::kRowTiles; ++r) {
        uint32_t w[8][4];
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) {
            e4m3x4_to_f16x2_scaled(word(bf[r][0], j), w[j][0], w[j][2]);
            e4m3x4_to_f16x2_scaled(word(bf[r][1], j), w[j][1], w[j][3]);
        }
#pragma unroll
        for (uint32_t i = 0; i < C::kTokenTiles; ++i) {
            float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (uint32_t j = 0; j < 8; ++j) mma_m16n8k16_f16(sum, w[j], x[i][j][0], x[i][j][1]);
#pragma unroll
            for (uint32_t v = 0; v < 4; ++v) acc[r][i][v] = fmaf(sum[v], scale[i][v & 1], acc[r][i][v]);
        }
    }
}

template <class C>
struct SmallMSmem {
    float warp_sums[C::kWarps][C::kTokens][C::kRows];
    float inbox[C::kSplit > 1 ? C::kSplit : 1][C::kTokens][C::kRows];   // rank 0's: every rank's sums
    uint64_t full[C::kWarps][C::kDepth];                                // each warp's slots
};

template <class C>
__device__ __forceinline__ void small_m_gemm(const uint8_t* __restrict__ a, const float* __restrict__ sa,
                                             const uint8_t* __restrict__ b, const float* __restrict__ sb,
                                             uint16_t* __restrict__ d, uint32_t m, uint32_t a_ld, uint32_t b_ld,
                                             uint32_t sa_ld, uint32_t d_ld) {
    __shared__ SmallMSmem<C> smem;
    extern __shared__ __align__(128) uint8_t ring[];   // [warp][slot] of kSlotBytes
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint64_t* full = smem.full[warp];
    if (lane == 0) {
#pragma unroll
        for (uint32_t s = 0; s < C::kDepth; ++s) mbar_init(&full[s], 1);
        fence_barrier_init();
    }
    __syncwarp();
    if constexpr (C::kSplit > 1) cluster_arrive_relaxed();   // "started": peers may write our inbox after this
    launch_dependents();      // programmatic dependent launch (runtime.set_pdl); no-ops without it
    grid_dependency_wait();   // nothing read before the previous grid's results are visible
    const uint32_t rank = blockIdx.x % C::kSplit, row0 = blockIdx.x / C::kSplit * C::kRows;
    const uint32_t c_begin = rank * C::kChunks / C::kSplit, c_end = (rank + 1) * C::kChunks / C::kSplit;
    const float* sb_row = sb + row0 / 128 * C::kKBlocks;
    const uint32_t slots = smem_addr(ring) + warp * C::kDepth * C::kSlotBytes;
    const uint64_t policy = l2_policy_evict_first();   // B is read once

    // A warp's chunks: c_begin + warp, then every kWarps-th; slot s holds those of turn s, s + kDepth, ... and is
    // refilled with the chunk kDepth turns later once read (DRAM latency x bandwidth wants tens of KB in flight an
    // SM: NOTES.md v30, v31).
    float acc[C::kRowTiles][C::kTokenTiles][4] = {};
    Staged<C> st[C::kDepth];
#pragma unroll
    for (uint32_t s = 0; s < C::kDepth; ++s) {
        const uint32_t chunk = c_begin + warp + s * C::kWarps;
        if (chunk < c_end)
            issue_chunk<C>(st[s], slots + s * C::kSlotBytes, &full[s], a, b, sa, sb_row, m, a_ld, b_ld, sa_ld, row0,
                           chunk, policy);
    }
    uint32_t phase = 0;
    for (uint32_t c0 = c_begin + warp; c0 < c_end; c0 += C::kDepth * C::kWarps, phase ^= 1) {
#pragma unroll
        for (uint32_t s = 0; s < C::kDepth; ++s) {
            const uint32_t chunk = c0 + s * C::kWarps;
            if (chunk >= c_end) break;
            const uint32_t slot = slots + s * C::kSlotBytes;
            mbar_wait(&full[s], phase);
#pragma unroll
            for (uint32_t j = 0; j < C::kChunk; ++j) {
                const uint32_t kb = chunk * C::kChunk + j;
                if (kb < C::kKBlocks) {
                    uint4 bf[C::kRowTiles][2][2];
                    read_b<C>(bf, slot, kb, j);
                    multiply<C>(bf, st[s].a[j], st[s].sa[j], st[s].sb[j], acc);
                }
            }
            __syncwarp();   // every lane's reads of the slot are done before it is refilled
            const uint32_t next = chunk + C::kDepth * C::kWarps;
            if (next < c_end)
                issue_chunk<C>(st[s], slot, &full[s], a, b, sa, sb_row, m, a_ld, b_ld, sa_ld, row0, next, policy);
        }
    }
#pragma unroll
    for (uint32_t r = 0; r < C::kRowTiles; ++r)
#pragma unroll
        for (uint32_t i = 0; i < C::kTokenTiles; ++i)
#pragma unroll
            for (uint32_t v = 0; v < 4; ++v)
                smem.warp_sums[warp][8 * i + 2 * t + (v & 1)][16 * r + g + 8 * (v >> 1)] = acc[r][i][v];
    __syncthreads();

    // Two adjacent rows of one token a thread: the warps' sums in warp order, then the ranks' in rank order.
    constexpr uint32_t kPairs = C::kTokens * C::kRows / 2;
    static_assert(kPairs <= C::kThreads, "one pair of outputs a thread");
    const uint32_t token = 2 * threadIdx.x / C::kRows, row = 2 * threadIdx.x % C::kRows;
    const bool mine = threadIdx.x < kPairs && token < m;
    float s0 = 0.0f, s1 = 0.0f;
    if (mine)
        for (uint32_t w = 0; w < C::kWarps; ++w) {
            s0 += smem.warp_sums[w][token][row];
            s1 += smem.warp_sums[w][token][row + 1];
        }
    if constexpr (C::kSplit > 1) {
        cluster_wait();   // every peer has started
        if (mine && rank != 0) {
            const uint32_t addr = map_shared_rank(smem_addr(&smem.inbox[rank][token][row]), 0);
            st_cluster_f32(addr, s0);
            st_cluster_f32(addr + 4, s1);
        }
        cluster_sync();
        if (rank != 0) return;
        if (mine)
            for (uint32_t r = 1; r < C::kSplit; ++r) {
                s0 += smem.inbox[r][token][row];
                s1 += smem.inbox[r][token][row + 1];
            }
    }
    if (mine && row0 + row < C::kN)
        *reinterpret_cast<uint32_t*>(d + static_cast<uint64_t>(token) * d_ld + row0 + row) = pack_bf16x2(s0, s1);
}

}  // namespace cg8

// The small-M kernel: D = A·Bᵀ for decode-sized M (up to 32 rows of A), where the GEMM is a read of B's weights
// and the WGMMA kernel's fixed costs (barriers, tensor maps, a producer's issue pace) outweigh its work.
//
// Swapped operands: B's rows are the MMA's 16-row side and A's rows (tokens) its 8-wide side, so no MMA row is
// wasted on missing tokens. Every warp loads its fragments straight from global memory into registers (each
// lane 16-byte pieces of the rows it owns), converts e4m3 to f16 with integer operations (ptx/mma_sync.cuh) and
// runs mma.sync. A lane's k-slots are a fixed permutation of the k-block's 128 bytes, the same for A and B, so
// the dot products are unchanged.
//
// Work: a CTA owns kRows rows of B (one 128-row scale block holds them) and 1/kSplit of the k-blocks; its warps
// take those k-blocks in turn, each promoting its partial sums into FP32 accumulators with both scales after
// every k-block. The warps' sums are added in warp order through shared memory, then the kSplit CTAs of a
// cluster add theirs in rank order in rank 0 (distributed shared memory): the result does not depend on timing.
#pragma once
#include "ptx/cluster.cuh"
#include "ptx/memory.cuh"
#include "ptx/mma_sync.cuh"
#include "ptx/pdl.cuh"
#include "ptx/stmatrix.cuh"

namespace cg8 {

template <uint32_t kN_, uint32_t kK_, uint32_t kTokenTiles_, uint32_t kRowTiles_, uint32_t kWarps_, uint32_t kSplit_,
          uint32_t kDepth_>
struct SmallMConfig {
    static constexpr uint32_t kN = kN_, kK = kK_;
    static constexpr uint32_t kTokenTiles = kTokenTiles_;   // 8 tokens each: M <= 8 * kTokenTiles
    static constexpr uint32_t kRowTiles = kRowTiles_;       // 16 rows of B each
    static constexpr uint32_t kWarps = kWarps_;
    static constexpr uint32_t kSplit = kSplit_;             // CTAs of a cluster dividing the k-blocks
    static constexpr uint32_t kDepth = kDepth_;             // k-blocks a warp has in flight (registers)
    static constexpr uint32_t kTokens = 8 * kTokenTiles, kRows = 16 * kRowTiles, kThreads = 32 * kWarps;
    static constexpr uint32_t kKBlocks = (kK + 127) / 128;
    static_assert(128 % kRows == 0, "a CTA's rows lie in one scale block of B");
    static_assert(kN % 8 == 0 && kK % 16 == 0, "N is a multiple of 8, K of 16 (the API checks)");
    static_assert(kSplit >= 1 && kSplit <= 8 && kSplit <= kKBlocks, "every CTA of a cluster has k-blocks");
};

// One k-block's operands in a lane's registers: rows g and g + 8 of each 16-row tile of B, row g of each 8-token
// tile of A (g = lane / 4), 32 bytes of each: bytes [16t, 16t + 16) and [64 + 16t, 80 + 16t) (t = lane % 4); and
// the scales of the k-block, loaded with them so that no multiply waits for a load of its own.
template <class C>
struct Operands {
    uint4 b[C::kRowTiles][2][2];   // [row tile][row g, g + 8][first, second 16 bytes]
    uint4 a[C::kTokenTiles][2];
    float sa[C::kTokenTiles][2];   // A's scales of tokens 2t and 2t + 1 of each token tile (0 past M)
    float sb;                      // B's scale of the CTA's rows
};

__device__ __forceinline__ uint32_t word(const uint4 (&v)[2], uint32_t j) {
    const uint4& q = v[j / 4];
    return (j & 3) == 0 ? q.x : (j & 3) == 1 ? q.y : (j & 3) == 2 ? q.z : q.w;
}

template <class C>
__device__ __forceinline__ void load_operands(Operands<C>& op, const uint8_t* __restrict__ a, const uint8_t* __restrict__ b,
                                              const float* __restrict__ sa, const float* __restrict__ sb_row,
                                              uint32_t m, uint32_t a_ld, uint32_t b_ld, uint32_t sa_ld, uint32_t row0,
                                              uint32_t kb) {
    const uint32_t lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    op.sb = __ldg(sb_row + kb);
#pragma unroll
    for (uint32_t i = 0; i < C::kTokenTiles; ++i)
#pragma unroll
        for (uint32_t u = 0; u < 2; ++u) {
            const uint32_t token = 8 * i + 2 * t + u;
            op.sa[i][u] = token < m ? __ldg(sa + kb * sa_ld + token) : 0.0f;
        }
#pragma unroll
    for (uint32_t c = 0; c < 2; ++c) {
        const uint32_t col = kb * 128 + 64 * c + 16 * t;
        const bool in_k = col < C::kK;
#pragma unroll
        for (uint32_t r = 0; r < C::kRowTiles; ++r)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const uint32_t row = row0 + 16 * r + 8 * h + g;
                op.b[r][h][c] = (in_k && row < C::kN)
                                    ? ld_global_stream_v4(b + static_cast<uint64_t>(row) * b_ld + col)
                                    : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (uint32_t i = 0; i < C::kTokenTiles; ++i) {
            const uint32_t token = 8 * i + g;
            op.a[i][c] = (in_k && token < m)
                             ? __ldg(reinterpret_cast<const uint4*>(a + static_cast<uint64_t>(token) * a_ld + col))
                             : make_uint4(0, 0, 0, 0);
        }
    }
}

// One k-block: per tile pair, 8 MMAs into fresh sums, then sums * (A's scale * B's scale * 2^16) into acc
// (2^16 undoes the two 2^-8 of the conversion, exactly). acc[r][i][0..3]: rows g, g, g + 8, g + 8 of row tile
// r; tokens 2t, 2t + 1, 2t, 2t + 1 of token tile i (mma.sync's accumulator layout).
template <class C>
__device__ __forceinline__ void multiply(const Operands<C>& op, float (&acc)[C::kRowTiles][C::kTokenTiles][4]) {
    uint32_t x[C::kTokenTiles][8][2];
    float scale[C::kTokenTiles][2];
    const float sb = op.sb * 65536.0f;
#pragma unroll
    for (uint32_t i = 0; i < C::kTokenTiles; ++i) {
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) e4m3x4_to_f16x2_scaled(word(op.a[i], j), x[i][j][0], x[i][j][1]);
#pragma unroll
        for (uint32_t u = 0; u < 2; ++u) scale[i][u] = op.sa[i][u] * sb;
    }
#pragma unroll
    for (uint32_t r = 0; r < C::kRowTiles; ++r) {
        uint32_t w[8][4];
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) {
            e4m3x4_to_f16x2_scaled(word(op.b[r][0], j), w[j][0], w[j][2]);
            e4m3x4_to_f16x2_scaled(word(op.b[r][1], j), w[j][1], w[j][3]);
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
};

template <class C>
__device__ __forceinline__ void small_m_gemm(const uint8_t* __restrict__ a, const float* __restrict__ sa,
                                             const uint8_t* __restrict__ b, const float* __restrict__ sb,
                                             uint16_t* __restrict__ d, uint32_t m, uint32_t a_ld, uint32_t b_ld,
                                             uint32_t sa_ld, uint32_t d_ld) {
    __shared__ SmallMSmem<C> smem;
    if constexpr (C::kSplit > 1) cluster_arrive_relaxed();   // "started": peers may write our inbox after this
    launch_dependents();      // programmatic dependent launch (runtime.set_pdl); no-ops without it
    grid_dependency_wait();   // nothing read before the previous grid's results are visible
    const uint32_t rank = blockIdx.x % C::kSplit, row0 = blockIdx.x / C::kSplit * C::kRows;
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const uint32_t kb_begin = rank * C::kKBlocks / C::kSplit, kb_end = (rank + 1) * C::kKBlocks / C::kSplit;
    const float* sb_row = sb + row0 / 128 * C::kKBlocks;

    // A warp's k-blocks: kb_begin + warp, then every kWarps-th; kDepth of them in flight, each buffer refilled
    // with the k-block kDepth turns later as soon as it has been multiplied (DRAM latency x bandwidth needs
    // tens of KB in flight per SM: NOTES.md v30).
    float acc[C::kRowTiles][C::kTokenTiles][4] = {};
    Operands<C> buf[C::kDepth];
#pragma unroll
    for (uint32_t d = 0; d < C::kDepth; ++d) {
        const uint32_t kb = kb_begin + warp + d * C::kWarps;
        if (kb < kb_end) load_operands<C>(buf[d], a, b, sa, sb_row, m, a_ld, b_ld, sa_ld, row0, kb);
    }
    for (uint32_t kb0 = kb_begin + warp; kb0 < kb_end; kb0 += C::kDepth * C::kWarps) {
#pragma unroll
        for (uint32_t d = 0; d < C::kDepth; ++d) {
            const uint32_t kb = kb0 + d * C::kWarps;
            if (kb < kb_end) {
                multiply<C>(buf[d], acc);
                const uint32_t kb_next = kb + C::kDepth * C::kWarps;
                if (kb_next < kb_end) load_operands<C>(buf[d], a, b, sa, sb_row, m, a_ld, b_ld, sa_ld, row0, kb_next);
            }
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

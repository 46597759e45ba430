// The persistent, warp-specialized FP8 GEMM with fine-grained scaling for Hopper (sm_90a):
//
//   D[m, n]  = sum_kb  sa[m, kb] * sb[n / 128, kb] * sum_{k in kb} A[m, k] * B[n, k]     (bf16 or e4m3 out)
//   D[m, n] += sum_kb  sa[m, kb] * sb[n, kb]       * sum_{k in kb} A[m, k] * B[n, k]     (the weight gradient)
//
// One CTA per SM walks its tiles (scheduler.cuh). Warpgroups 0 .. kNumMathWG-1 do the math (math.cuh),
// the last one loads (producer.cuh); they meet in the stage ring (ring.cuh). This file sets up shared
// memory and barriers and sends each warpgroup to its role. docs/architecture.md has the whole picture.
#pragma once
#include "math.cuh"
#include "producer.cuh"
#include "../ptx/pdl.cuh"

namespace cg8 {

template <class Cfg>
__device__ __forceinline__ void fp8_gemm(const CUtensorMap& tmap_a, const CUtensorMap& tmap_b,
                                         const CUtensorMap& tmap_sa, const CUtensorMap& tmap_d, const float* __restrict__ sb,
                                         const int32_t* __restrict__ layout, unsigned short* __restrict__ d,
                                         uint32_t ldd, uint32_t m, float* __restrict__ d_scale, uint32_t ld_scale,
                                         const CUtensorMap& tmap_sb, uint32_t k, const CUtensorMap& tmap_a_tail,
                                         const CUtensorMap& tmap_sa_tail) {
    using Tiles = TilePolicy<Cfg>;
    extern __shared__ __align__(1024) uint8_t smem[];
    const SharedMemory<Cfg> sm(smem);

    CG8_MARK(kTraceStart);
    if (threadIdx.x == 0 && (smem_addr(smem) & 1023u) != 0) __trap();  // 128B swizzle needs 1024-byte alignment
    launch_dependents();  // with PDL the next kernel's CTAs may set up while this grid finishes

    const uint32_t wg = threadIdx.x / 128;
    const uint32_t tid = threadIdx.x % 128;
    const uint32_t warp = tid / 32, lane = tid % 32;

    if (threadIdx.x == Cfg::kMathThreads) {
        tma_prefetch_map(&tmap_a);
        tma_prefetch_map(&tmap_b);
        tma_prefetch_map(&tmap_sa);
        tma_prefetch_map(&tmap_d);
        if constexpr (Cfg::kRowScalesB) tma_prefetch_map(&tmap_sb);
        if constexpr (Tiles::kTailMaps) {
            if (Tiles::has_tail(m)) {
                tma_prefetch_map(&tmap_a_tail);
                tma_prefetch_map(&tmap_sa_tail);
            }
        }
        init_stage_barriers<Cfg>(sm.full, sm.empty);
        Tiles::init_barriers(sm.ring_barriers);
        if constexpr (Cfg::kExchangeCtas > 1) {
            mbar_init(sm.split_ready, Cfg::kExchangeCtas - 1);  // every peer's arrival
            mbar_init(sm.split_received, 1);              // this CTA's expect_tx, then the peers' bytes
            if constexpr (Cfg::kOutFp8) mbar_init(sm.split_amax, 1);  // likewise, for the row amax
        }
        if constexpr (Cfg::kScalesByWarp) {
            mbar_init(sm.sb_full, 32);  // every lane of the staging warp
            mbar_init(sm.sb_empty, Cfg::kMathThreads);  // every math thread, past the tile's main loop
        }
        if constexpr (Cfg::kLoadD) {
            mbar_init(sm.d_full, 1);                    // the producer's expect_tx, then the TMA bytes
            mbar_init(sm.d_written, Cfg::kMathThreads);  // every math thread, its sums added
            mbar_init(sm.d_empty, 1);                   // the store warp, once the store has read the tile
        }
        fence_barrier_init();
        fence_proxy_async_smem();
    }
    // Nothing above reads global memory that an earlier kernel may write (with PDL it may still run).
    grid_dependency_wait();
    Tiles::load_layout(layout, sm.words, m, k);
    // With multicast, or a split tile's exchange, the peer CTAs arrive on our barriers (and write into our
    // shared memory): they must see them initialized first. (The relaxed cluster barrier orders no
    // memory: __syncthreads publishes the layout words.)
    if constexpr (Cfg::kMulticast > 1) {
        cluster_sync();
    } else {
        __syncthreads();
        if constexpr (Cfg::kExchangeCtas > 1) cluster_sync_relaxed();
    }
    Tiles::finish_layout(sm.words, k);
    const uint32_t cta_rank = Cfg::kClusterDims > 1 ? cluster_ctarank() : 0;
    CG8_MARK(kTraceSetUp);

    // Math threads: their first accumulator row in a tile (the producer warpgroup: kBlockM).
    const uint32_t thread_row = wg < Cfg::kNumMathWG ? Cfg::slab(wg, 0) * 64 + warp * 16 + lane / 4 : Cfg::kBlockM;
    // The tile walk and the stage-ring position; each thread's role walks them (the producer and the math
    // warpgroups walk the same sequence). Lent by reference, as locals here they compile to the same code as
    // the single-function kernel before v16 did (NOTES.md v16).
    Tiles tiles(m, layout, sm.words, sm.ring_barriers, thread_row, k);
    RingPosition<Cfg> ring;
    if (wg == Cfg::kNumMathWG) {
        setmaxnreg_dec<40>();
        Producer<Cfg>{tmap_a, tmap_b, tmap_sa, tmap_sb, tmap_a_tail, tmap_sa_tail, tmap_d, sb, sm, tiles, ring, cta_rank}
            .run(tid, warp, lane);
    } else {
        setmaxnreg_inc<Cfg::kNumMathWG == 1 ? 240 : 232>();
        MathWarpgroups<Cfg>{tmap_d, sb, d, ldd, d_scale, ld_scale, sm, tiles, ring, wg, tid, warp, lane}.run();
    }
    CG8_MARK(kTraceEnd);
    // Neither CTA of a multicast pair may exit while the other can still arrive on its barriers.
    if constexpr (Cfg::kMulticast > 1) cluster_sync();
}

}  // namespace cg8

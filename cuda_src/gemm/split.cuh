// A split tile's two halves meet (masked layout, kTailSplit). The two CTAs of a cluster each computed
// half of the tile's k-blocks over the whole tile; CTA rank r stores column half r. Each pushes its
// partial sums of the other half into the peer's output tile in shared memory (st.async, counted on the
// peer's `received` barrier) once the peer said `ready`, then adds the peer's sums of its own half,
// which arrive the same way. The additions happen in a fixed order: results are bitwise repeatable.
#pragma once
#include "config.cuh"
#include "smem.cuh"
#include "../ptx/cluster.cuh"
#include "../ptx/mbarrier.cuh"
#include "../ptx/tma.cuh"

namespace cg8 {

template <class Cfg>
struct SplitExchange {
    static constexpr uint32_t kHalfGroups = Cfg::kBlockN / 16;  // 8-column fragments per column half
    static constexpr uint32_t kHalfVecs = Cfg::kSlabsPerWG * kHalfGroups;

    // Before the tile's B scales are staged: the peer will push into this CTA's output tile, so the
    // previous tile's TMA store must be done reading it (the staging barrier orders the other readers).
    __device__ __forceinline__ static void before_staging(bool store_thread) {
        if (store_thread) bulk_wait_group_read0();
    }

    // After the staging barrier: the bytes to expect, then tell the peer it may send.
    __device__ __forceinline__ static void signal_ready(uint64_t* ready, uint64_t* received, uint32_t cta_rank) {
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(received, SmemLayout<Cfg>::kTileD);  // the half fills the output tile
            mbar_arrive_cluster(ready, cta_rank ^ 1);
        }
    }

    // Slot j of a thread holds its j-th fragment of the half (slab j / kHalfGroups, 8-column group
    // j % kHalfGroups of the half), consecutive threads 16 bytes apart. The half is a compile-time index:
    // the sums must stay in registers. `loop`: the MainLoop holding the sums and the shared addresses.
    template <bool kSecondHalf, class Loop>
    __device__ __forceinline__ static void exchange(Loop& loop, uint64_t* ready, uint64_t* received, uint32_t cta_rank) {
        constexpr uint32_t kMine = kSecondHalf ? 1 : 0;
        auto slot = [&](uint32_t j) { return (j * Cfg::kMathThreads + threadIdx.x) * 16; };
        mbar_wait(loop.shared(ready), 0);
        const uint32_t peer_tile = map_shared_rank(loop.smem_d_addr, cta_rank ^ 1);
        const uint32_t peer_received = map_shared_rank(loop.shared(received), cta_rank ^ 1);
#pragma unroll
        for (uint32_t j = 0; j < kHalfVecs; ++j) {
            const float* f = &loop.sum[j / kHalfGroups][((1 - kMine) * kHalfGroups + j % kHalfGroups) * 4];
            st_async_v4(peer_tile + slot(j), f[0], f[1], f[2], f[3], peer_received);
        }
        mbar_wait(loop.shared(received), 0);
#pragma unroll
        for (uint32_t j = 0; j < kHalfVecs; ++j) {
            float* f = &loop.sum[j / kHalfGroups][(kMine * kHalfGroups + j % kHalfGroups) * 4];
            float p0, p1, p2, p3;
            ld_shared_v4(loop.smem_d_addr + slot(j), p0, p1, p2, p3);
            f[0] += p0, f[1] += p1, f[2] += p2, f[3] += p3;
        }
    }
};

}  // namespace cg8

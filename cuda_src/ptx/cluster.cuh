// Thread-block clusters: rank, cluster-wide barriers and distributed shared memory.
#pragma once
#include "types.cuh"

namespace cg8 {

__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// All threads of every CTA in the cluster; orders shared-memory work (barrier init) cluster-wide.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// As cluster_sync, but the arrival orders nothing (no GPU-wide memory barrier): enough to publish barrier
// initialization, which fence_barrier_init orders on its own.
__device__ __forceinline__ void cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}

// The two halves of cluster_sync_relaxed, for a kernel that has work to do between them: every thread arrives,
// then every thread waits (a thread that arrives must wait before it arrives again or exits).
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// The address of shared-memory location `addr` (this CTA's) in CTA `cta` of this cluster.
__device__ __forceinline__ uint32_t map_shared_rank(uint32_t addr, uint32_t cta) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(cta));
    return r;
}

// 16 bytes from registers into CTA-of-the-cluster shared memory (`addr` and `bar` from
// map_shared_rank); the store counts its bytes on that CTA's barrier `bar` (complete_tx), whose
// waiters then see the data. Fire and forget: no fence, no round trip.
__device__ __forceinline__ void st_async_v4(uint32_t addr, float a, float b, float c, float d, uint32_t bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
                 ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d), "r"(bar)
                 : "memory");
}

// One float, likewise.
__device__ __forceinline__ void st_async_f32(uint32_t addr, float a, uint32_t bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
                 ::"r"(addr), "f"(a), "r"(bar)
                 : "memory");
}

// One float into CTA-of-the-cluster shared memory (`addr` from map_shared_rank); a later cluster_sync orders it
// before the owner's reads.
__device__ __forceinline__ void st_cluster_f32(uint32_t addr, float v) {
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

}  // namespace cg8

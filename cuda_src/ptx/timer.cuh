// Clocks: the GPU-wide nanosecond timer and this SM's cycle counter (for the timeline tracer).
#pragma once
#include "types.cuh"

namespace cg8 {

__device__ __forceinline__ uint64_t globaltimer_ns() {
    uint64_t ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}

__device__ __forceinline__ uint64_t sm_clock() {
    uint64_t clk;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(clk));
    return clk;
}

}  // namespace cg8

// Programmatic dependent launch (PDL). A kernel launched with the programmatic-stream-serialization
// attribute may start while the previous kernel on its stream is still running; both instructions are
// no-ops in a kernel launched without it.
#pragma once
#include "types.cuh"

namespace cg8 {

// Wait until the grids this one depends on have completed and their memory is visible. Everything
// before it must not read what they write.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Let the next grid on the stream launch now: its CTAs start as SMs free up and run their own set-up,
// then wait in grid_dependency_wait for this grid to complete.
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" :::); }

}  // namespace cg8

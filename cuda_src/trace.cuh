// Timeline tracing, compiled in only when CG8_TRACE is defined (scripts/trace_timeline.py does; the
// library never does). Three recorders per CTA, math thread 0, the producer thread and (two math
// warpgroups) the second warpgroup's first thread, each append
// events {tag, info, %globaltimer ns, clock64} to cg8_trace[role][cta]. %globaltimer lines up CTAs on
// different SMs; clock64 (this SM's cycles) over it gives the SM clock.
#pragma once

namespace cg8 {

constexpr uint32_t kTraceCtas = 264;
constexpr uint32_t kTraceSlots = 512;

enum : uint32_t {
    kTraceStart = 1,      // kernel entry
    kTraceSetUp = 2,      // barriers initialized, (masked) tile totals known
    kTraceTile = 10,      // math: a tile begins (info: its m/n block, split half)
    kTraceMainDone = 11,  // math: its last k-block promoted
    kTraceStaged = 15,    // math: past the barrier after a pass's B scales were staged
    kTraceLoop = 14,      // math: its k-block loop begins (next tile's loads issued, contiguous)
    kTraceExchanged = 12, // math: a split tile's partial sums exchanged
    kTraceStored = 13,    // math: the tile's store issued
    kTraceLoads = 20,     // producer: a tile's first load about to be issued
    kTraceLoadsDone = 21, // producer: its last load issued
    kTraceEnd = 30,       // the recorder leaves the kernel
};

}  // namespace cg8

extern "C" {
__device__ unsigned long long cg8_trace[3][cg8::kTraceCtas][cg8::kTraceSlots][4];
}

namespace cg8 {

struct Tracer {
    uint32_t n = 0;
    __device__ __forceinline__ void mark(uint32_t tag, uint32_t info = 0) {
        const uint32_t role = threadIdx.x == 0 ? 0u : threadIdx.x == kMathThreads ? 1u : 2u;
        if ((threadIdx.x != 0 && threadIdx.x != kMathThreads && !(kNumMathWG > 1 && threadIdx.x == 128)) ||
            blockIdx.x >= kTraceCtas || n >= kTraceSlots)
            return;
        uint64_t ns, clk;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(clk));
        unsigned long long* e = cg8_trace[role][blockIdx.x][n++];
        e[0] = tag, e[1] = info, e[2] = ns, e[3] = clk;
    }
};

}  // namespace cg8

// Timeline tracing, compiled in only when CG8_TRACE is defined (the trace tool in benchmarks/ does; the
// library never does). Three recorders per CTA: math thread 0, the producer thread and (two math
// warpgroups) the second warpgroup's first thread, each append events {tag, info, %globaltimer ns,
// clock64} to cg8_trace[role][cta]. %globaltimer lines up CTAs on different SMs; clock64 (this SM's
// cycles) over it gives the SM clock.
#pragma once
#include "config.cuh"

namespace cg8 {

enum : uint32_t {
    kTraceStart = 1,      // kernel entry
    kTraceSetUp = 2,      // barriers initialized, (masked) tile totals known
    kTraceTile = 10,      // math: a tile begins (info: its m/n block, split share in bits 28-31)
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

#ifdef CG8_TRACE
#include "../ptx/timer.cuh"

namespace cg8 {
constexpr uint32_t kTraceCtas = 264;
constexpr uint32_t kTraceSlots = 512;
}  // namespace cg8

extern "C" {
__device__ unsigned long long cg8_trace[3][cg8::kTraceCtas][cg8::kTraceSlots][4];
__device__ unsigned int cg8_trace_count[3][cg8::kTraceCtas];  // events so far; kTraceStart resets it
}

namespace cg8 {

template <class Cfg>
__device__ __forceinline__ void trace_mark(uint32_t tag, uint32_t info = 0) {
    const uint32_t role = threadIdx.x == 0 ? 0u : threadIdx.x == Cfg::kMathThreads ? 1u : 2u;
    if ((threadIdx.x != 0 && threadIdx.x != Cfg::kMathThreads && !(Cfg::kNumMathWG > 1 && threadIdx.x == 128)) ||
        blockIdx.x >= kTraceCtas)
        return;
    unsigned int& n = cg8_trace_count[role][blockIdx.x];
    if (tag == kTraceStart) n = 0;
    if (n >= kTraceSlots) return;
    const uint64_t ns = globaltimer_ns(), clk = sm_clock();
    unsigned long long* e = cg8_trace[role][blockIdx.x][n++];
    e[0] = tag, e[1] = info, e[2] = ns, e[3] = clk;
}

}  // namespace cg8

// Used inside code templated on `Cfg`.
#define CG8_MARK(...) ::cg8::trace_mark<Cfg>(__VA_ARGS__)
#else
#define CG8_MARK(...) ((void)0)
#endif

// Per-k-block events (CG8_TRACE_KBLOCKS as well: the trace tool's --kblocks). trace_mark's event count is a
// global read-modify-write, a round trip to L2 per event: in a k-block loop it slowed the producer to one
// k-block per ~0.25 us. These go to a slot of their own per k-block (the last tile's, where a CTA has several),
// a store the thread does not wait for, of this SM's clock64 (cheaper than %globaltimer, and the producer
// and the math threads share the SM): cg8_trace_kb[role][cta][kb][event]. The tool converts the cycles
// with the CTA's kTraceStart event (its ns and clock64) and the SM clock the regular events give.
#if defined(CG8_TRACE) && defined(CG8_TRACE_KBLOCKS)
namespace cg8 {
constexpr uint32_t kTraceKBlocks = 256;
enum : uint32_t { kTraceKbIssued = 0, kTraceKbWait = 0, kTraceKbReady = 1 };  // producer: 0; math: 0, 1
}  // namespace cg8
extern "C" __device__ unsigned long long cg8_trace_kb[3][cg8::kTraceCtas][cg8::kTraceKBlocks][2];
namespace cg8 {
template <class Cfg>
__device__ __forceinline__ void trace_mark_kb(uint32_t event, uint32_t kb) {
    const uint32_t role = threadIdx.x == 0 ? 0u : threadIdx.x == Cfg::kMathThreads ? 1u : 2u;
    if ((threadIdx.x != 0 && threadIdx.x != Cfg::kMathThreads && !(Cfg::kNumMathWG > 1 && threadIdx.x == 128)) ||
        blockIdx.x >= kTraceCtas)
        return;
    cg8_trace_kb[role][blockIdx.x][kb % kTraceKBlocks][event] = sm_clock();
}
}  // namespace cg8
#define CG8_MARK_KB(...) ::cg8::trace_mark_kb<Cfg>(__VA_ARGS__)
#else
#define CG8_MARK_KB(...) ((void)0)
#endif

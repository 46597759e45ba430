"""Does L2-side placement pay on this GPU, without a custom allocator? (issue 18's question about DeeperGEMM)

    python -m benchmarks.l2_side_probe [--mib 512] [--reps 20] [--out FILE.json]

Hopper's L2 has two halves, and every 4 KiB chunk of memory is served by one of them; an SM reading a chunk of the
far half crosses between them. DeeperGEMM places B's tiles with a custom allocator so that each SM streams chunks
of its own half. Here, on an ordinary CuPy allocation:
1. **Chunks.** After a flush, one thread on SM 0 times, in every 4 KiB chunk, a chain of 4 dependent first reads
   (from DRAM), then a chain of 16 dependent L2 hits (clock64). If the halves differ for SM 0, the chains split in
   two groups; the clearer split classes the chunks: class 0 (SM 0's near half, the faster group) and class 1.
2. **SMs.** One thread on each SM times the same chains over 64 chunks of each class: an SM nearer class 1 reads
   it faster.
3. **Streaming.** One 1024-thread CTA per SM streams an equal share of chunks (16-byte loads, 8 a thread in flight), in four assignments: chunks of its own half only ("near"), of the other half only ("far"),
   by address without regard to halves ("mixed": what a GEMM does today), and near for half the SMs, far for the
   rest. Timed by the protocol (flush, CUDA events, median), interleaved; from DRAM (shares past the L2) and from
   L2 (a warm set that fits).
The ratio far ÷ near bounds what side-aware placement could buy a bandwidth-bound decode GEMM; mixed ÷ near is
what it would buy over today's placement."""
from __future__ import annotations

import argparse
import statistics

SOURCE = r"""
__device__ __forceinline__ unsigned smid() { unsigned r; asm volatile("mov.u32 %0, %%smid;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned long long clk() {
    unsigned long long t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory"); return t; }
__device__ __forceinline__ unsigned long long ld_cg(const unsigned long long* p) {
    unsigned long long v; asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }

// One thread on SM `target` (the first block there to claim it): for each listed chunk, 16 of its lines are loaded
// (into L2), then read again as a chain of 16 dependent loads (each address takes the previous value, which is 1,
// minus 1), timed. A chain, because a clock read may be scheduled ahead of the use of one load's value, never
// ahead of the loads a later address depends on.
extern "C" __global__ void chunk_latency(const unsigned long long* base, const unsigned* order, int n, unsigned target,
                                         unsigned* cycles, unsigned* dram_cycles, int* claimed,
                                         unsigned long long* sink) {
    if (threadIdx.x != 0 || smid() != target || atomicCAS(claimed, 0, 1) != 0) return;
    unsigned long long dep = 0;
    for (int i = 0; i < n; ++i) {
        const unsigned long long* p = base + (size_t)order[i] * 512;
        unsigned long long off = dep & 0x100000000ull;                       // 0, but the compiler cannot tell
        const unsigned long long t0 = clk();
#pragma unroll
        for (int j = 0; j < 4; ++j) off = ld_cg(p + 16 + 128 * j + off) - 1;   // 4 lines not yet read: DRAM
        const unsigned long long t1 = clk();
        unsigned long long warm = 0;
#pragma unroll
        for (int j = 0; j < 16; ++j) warm += ld_cg(p + 32 * j);            // 16 lines, 256 bytes apart
        off += warm - 16;
        const unsigned long long t2 = clk();
#pragma unroll
        for (int j = 0; j < 16; ++j) off = ld_cg(p + 32 * j + off) - 1;
        const unsigned long long t3 = clk();
        dram_cycles[i] = (unsigned)(t1 - t0);
        cycles[i] = (unsigned)(t3 - t2);
        dep += off;
    }
    sink[target] = dep;
}

// One CTA per SM (the shared memory keeps a second one off): each streams `per_sm` chunks of list `cls` (0: the
// SM's near half, 1: its far half, 2: by address, 3: near on even SMs and far on odd ones).
extern "C" __global__ void stream_chunks(const uint4* base, const unsigned* near_far, const unsigned* by_address,
                                         const unsigned char* sm_side, unsigned num_sms, int per_sm, int mode,
                                         unsigned long long* sink) {
    extern __shared__ unsigned char keep_one_cta_per_sm[];
    const unsigned s = smid();
    const unsigned* list;
    if (mode == 2) {
        list = by_address + (size_t)s * per_sm;
    } else {
        const unsigned side = sm_side[s];
        const unsigned cls = mode == 0 ? side : mode == 1 ? 1 - side : ((s & 1) ? 1 - side : side);
        list = near_far + ((size_t)cls * num_sms + s) * per_sm;
    }
    unsigned acc = 0;
    for (int i = 0; i < per_sm; i += 32) {   // 1024 threads: 4 chunks of 256 16-byte pieces a load, 8 loads in flight
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = base[(size_t)list[i + 4 * u + threadIdx.x / 256] * 256 + threadIdx.x % 256];
#pragma unroll
        for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9E3779B9u) sink[blockIdx.x] = acc;
    if (threadIdx.x == 0) keep_one_cta_per_sm[0] = 0;
}
"""

SMEM = 120 * 1024


def two_groups(values) -> tuple[float, float]:
    """Two-means in one dimension: the threshold between the two groups of latencies and their separation (the
    distance between the group medians over the spread within groups: near 0 or below means one group)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    t = float(np.median(v))
    for _ in range(50):
        lo, hi = v[v <= t], v[v > t]
        if not len(lo) or not len(hi):
            return t, 0.0
        t = float((lo.mean() + hi.mean()) / 2)
    lo, hi = v[v <= t], v[v > t]
    spread = float(np.percentile(lo, 75) - np.percentile(lo, 25) + np.percentile(hi, 75) - np.percentile(hi, 25)) or 1.0
    return t, float((np.median(hi) - np.median(lo)) / spread)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="the buffer (chunks to classify and stream)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cupy as cp
    import numpy as np

    from .protocol import CleanFlushDevice, CudaDevice
    from .tune import gpu_props, provenance, write

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    lat, stream_k = mod.get_function("chunk_latency"), mod.get_function("stream_chunks")
    stream_k.max_dynamic_shared_size_bytes = SMEM
    clean = CleanFlushDevice(cp.cuda.Stream(non_blocking=True))
    chunks = args.mib << 8
    buf = cp.ones(chunks * 512, dtype=cp.uint64)
    sink = cp.zeros(4096, dtype=cp.uint64)

    def latencies(order, target: int) -> tuple[list[int], list[int]]:
        """Cycles of a chain of 16 L2 hits and of a chain of 4 first reads (DRAM after a flush) in each chunk of
        `order`, from SM `target`."""
        n = len(order)
        cycles, dram, claimed = cp.zeros(n, cp.uint32), cp.zeros(n, cp.uint32), cp.zeros(1, cp.int32)
        lat((4 * sms,), (32,), (buf, cp.asarray(order, dtype=cp.uint32), cp.int32(n), cp.uint32(target), cycles, dram,
                                claimed, sink))
        cp.cuda.Device().synchronize()
        return cycles.get().tolist(), dram.get().tolist()

    # 1. chunks, from SM 0, in a shuffled order (so DRAM pages and prefetch do not follow the address)
    order = np.random.default_rng(7).permutation(chunks).tolist()
    clean.flush()
    clean.sync()
    chain, dram_chain = latencies(order, 0)
    hit_split, dram_split = two_groups(chain), two_groups(dram_chain)
    print(f"SM 0, two-means: L2-hit chains split at {hit_split[0] / 16:.0f} cycles a load (separation "
          f"{hit_split[1]:.2f}); DRAM chains at {dram_split[0] / 4:.0f} (separation {dram_split[1]:.2f})")
    by_dram = dram_split[1] > hit_split[1]   # classify by the clearer of the two
    values, (threshold, separation) = (dram_chain, dram_split) if by_dram else (chain, hit_split)
    cls = [0] * chunks
    for c, t in zip(order, values):
        cls[c] = int(t > threshold)
    counts = [cls.count(0), cls.count(1)]
    by_cls = {k: [c for c in range(chunks) if cls[c] == k] for k in (0, 1)}
    hit = {k: statistics.median([t for c, t in zip(order, chain) if cls[c] == k]) / 16 for k in (0, 1)}
    dram = {k: statistics.median([t for c, t in zip(order, dram_chain) if cls[c] == k]) / 4 for k in (0, 1)}
    print(f"chunks: {chunks} of 4 KiB, classed by {'DRAM' if by_dram else 'L2-hit'} latency from SM 0: class 0 "
          f"{counts[0]} (L2 hit {hit[0]:.0f}, DRAM {dram[0]:.0f} cycles a load), class 1 {counts[1]} ({hit[1]:.0f}, "
          f"{dram[1]:.0f})", flush=True)

    # 2. each SM's side: the same chains over 64 chunks of each class, after a flush
    sample = by_cls[0][:64] + by_cls[1][:64]
    sides, sm_rows = [], []
    for s in range(sms):
        clean.flush()
        clean.sync()
        hits, drams = latencies(sample, s)
        use = drams if by_dram else hits
        h0, h1 = statistics.median(use[:64]), statistics.median(use[64:])
        sides.append(int(h1 < h0))
        sm_rows.append({"sm": s, "class0_cycles": h0, "class1_cycles": h1})
    print(f"SMs nearer class 0: {sides.count(0)}, nearer class 1: {sides.count(1)}", flush=True)

    # 3. streaming: equal shares, four assignments
    results = {}
    for where, per_sm in (("DRAM", min(len(by_cls[0]), len(by_cls[1])) // sms // 32 * 32), ("L2", 64)):
        near_far = cp.asarray([by_cls[k][s * per_sm + i] for k in (0, 1) for s in range(sms) for i in range(per_sm)],
                              dtype=cp.uint32)
        addr = cp.arange(sms * per_sm, dtype=cp.uint32)
        side_arr = cp.asarray(sides, dtype=cp.uint8)
        dev = clean if where == "DRAM" else CudaDevice(clean.stream)

        def run(mode):
            with clean.stream:
                stream_k((sms,), (1024,), (buf, near_far, addr, side_arr, cp.uint32(sms), cp.int32(per_sm),
                                           cp.int32(mode), sink), shared_mem=SMEM)

        modes = {"near": 0, "far": 1, "mixed": 2, "half near": 3}
        times = {m: [] for m in modes}
        for _ in range(args.reps + 2):
            for name, mode in modes.items():
                start, end = dev.event(), dev.event()
                if where == "DRAM":
                    dev.flush()
                else:
                    run(mode)   # warm: the share is in L2
                dev.record(start)
                run(mode)
                dev.record(end)
                dev.sync()
                times[name].append(dev.elapsed_s(start, end))
        nbytes = sms * per_sm * 4096
        med = {m: statistics.median(t[2:]) for m, t in times.items()}
        results[where] = {"bytes": nbytes, "per_sm_chunks": per_sm, "median_s": med}
        print(f"streaming from {where} ({nbytes / 2**20:.0f} MiB, {per_sm} chunks an SM): " + ", ".join(
            f"{m} {t * 1e6:.1f} us ({nbytes / t / 1e12:.2f} TB/s)" for m, t in med.items())
            + f"; far/near {med['far'] / med['near']:.3f}, mixed/near {med['mixed'] / med['near']:.3f}", flush=True)
    if args.out:
        write(args.out, {"gpu": gpu_props(), **provenance(), "chunks": chunks, "classed_by": "dram" if by_dram else "l2_hit",
                         "threshold_chain_cycles": threshold, "separation": separation, "class_counts": counts,
                         "class_hit_cycles": hit, "class_dram_cycles": dram,
                         "sm_sides": sides, "sms": sm_rows, "streaming": results,
                         "chunk_class_first_4096": cls[:4096]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a launch in clusters costs by itself: an empty kernel (one CTA an SM, 256 threads) launched in clusters of
1, 2, 3, 4 and 8 CTAs, as many CTAs as those clusters keep resident, each call event-timed after an L2 flush as the
benchmarks time GEMMs:

    python -m benchmarks.cluster_launch_probe [--reps 200]

`sync 1` adds two cluster barriers (entry and exit, as split tiles meet). Prints the median and 10th percentile µs.
Answers whether split-K picks pay for their clusters at launch (NOTES.md v45)."""
from __future__ import annotations

import argparse
import statistics

SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256, 1) __cluster_dims__(CLUSTER, 1, 1) empty(int* out, int sync) {
    extern __shared__ int s[];
    if (sync) asm volatile("barrier.cluster.arrive.aligned; barrier.cluster.wait.aligned;" ::: "memory");
    if (threadIdx.x == 0) { s[0] = blockIdx.x; out[blockIdx.x] = s[0]; }
    if (sync) asm volatile("barrier.cluster.arrive.aligned; barrier.cluster.wait.aligned;" ::: "memory");
}
"""
GRIDS = {1: 128, 2: 128, 3: 117, 4: 120, 8: 120}  # within heuristics.CLUSTER_CAPACITY_132
SMEM_BYTES = 150 * 1024  # one CTA an SM


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args(argv)

    import cupy

    flush = cupy.empty(256 << 20, dtype=cupy.uint8)
    out = cupy.zeros(1024, dtype=cupy.int32)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for cluster, grid in GRIDS.items():
        module = cupy.RawModule(code=SOURCE.replace("CLUSTER", str(cluster)),
                                options=("--gpu-architecture=sm_90a", "-std=c++17"))
        kernel = module.get_function("empty")
        kernel.max_dynamic_shared_size_bytes = SMEM_BYTES
        for sync in (0, 1):
            times = []
            for rep in range(args.reps + 30):
                flush.fill(rep & 255)
                start.record()
                kernel((grid,), (256,), (out, cupy.int32(sync)), shared_mem=SMEM_BYTES)
                end.record()
                end.synchronize()
                if rep >= 30:  # warm-up
                    times.append(cupy.cuda.get_elapsed_time(start, end) * 1000)
            times.sort()
            print(f"cluster {cluster} grid {grid} sync {sync}: median {statistics.median(times):.2f} us, "
                  f"10th percentile {times[len(times) // 10]:.2f} us", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How fast can the SMs stream a row-major weight matrix when each step reads R rows x W bytes? (issue 18)

    python -m benchmarks.stream_shape_probe [--k 16384] [--rows 32,112] [--gemm MxNxK] [--reps 20] [--out FILE.json]

A decode GEMM reads B [N, K] once; the WGMMA kernel's CTA reads BLOCK_N rows x 128 bytes (one k-block) per stage,
so consecutive pieces of a row are fetched a stage apart, each from a different DRAM page than its neighbours in
the request. Here one 1024-thread CTA per SM streams its R rows of a [132 R, K] byte matrix in steps of W bytes
of every row (16-byte loads, 8 a thread in flight, so ~128 KB an SM), for W from 128 to 1024 and R from 32 to 112,
and a plain contiguous run of the same bytes; timed by the protocol (1 GiB flush, CUDA events, median),
interleaved. If W = 128 streams slower than wider steps, the k-block's width in the loads, not the bytes in
flight, is what keeps decode GEMMs below the copy's rate. --gemm times cugemm8.matmul on that shape in the same
rounds, for a decode GEMM beside a plain stream of about its weight bytes (--rows 7168/132 ~ 54 for N = 7168)."""
from __future__ import annotations

import argparse
import statistics

SOURCE = r"""
// One CTA per SM (shared memory keeps a second one off). CTA b streams rows [b R, b R + R) of the [gridDim.x R, K]
// matrix: piece p (16 bytes) of the CTA is step p / (R W/16), row (p / (W/16)) % R, column step * W + 16 (p % (W/16)).
// contiguous != 0: the CTA's R K bytes as one run instead.
extern "C" __global__ void stream_rows(const uint4* b, unsigned k, unsigned rows, unsigned w, int contiguous,
                                       unsigned* sink) {
    extern __shared__ unsigned char keep_one_cta_per_sm[];
    const unsigned per_row = w / 16, per_step = rows * per_row, pieces = rows * (k / 16);
    const size_t row0 = (size_t)blockIdx.x * rows;
    unsigned acc = 0;
    for (unsigned p0 = threadIdx.x; p0 < pieces; p0 += 8 * 1024) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const unsigned p = p0 + 1024 * u;
            size_t at;
            if (contiguous) {
                at = row0 * (k / 16) + p;
            } else {
                const unsigned step = p / per_step, r = (p / per_row) % rows;
                at = (row0 + r) * (k / 16) + step * per_row + p % per_row;
            }
            v[u] = p < pieces ? b[at] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9E3779B9u) sink[blockIdx.x] = acc;
    if (threadIdx.x == 0) keep_one_cta_per_sm[0] = 0;
}
"""

SMEM = 120 * 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=16384, help="bytes a row (K of an FP8 B)")
    ap.add_argument("--rows", default="32,112", help="R values, comma-separated")
    ap.add_argument("--gemm", default=None, help="MxNxK: also time cugemm8.matmul on this shape")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cupy as cp

    from .protocol import CudaDevice
    from .tune import gpu_props, provenance, write

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    kern = cp.RawModule(code=SOURCE).get_function("stream_rows")
    kern.max_dynamic_shared_size_bytes = SMEM
    dev = CudaDevice(cp.cuda.Stream(non_blocking=True))
    sink = cp.zeros(sms, dtype=cp.uint32)
    rows_list = [int(r) for r in args.rows.split(",")]
    variants = {}
    for rows in rows_list:
        for w in (128, 256, 512, 1024):
            if args.k % w == 0:   # steps tile the row
                variants[f"R{rows} W{w}"] = (rows, w, 0)
        variants[f"R{rows} contiguous"] = (rows, 128, 1)
    bufs = {rows: cp.ones(sms * rows * args.k // 16 * 4, dtype=cp.uint32) for rows in rows_list}
    calls = {name: (lambda v=v: run(*v)) for name, v in variants.items()}
    gemm_bytes = None
    if args.gemm:
        import cugemm8

        from .shapes import gemm_bytes as count_bytes
        from .tune import dense_inputs

        m, n, k = map(int, args.gemm.split("x"))
        with dev.stream:
            a, sa, b, sb = dense_inputs(m, n, k)
            out = cp.empty((m, n), dtype=cugemm8.api.BF16)
        gemm_bytes = count_bytes(m, n, k)
        calls[f"matmul {args.gemm}"] = lambda: cugemm8.matmul(a, sa, b, sb, out=out, stream=dev.stream)

    def run(rows, w, contiguous):
        with dev.stream:
            kern((sms,), (1024,), (bufs[rows], cp.uint32(args.k), cp.uint32(rows), cp.uint32(w), cp.int32(contiguous),
                                   sink), shared_mem=SMEM)

    times = {name: [] for name in calls}
    for rep in range(args.reps + 2):
        for name, call in calls.items():
            start, end = dev.event(), dev.event()
            dev.flush()
            dev.record(start)
            call()
            dev.record(end)
            dev.sync()
            if rep >= 2:
                times[name].append(dev.elapsed_s(start, end))
    rows_out = {}
    for name, (rows, w, contiguous) in variants.items():
        nbytes = sms * rows * args.k
        med = statistics.median(times[name])
        rows_out[name] = {"rows": rows, "w": w, "contiguous": bool(contiguous), "bytes": nbytes, "median_s": med}
        print(f"K={args.k} {name:16s} {nbytes / 2**20:6.1f} MiB {med * 1e6:7.1f} us {nbytes / med / 1e12:.2f} TB/s",
              flush=True)
    if args.gemm:
        med = statistics.median(times[f"matmul {args.gemm}"])
        rows_out[f"matmul {args.gemm}"] = {"bytes": gemm_bytes, "median_s": med}
        print(f"matmul {args.gemm}: {gemm_bytes / 2**20:6.1f} MiB {med * 1e6:7.1f} us {gemm_bytes / med / 1e12:.2f} TB/s",
              flush=True)
    if args.out:
        write(args.out, {"gpu": gpu_props(), **provenance(), "k": args.k, "sms": sms, "reps": args.reps,
                         "variants": rows_out})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Programmatic dependent launch (cugemm8.set_pdl) on a chain of dependent decode GEMMs:

    python -m benchmarks.pdl [--calls 200] [--rounds 7] [--out FILE]

A decode step's GEMMs run back to back on one stream, each after the one before. The chain alternates
two shapes, 64x2112x7168 and 64x7168x2112, and each GEMM's scales are rewritten by a tiny kernel in
between in the `dependent` variant (so each GEMM reads what the kernel before it wrote). Timed with
CUDA events over the whole chain (no L2 flush inside it: this is the steady state of a decode step),
PDL off and on alternating per round; the median per GEMM. Not a test: the GPU tier checks PDL's
ordering (tests/gpu/test_dense.py::test_pdl_orders_dependent_kernels).
"""
from __future__ import annotations

import argparse
import json
import statistics


def chain(calls: int, dependent: bool):
    import cupy

    import cugemm8

    from .tune import dense_inputs

    rng = cupy.random.default_rng(0)
    shapes = ((64, 2112, 7168), (64, 7168, 2112))
    ops = [(*dense_inputs(m, n, k, rng), cupy.empty((m, n), dtype=cugemm8.api.BF16)) for m, n, k in shapes]
    touch = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x", "cugemm8_touch_scales")

    def run():
        for i in range(calls):
            a, sa, b, sb, out = ops[i % 2]
            if dependent:
                touch(sa, sa)   # rewrites the scales the GEMM reads next
            cugemm8.matmul(a, sa, b, sb, out=out)
    return run


def time_chain(run, calls: int) -> float:
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    run()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) * 1e3 / calls   # µs per GEMM


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cugemm8

    from .tune import gpu_props, provenance, write

    results = {}
    for dependent in (False, True):
        run = chain(args.calls, dependent)
        samples = {"off": [], "on": []}
        for mode in ("off", "on"):   # warm-up: compile, load, first launches
            cugemm8.set_pdl(mode == "on")
            time_chain(run, args.calls)
        for _ in range(args.rounds):
            for mode in ("off", "on"):
                cugemm8.set_pdl(mode == "on")
                samples[mode].append(time_chain(run, args.calls))
        cugemm8.set_pdl(False)
        name = "gemm+touch" if dependent else "gemm"
        med = {mode: statistics.median(v) for mode, v in samples.items()}
        results[name] = {"us_per_gemm": med, "samples": samples, "on_over_off": med["on"] / med["off"]}
        print(f"{name:11s} PDL off {med['off']:7.2f} us/GEMM   on {med['on']:7.2f} us/GEMM   "
              f"on/off {med['on'] / med['off']:.3f}", flush=True)
    write(args.out, {"gpu": gpu_props(), "info": {**provenance(), "calls": args.calls, "rounds": args.rounds,
                                                  "shapes": ["64x2112x7168", "64x7168x2112"]}, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

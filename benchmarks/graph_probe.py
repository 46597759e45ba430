"""CUDA-graph replay of the decode table's graph shape (20 calls of 64x2112x7168, out= preallocated, one L2
flush before each replay) for several explicit tile x split configurations, interleaved:

    python -m benchmarks.graph_probe [--reps 30] [--out FILE]

Inside a graph the weights stay in L2 from the second call on, so the best configuration there can differ
from the flushed sweep's. Prints the median µs per call of each configuration."""
from __future__ import annotations

import argparse
import statistics

GRAPH_SHAPE, GRAPH_CALLS = (64, 2112, 7168), 20
TILES = ((64, 96, 4), (64, 48, 2), (64, 64, 2), (64, 32, 2), (64, 128, 4), (64, 64, 4), (64, 192, 8))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm, heuristics

    from .protocol import CudaDevice, Timer
    from .tune import dense_inputs, gpu_props, provenance, write

    m, n, k = GRAPH_SHAPE
    a, sa, b, sb = dense_inputs(m, n, k)
    out = cupy.empty((m, n), dtype=cugemm8.api.BF16)
    ref = cugemm8.matmul(a, sa, b, sb).astype(cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    graphs, picked = {}, heuristics.choose("normal", m, n, k, 1, cugemm8.get_num_sms()).config
    for bm, bn, split in TILES:
        cfg = heuristics.make_config("normal", n, k, 1, bm, bn, split_k=split, stream_b=True)
        run = fp8_gemm.bind(cfg, a, sa, b, sb, out)
        run(stream_ptr=stream.ptr)
        stream.synchronize()
        assert bool(cupy.allclose(out.astype(cupy.float32), ref, rtol=2e-2, atol=2e-2)), cfg
        stream.begin_capture()
        for _ in range(GRAPH_CALLS):
            run(stream_ptr=stream.ptr)
        graphs[f"{bm}x{bn}s{split}" + ("*" if cfg == picked else "")] = stream.end_capture()
    fns = {name: (lambda g=g: g.launch(stream)) for name, g in graphs.items()}
    timer = Timer(CudaDevice(stream))
    res = {name: statistics.median(v) / GRAPH_CALLS * 1e6 for name, v in timer.interleaved(fns, args.reps).items()}
    for name, us in res.items():
        print(f"{name:12s} {us:6.2f} us per call")
    write(args.out, {"gpu": gpu_props(), "info": {**provenance(), "reps": args.reps}, "shape": GRAPH_SHAPE,
                     "calls_per_graph": GRAPH_CALLS, "us_per_call": res, "picked": "the name marked *"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

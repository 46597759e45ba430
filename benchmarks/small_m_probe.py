"""The small-M kernel's configurations against the WGMMA kernel's pick on decode shapes, timed interleaved:

    python -m benchmarks.small_m_probe [--shapes 1x256x7168,...] [--json FILE]

For each shape: the WGMMA kernel's pick (cugemm8.heuristics.choose with the small-M kernel off), then every
small-M configuration that fits (token tiles for M; 1 or 2 row tiles; 4 or 8 warps; K split over 1 to 8 CTAs),
each checked against the pick's result (calc_diff) and against itself (a second call, bitwise). Prints the median
µs, the time ÷ the pick's and the fraction of the memory floor (shapes.roofline_fraction, its constants measured
first in the same run)."""
from __future__ import annotations

import argparse
import re
import statistics
import types

from .protocol import CudaDevice, Timer
from .shapes import gemm_bytes, roofline_fraction
from .tune import dense_inputs, gpu_props, provenance, write

DEFAULT_SHAPES = ("1x256x7168,1x1024x7168,1x2112x7168,1x4096x7168,1x7168x2048,1x24576x1536,1x32768x512,"
                  "1x7168x16384,8x2112x7168,16x512x7168,16x4096x7168,32x2112x7168,32x7168x2048,32x256x4096")


def candidates(m: int, n: int, k: int):
    from cugemm8 import heuristics_small_m as hs

    return hs.configs_for(m, n, k)


def main(argv=None) -> int:
    import cupy as cp

    import cugemm8
    from cugemm8 import heuristics_small_m as hs
    from cugemm8 import small_m

    from .decode import calibrate

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK, comma-separated")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--json", default=None)
    p.add_argument("--only", default=None, help="a regular expression: only the configurations whose names match")
    args = p.parse_args(argv)
    stream = cp.cuda.Stream(non_blocking=False)
    timer = Timer(CudaDevice(stream))
    env = types.SimpleNamespace(cp=cp, timer=timer, stream=stream, free=cp.get_default_memory_pool().free_all_blocks)
    floor = calibrate(env, args.reps)
    bw, t0 = floor["copy_bytes_per_s"], floor["empty_kernel_s"]
    print(f"floor: copy {bw / 1e12:.3f} TB/s, empty kernel {t0 * 1e6:.2f} us", flush=True)
    rows = []
    for text in args.shapes.split(","):
        m, n, k = map(int, text.split("x"))
        with stream:
            a, sa, b, sb = dense_inputs(m, n, k)
            base_out = cp.empty((m, n), dtype=cugemm8.api.BF16)
            def wgmma():
                with hs.disabled():
                    cugemm8.matmul(a, sa, b, sb, out=base_out, stream=stream)

            fns = {"wgmma": wgmma}
            wgmma()
            ref = base_out.astype(cp.float32)
            pick = hs.choose_small_m(m, n, k, cugemm8.get_num_sms())
            checks = {}
            for cfg in candidates(m, n, k):
                name = (f"T{cfg.token_tiles}R{cfg.row_tiles}W{cfg.warps}S{cfg.split}D{cfg.depth}"
                        + (f"C{cfg.chunk}" if hasattr(cfg, "chunk") else ""))
                if args.only and not re.search(args.only, name):
                    continue
                name += "*" if cfg == pick else ""
                out = cp.empty((m, n), dtype=cugemm8.api.BF16)
                run = small_m.bind(cfg, a, sa, b, sb, out)
                run(stream_ptr=stream.ptr)
                first = out.copy()
                run(stream_ptr=stream.ptr)
                y = out.astype(cp.float32)
                diff = float(1 - 2 * (y * ref).sum() / ((y * y + ref * ref).sum()))
                checks[name] = {"diff": diff, "repeatable": bool((first.view(cp.uint16) == out.view(cp.uint16)).all()),
                                "config": vars(cfg)}
                fns[name] = (lambda r=run: r(stream_ptr=stream.ptr))
        times = timer.interleaved(fns, args.reps)
        med = {name: statistics.median(s) for name, s in times.items()}
        nbytes = gemm_bytes(m, n, k)
        print(f"{text}: wgmma {med['wgmma'] * 1e6:.2f} us (roofline {roofline_fraction(nbytes, med['wgmma'], bw, t0):.2f})")
        for name in sorted(checks, key=lambda x: med[x]):
            c = checks[name]
            print(f"  {name:14s} {med[name] * 1e6:7.2f} us {med[name] / med['wgmma']:.3f}x "
                  f"roofline {roofline_fraction(nbytes, med[name], bw, t0):.2f} diff {c['diff']:.1e}"
                  f"{'' if c['repeatable'] else ' NOT REPEATABLE'}", flush=True)
        rows.append({"shape": [m, n, k], "median_s": med, "checks": checks, "bytes": nbytes})
        del a, sa, b, sb, base_out, ref
        env.free()
    write(args.json, {"gpu": gpu_props(), **provenance(), "floor": {"copy_bytes_per_s": bw, "empty_kernel_s": t0},
                      "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Chosen tiles against others on a few dense shapes, timed interleaved with bf16's pick:

    python -m benchmarks.tile_probe [--out-dtype float8_e4m3] [--shapes 4096x2112x7168,...] [--tiles 256x128,128x128]

For each shape: bf16's pick, then each tile (unsplit, the heuristic's stages and grid for it) with the output
type asked for, the pick marked. Prints the median µs and the time ÷ bf16's pick's; no checks of the results
(the GPU tier covers every configuration). A question the heuristic's rules do not measure: NOTES.md v24."""
from __future__ import annotations

import argparse
import statistics

from .protocol import Timer
from .tune import dense_inputs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dtype", default="float8_e4m3", choices=("bfloat16", "float8_e4m3"))
    p.add_argument("--shapes", default="4096x2112x7168,4096x32768x512,4096x7168x2048", help="MxNxK, comma-separated")
    p.add_argument("--tiles", default="256x128,128x128", help="BLOCK_MxBLOCK_N, comma-separated")
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args(argv)

    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm, heuristics

    fp8 = args.out_dtype != "bfloat16"
    timer = Timer(settle_s=0.5, warmup=3)
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a, sa, b, sb = dense_inputs(m, n, k)
        bf16 = heuristics.choose("normal", m, n, k, 1, 132)
        fns = {f"bf16 pick {bf16.config.block_m}x{bf16.config.block_n}": fp8_gemm.bind(
            bf16.config, a, sa, b, sb, cupy.empty((m, n), dtype=cugemm8.api.BF16), grid=bf16.grid)}
        pick = heuristics.choose("normal", m, n, k, 1, 132, args.out_dtype)
        for tile in args.tiles.split(","):
            bm, bn = (int(v) for v in tile.split("x"))
            cfg = heuristics.make_config("normal", n, k, 1, bm, bn, out_format=args.out_dtype)
            grid = heuristics.grid_for(cfg, -(-m // bm) * -(-n // bn), 132)
            if fp8:
                out = cupy.empty((m, n), dtype=cupy.uint8)
                run = fp8_gemm.bind(cfg, a, sa, b, sb, out, out_scale=cugemm8.empty_scale((m, -(-n // 128))), grid=grid)
            else:
                run = fp8_gemm.bind(cfg, a, sa, b, sb, cupy.empty((m, n), dtype=cugemm8.api.BF16), grid=grid)
            fns[f"{args.out_dtype} {bm}x{bn} s{cfg.stages} grid {grid}" + (" (pick)" if cfg == pick.config else "")] = run
        for run in fns.values():
            run()
        times = timer.interleaved(fns, args.reps, rotate=True)
        base = statistics.median(next(iter(times.values())))
        for name, samples in times.items():
            med = statistics.median(samples)
            print(f"{shape} {name:36s} {med * 1e6:8.1f} us  {med / base:.3f}x bf16's pick", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

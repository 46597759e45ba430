"""e4m3 scale groups meeting in a workspace (cuda_src/gemm/group_workspace.cuh) against bf16's pick and 128-wide
e4m3 tiles, with parts of the meeting taken out (those variants' results are wrong; timing only):

    python -m benchmarks.group_probe [--shapes 128x2112x7168,...] [--tiles 128x32k2w,128x128k4,...]

For each shape: bf16's pick, e4m3's pick, each named tile with e4m3 output (tile_probe's names; a trailing "w":
workspace groups), and each workspace tile again built with CG8_PROBE_WS_NO_READ (no part stored or read: the
count, the quantizing and the stores left) and with CG8_PROBE_WS_NO_QUANTIZE (parts stored and read, nothing
quantized or stored). All timed interleaved, each against bf16's pick (NOTES.md v33)."""
from __future__ import annotations

import argparse
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from .ablation_probe import _build, _set
from .protocol import Timer
from .tile_probe import report, tile_config
from .tune import dense_inputs

PROBES = {"no-read": ("CG8_PROBE_WS_NO_READ",), "no-quantize": ("CG8_PROBE_WS_NO_QUANTIZE",)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="128x2112x7168,128x4096x7168,64x4096x7168,64x512x4096")
    p.add_argument("--tiles", default="", help="tile_probe's names, comma-separated (default: none beyond the picks)")
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args(argv)

    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm, heuristics

    fmt = "float8_e4m3"
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    plan = {}
    for m, n, k in shapes:
        bf16, e4m3 = heuristics.choose("normal", m, n, k, 1, 132), heuristics.choose("normal", m, n, k, 1, 132, fmt)
        named = [tile_config(t, n, k, fmt) for t in args.tiles.split(",") if t]
        plan[m, n, k] = (bf16, [e4m3.config] + [c for c in named if c != e4m3.config])
    jobs = {(bf16.config, ()) for bf16, _ in plan.values()}
    for _, cfgs in plan.values():
        for cfg in cfgs:
            jobs |= {(cfg, ())} | ({(cfg, d) for d in PROBES.values()} if cfg.workspace_group > 1 else set())
    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_build, sorted(jobs, key=str)))

    timer = Timer(settle_s=0.5, warmup=3)
    for (m, n, k), (bf16, cfgs) in plan.items():
        a, sa, b, sb = dense_inputs(m, n, k)
        bc = bf16.config
        _set(())
        fns = {f"bf16 pick {bc.block_m}x{bc.block_n} split {bc.split_k}": fp8_gemm.bind(
            bc, a, sa, b, sb, cupy.empty((m, n), dtype=cugemm8.api.BF16), grid=bf16.grid)}
        for i, cfg in enumerate(cfgs):
            grid = bf16.grid if cfg.workspace_group > 1 else heuristics.grid_for(
                cfg, -(-m // cfg.block_m) * -(-n // cfg.block_n), 132)
            name = (f"e4m3 {cfg.block_m}x{cfg.block_n} split {cfg.split_k}"
                    + (f" ws{cfg.workspace_group}" if cfg.workspace_group > 1 else "") + (" (pick)" if i == 0 else ""))
            for variant, defines in [("", ())] + (list(PROBES.items()) if cfg.workspace_group > 1 else []):
                _set(defines)
                out, scale = cupy.empty((m, n), dtype=cupy.uint8), cugemm8.empty_scale((m, -(-n // 128)))
                fns[name + (f" {variant}" if variant else "")] = fp8_gemm.bind(cfg, a, sa, b, sb, out,
                                                                               out_scale=scale, grid=grid)
        _set(())
        for run in fns.values():
            run()
        times = timer.interleaved(fns, args.reps, rotate=True)
        first = next(iter(times))
        report(f"{m}x{n}x{k}", times, 2 * m * n * k, lambda name: first, "bf16's pick")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

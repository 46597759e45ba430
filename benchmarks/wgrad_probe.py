"""The weight gradient's main loop built several ways, timed interleaved on the same operands:

    python -m benchmarks.wgrad_probe [--shapes 7168x2112x4096,...] [--tiles 128x160,128x128s5]
                                     [--variants base,turns-done,...] [--check]

Variants (probe-only macros the CUDA sources test; the library never defines them):
- `base`;
- `turns-issue` (CG8_PROBE_TURNS_ISSUE): the two math warpgroups take turns issuing their MMAs;
- `turns-done` (CG8_PROBE_TURNS_DONE): one issues its MMAs once the other's are done, so that each promotion
  runs under the other warpgroup's MMAs;
- `two-acc` (CG8_PROBE_WGRAD_TWO_ACC): two accumulators a warpgroup, k-block kb + 1's MMAs issued before kb is
  promoted (registers allowing: the CPU check of local memory says where);
- `no-promote` (CG8_PROBE_NO_PROMOTE): promotion keeps one product (wrong results; an upper bound on what
  hiding the promotion can buy).
Tiles are BLOCK_MxBLOCK_N[sSTAGES] (heuristics_wgrad.make_config). With --check each variant's out is compared
bitwise with `base`'s (no-promote excepted). NOTES.md v32."""
from __future__ import annotations

import argparse
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor

from .ablation_probe import _set
from .protocol import Timer
from .tile_probe import report

VARIANTS = {"base": (), "turns-issue": ("CG8_PROBE_TURNS_ISSUE",), "turns-done": ("CG8_PROBE_TURNS_DONE",),
            "no-promote": ("CG8_PROBE_NO_PROMOTE",), "two-acc": ("CG8_PROBE_WGRAD_TWO_ACC",)}
TILE = re.compile(r"(\d+)x(\d+)(?:s(\d+))?")


def tile_config(tile: str, n: int):
    from cugemm8 import heuristics_wgrad

    match = TILE.fullmatch(tile)
    if match is None:
        raise SystemExit(f"tile {tile!r}: expected BMxBN[sSTAGES], e.g. 128x160 or 128x128s5")
    return heuristics_wgrad.make_config("normal", n, 1, int(match[1]), int(match[2]), int(match[3] or 0))


def _build(job) -> int:
    cfg, defines = job
    from . import library

    _set(defines)
    return len(library.current().build(cfg))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="7168x2112x4096,2048x7168x4096,512x32768x4096", help="MxNxK, comma-separated")
    p.add_argument("--tiles", default="128x160,128x128", help="BLOCK_MxBLOCK_N[sSTAGES], comma-separated")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--check", action="store_true", help="compare each variant's result with base's, bitwise")
    args = p.parse_args(argv)
    tiles, variants = args.tiles.split(","), args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; expected some of {', '.join(VARIANTS)}")

    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm

    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    configs = {(n, tile): tile_config(tile, n) for _, n, _ in shapes for tile in tiles}
    jobs = list(dict.fromkeys((cfg, VARIANTS[v]) for cfg in configs.values() for v in variants))
    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_build, jobs))

    timer = Timer(settle_s=0.5, warmup=3)
    rng = cupy.random.default_rng(0)
    for m, n, k in shapes:
        a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cupy.float32))
        b, sb = cugemm8.per_token_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32))
        sa, sb = cugemm8.get_col_major_tma_aligned_tensor(sa), cugemm8.get_col_major_tma_aligned_tensor(sb)
        fns, outs = {}, {}
        for tile in tiles:
            cfg = configs[n, tile]
            for v in variants:
                _set(VARIANTS[v])
                name = f"{cfg.block_m}x{cfg.block_n} s{cfg.stages} {v}"
                outs[name] = cupy.zeros((m, n), cupy.float32)
                fns[name] = fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, outs[name])
        _set(())
        for run in fns.values():
            run()
        if args.check:
            cupy.cuda.Device().synchronize()
            for name, out in outs.items():
                base = outs[name.rsplit(" ", 1)[0] + " base"]
                if not name.endswith(("base", "no-promote")):
                    same = bool(cupy.array_equal(out.view(cupy.uint32), base.view(cupy.uint32)))
                    print(f"{m}x{n}x{k} {name}: {'bitwise equal to base' if same else 'DIFFERS from base'}")
        times = timer.interleaved(fns, args.reps, rotate=True)
        report(f"{m}x{n}x{k}", times, 2 * m * n * k, lambda name: name.rsplit(" ", 1)[0] + " base", "base")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

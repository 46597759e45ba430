"""Chosen tiles against others on a few dense shapes, timed interleaved with bf16's pick:

    python -m benchmarks.tile_probe [--out-dtype float8_e4m3] [--shapes 4096x2112x7168,...] [--tiles 256x128,128x128s4]

For each shape: bf16's pick, then each tile (unsplit, the heuristic's stages and grid for it, or the stages a
trailing `sN` names, at most those that fit; `pick` is the heuristic's configuration for the output type; `rN` sets
the rasterization band to N n-blocks) with the output type asked for, the pick marked. Every kernel is
compiled first, in parallel (benchmarks.tune.compile_all). Prints the median µs and the time ÷ bf16's pick's; no checks of the results
(the GPU tier covers every configuration). Questions the heuristic's rules do not measure: NOTES.md v24, v28."""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics

from .env import bf16_to_f32, poison_bf16
from .protocol import Timer
from .tune import compile_all, dense_inputs, provenance_line


TILE = re.compile(r"(\d+)x(\d+)(h)?(?:s(\d+))?(?:k(\d))?(?:r(\d+))?(c2)?(n)?")
PICK = re.compile(r"pick(?:r(\d+))?")


def tile_config(tile: str, n: int, k: int, out_dtype: str, m: int | None = None):
    """The configuration `tile` names ("BMxBN", "BMxBNsS" with S stages; "128x256h": column halves; "kS": K split over a cluster of S CTAs, B
    loaded evict-first, as decode picks are, unless a trailing "n" keeps B's default L2 policy; "rN": bands of N
    n-blocks; a trailing "c2": CTA pairs sharing A by multicast; "pick[rN]": the heuristic's at M) for the normal
    layout at N, K."""
    from cugemm8 import heuristics

    if (match := PICK.fullmatch(tile)) is not None:
        if m is None:
            raise SystemExit(f"tile {tile!r}: the pick needs M, and this probe gives none")
        return with_band(heuristics.choose("normal", m, n, k, 1, 132, out_dtype).config, match[1])
    match = TILE.fullmatch(tile)
    if match is None:
        raise SystemExit(f"tile {tile!r}: expected BMxBN[h][sSTAGES][kSPLIT][rRASTER][c2][n] or pick[rRASTER], e.g. "
                         "256x128, 128x256h, 128x128s4c2, 128x128k2, 64x128k2n or pickr16")
    bm, bn, halves, stages, split, raster, pairs, plain_b = (int(match[1]), int(match[2]), match[3], match[4],
                                                             match[5], match[6], match[7], match[8])
    fp8 = out_dtype != "bfloat16"
    if fp8 and (not heuristics.fp8_out_ok(bn) or (split and bn != 128)):  # config.cuh's e4m3 rule, before the JIT
        raise SystemExit(f"{tile}: e4m3 output needs a tile a multiple of 128 wide (128 when split), got {bm}x{bn}")
    if split and (pairs or not heuristics.can_split_k(bn, k, int(split), out_fp8=fp8)):
        raise SystemExit(f"{tile}: {bm}x{bn} cannot split K={k} {split} ways" + (" with pairs" if pairs else ""))
    cfg = heuristics.make_config("normal", n, k, 1, bm, bn, cluster=2 if pairs else 1, out_format=out_dtype,
                                 col_halves=2 if halves else None,
                                 **({"split_k": int(split), "stream_b": not plain_b} if split else {}))
    return with_band(with_stages(cfg, int(stages or 0), tile, k), raster)


def with_stages(cfg, stages: int, tile: str, k: int):
    """`cfg` with `stages` stages (0: as built), refused beyond those that fit (the probes' `sN`)."""
    if not stages:
        return cfg
    if not 1 <= stages <= cfg.stages:
        raise SystemExit(f"{tile}: {cfg.block_m}x{cfg.block_n} holds 1 to {cfg.stages} stages at K={k}")
    return dataclasses.replace(cfg, stages=stages)


def with_band(cfg, band):
    """`cfg` walking its tiles in bands of `band` n-blocks (the probes' `rN`; None or 0: as built)."""
    return dataclasses.replace(cfg, raster_group=int(band)) if band else cfg


def report(shape: str, times: dict, flops: int, base_of, unit: str) -> None:
    """One line per timed callable: median µs, TFLOPS, and its time over base_of(name)'s median (`unit` names it)."""
    medians = {name: statistics.median(samples) for name, samples in times.items()}
    width = max(map(len, medians))
    for name, med in medians.items():
        print(f"{shape} {name:{width}s} {med * 1e6:8.1f} us {flops / med / 1e12:7.0f} TFLOPS  "
              f"{med / medians[base_of(name)]:.3f}x {unit}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dtype", default="float8_e4m3", choices=("bfloat16", "float8_e4m3"))
    p.add_argument("--shapes", default="4096x2112x7168,4096x32768x512,4096x7168x2048", help="MxNxK, comma-separated")
    p.add_argument("--tiles", default="256x128,128x128", help="BLOCK_MxBLOCK_N[sSTAGES], comma-separated")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--check", action="store_true",
                   help="bf16 only: also compare each tile's output with bf16's pick's (bitwise; else the largest difference)")
    args = p.parse_args(argv)

    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm, heuristics

    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    tiles = args.tiles.split(",")
    configs = {(m, n, k, tile): tile_config(tile, n, k, args.out_dtype, m) for m, n, k in shapes for tile in tiles}
    picks = {(m, n, k): heuristics.choose("normal", m, n, k, 1, 132) for m, n, k in shapes}
    errors = compile_all([*configs.values(), *(plan.config for plan in picks.values())], os.cpu_count() or 1)
    if errors:
        raise SystemExit(f"compile errors: {errors}")

    fp8 = args.out_dtype != "bfloat16"
    print(provenance_line(), flush=True)
    timer = Timer(settle_s=0.5, warmup=3)
    for m, n, k in shapes:
        a, sa, b, sb = dense_inputs(m, n, k)
        bf16 = picks[m, n, k]
        outs = {}
        pick_out = outs.setdefault("pick", cupy.empty((m, n), dtype=cugemm8.api.BF16))
        fns = {f"bf16 pick {bf16.config.block_m}x{bf16.config.block_n} s{bf16.config.stages}": fp8_gemm.bind(
            bf16.config, a, sa, b, sb, pick_out, grid=bf16.grid)}
        pick = heuristics.choose("normal", m, n, k, 1, 132, args.out_dtype)
        for tile in tiles:
            cfg = configs[m, n, k, tile]
            grid = heuristics.grid_for(cfg, -(-m // cfg.block_m) * -(-n // cfg.block_n), 132)
            if fp8:
                out = cupy.empty((m, n), dtype=cupy.uint8)
                run = fp8_gemm.bind(cfg, a, sa, b, sb, out, out_scale=cugemm8.empty_scale((m, -(-n // 128))), grid=grid)
            else:
                out = outs.setdefault(tile, cupy.empty((m, n), dtype=cugemm8.api.BF16))
                poison_bf16(cupy, out)
                run = fp8_gemm.bind(cfg, a, sa, b, sb, out, grid=grid)
            pairs = " pairs" if cfg.cluster > 1 else ""
            split = f" split {cfg.split_k}" if cfg.split_k > 1 else ""
            policy = " B evict-first" if cfg.stream_b else ""
            raster = f" r{cfg.raster_group}" if cfg.raster_group != heuristics.RASTER_GROUP else ""
            name = f"{args.out_dtype} {cfg.block_m}x{cfg.block_n} s{cfg.stages}{split}{raster}{pairs}{policy} grid {grid}"
            fns[name + (" (pick)" if cfg == pick.config else "")] = run
        for run in fns.values():
            run()
        if args.check and not fp8:
            ref = outs["pick"].view(cupy.uint16)
            for tile in tiles:
                same = bool((outs[tile].view(cupy.uint16) == ref).all())
                diff = float(cupy.nanmax(cupy.abs(bf16_to_f32(cupy, outs[tile]) - bf16_to_f32(cupy, outs["pick"]))))
                print(f"{m}x{n}x{k} {tile}: bitwise equal to the pick: {same}; largest difference {diff:.3g}", flush=True)
        times = timer.interleaved(fns, args.reps, rotate=True)
        first = next(iter(times))
        report(f"{m}x{n}x{k}", times, 2 * m * n * k, lambda name: first, "bf16's pick")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Sweep kernel configurations on the GPU for given shapes and compare with the heuristic's pick.

    python scripts/tune.py [--shapes dense|small|large] [--reps 10] [--out FILE]

Not a test and not the benchmark: a tool for setting the heuristic from measurements. Each
configuration is timed with the benchmark's protocol (L2 flushed before each call, CUDA events,
median)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import cupy  # noqa: E402

import cugemm8  # noqa: E402
from cugemm8 import heuristics, kernels, runtime  # noqa: E402
from cugemm8.heuristics import KernelConfig  # noqa: E402
from tune_grouped import Timer  # noqa: E402  (scripts/: the sweeps' shared timing protocol)

DENSE = [(m, n, k) for m in (64, 128, 4096)
         for n, k in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]


RASTERS = (heuristics.RASTER_GROUP,)


def candidates(m: int, n: int, k: int) -> list[KernelConfig]:
    if len(RASTERS) > 1:  # raster sweep: only the heuristic's tile, every band width and cluster
        base = heuristics.choose("normal", m, n, k, 1, 132).config
        return [dataclasses.replace(base, raster_group=r, cluster=c) for r in RASTERS for c in (1, 2)
                if c == 1 or base.num_n_blocks % 2 == 0]
    out = []
    for bm in (64, 128, 256):
        if bm > 64 and m <= 64:
            continue
        for bn in heuristics.block_n_candidates(bm):
            if bn % 16 and bn not in (24, 40, 56, 72, 88, 104, 120):
                continue
            if heuristics.make_config("normal", n, k, 1, bm, bn).stages < 2:
                continue
            for cluster in (1, 2):
                if cluster == 2 and (m < 512 or -(-n // bn) % 2):
                    continue
                out.append(heuristics.make_config("normal", n, k, 1, bm, bn, cluster=cluster))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="dense", choices=("dense", "small", "large"))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--raster", default=None, help="comma-separated band widths to sweep (with the picked tile)")
    args = ap.parse_args()
    if args.raster:
        global RASTERS
        RASTERS = tuple(int(v) for v in args.raster.split(","))
    shapes = {"dense": DENSE, "small": [s for s in DENSE if s[0] <= 128],
              "large": [s for s in DENSE if s[0] > 128]}[args.shapes]
    sms = cugemm8.get_num_sms()
    dev = cupy.cuda.runtime.getDevice()

    todo = {cfg for s in shapes for cfg in candidates(*s)}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        list(pool.map(kernels.build, sorted(todo, key=repr)))  # the cache key runtime.bind looks up
    print(f"compiled {len(todo)} configurations", flush=True)

    timer = Timer(args.reps)
    results = []
    for m, n, k in shapes:
        rng = cupy.random.default_rng(0)
        a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cupy.float32))
        b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32))
        sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
        out = cupy.empty((m, n), dtype=cugemm8.api.BF16)
        ref = cugemm8.matmul(a, sa, b, sb).astype(cupy.float32)
        pick = heuristics.choose("normal", m, n, k, 1, sms)
        rows = []
        for cfg in candidates(m, n, k):
            call = runtime.bind(cfg, a, sa, b, sb, out)
            call()
            ok = bool(cupy.allclose(out.astype(cupy.float32), ref, rtol=2e-2, atol=1e-2))
            us = timer(call)
            rows.append({"block_m": cfg.block_m, "block_n": cfg.block_n, "stages": cfg.stages, "cluster": cfg.cluster,
                         "raster": cfg.raster_group, "us": us,
                         "tflops": 2 * m * n * k / us / 1e6, "ok": ok, "picked": cfg == pick.config})
        rows.sort(key=lambda r: r["us"])
        best = rows[0]
        mine = next(r for r in rows if r["picked"]) if any(r["picked"] for r in rows) else None
        results.append({"m": m, "n": n, "k": k, "rows": rows})
        if len(RASTERS) > 1:
            print(f"{m:5d} {n:6d} {k:6d}  " + "  ".join(f"r{r['raster']}c{r['cluster']}:{r['us']:.1f}"
                                                        for r in sorted(rows, key=lambda r: (r['raster'], r['cluster']))),
                  flush=True)
            continue
        print(f"{m:5d} {n:6d} {k:6d}  best {best['block_m']:3d}x{best['block_n']:3d}x{best['stages']:2d}c{best['cluster']} "
              f"{best['us']:8.1f}us {best['tflops']:6.0f}TF  "
              + (f"pick {mine['block_m']}x{mine['block_n']}x{mine['stages']}c{mine['cluster']} {mine['us']:8.1f}us "
                 f"({mine['us'] / best['us']:.2f}x)" if mine else f"pick {pick.config} not swept")
              + ("" if all(r["ok"] for r in rows) else "  MISMATCH in " + str([(r['block_m'], r['block_n'])
                                                                            for r in rows if not r['ok']])),
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": runtime.device_properties(dev), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()

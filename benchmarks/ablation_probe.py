"""What bounds a tile's main loop: the same configuration built whole and with parts taken out, timed interleaved
(wrong results; timing only):

    python -m benchmarks.ablation_probe [--shapes 8192x4096x7168,...] [--tiles 256x128,128x128s5,256x128c2]
                                        [--variants base,no-loads,...]

Variants (probe-only macros the CUDA sources test; the library never defines them):
- `base`;
- `no-promote` (CG8_PROBE_NO_PROMOTE): promotion keeps one product of each slab;
- `no-loads` (CG8_PROBE_NO_LOADS): the producer declares each stage full without loading it;
- `mma-only`: both of those;
- `no-mma` (CG8_PROBE_NO_MMA): no wgmma is issued, promotion runs on stale accumulators;
- `loads-only`: no MMAs, promotion cut, so the stage ring's pace alone;
- `no-amax-exchange` (CG8_PROBE_NO_AMAX_EXCHANGE; with --out-dtype float8_e4m3): the CTAs of a split tile or a shared
  scale group keep their own rows' amax, so what sharing it costs.
Where `no-loads` gains, the loads pace the loop; where `no-promote` gains, the promotion is not hidden behind the
other warpgroup's MMAs; `loads-only` and `mma-only` against `base` say whether either alone takes the time
(NOTES.md v28). Tiles as benchmarks.tile_probe names them."""
from __future__ import annotations

import argparse
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from .protocol import Timer
from .tile_probe import report, tile_config
from .tune import dense_inputs, provenance_line

VARIANTS = {"base": (), "no-promote": ("CG8_PROBE_NO_PROMOTE",), "no-loads": ("CG8_PROBE_NO_LOADS",),
            "mma-only": ("CG8_PROBE_NO_PROMOTE", "CG8_PROBE_NO_LOADS"), "no-mma": ("CG8_PROBE_NO_MMA",),
            "loads-only": ("CG8_PROBE_NO_MMA", "CG8_PROBE_NO_PROMOTE"),
            "no-amax-exchange": ("CG8_PROBE_NO_AMAX_EXCHANGE",)}
_defines: tuple[str, ...] = ()


def _with_defines(render):
    def render_probe(cfg):
        return "".join(f"#define {name} 1\n" for name in _defines) + render(cfg)
    return render_probe


def _set(defines: tuple[str, ...]) -> None:
    """Build (and load) with these macros defined from here on."""
    global _defines
    from . import library

    lib = library.current()
    if not _wrapped:
        lib.wrap_render(_with_defines)
        _wrapped.append(True)
    _defines = defines
    lib.forget_loaded()


_wrapped: list[bool] = []


def _build(job) -> int:
    cfg, defines = job
    from . import library

    _set(defines)
    return len(library.current().build(cfg))


def probe_args(argv, doc: str, shapes: str, tiles: str, tiles_form: str):
    """The ablation probes' command line (this one's and wgrad_probe's): --shapes, --tiles, --variants (checked
    against VARIANTS), --reps. Returns (args, shapes as (M, N, K), tiles, variants)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--shapes", default=shapes, help="MxNxK, comma-separated")
    p.add_argument("--tiles", default=tiles, help=f"{tiles_form}, comma-separated")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out-dtype", default="bfloat16", choices=("bfloat16", "float8_e4m3"))
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; expected some of {', '.join(VARIANTS)}")
    return (args, [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")],
            args.tiles.split(","), variants)


def build_all(configs, variants: list[str]) -> None:
    """Every configuration built with every variant's macros, compiled in parallel (the launches then find them)."""
    jobs = list(dict.fromkeys((cfg, VARIANTS[v]) for cfg in configs for v in variants))
    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_build, jobs))


def time_variants(timer, shape: tuple, binders: dict, variants: list[str], reps: int) -> None:
    """binders: per tile label, a function that binds that configuration's call (built with the macros set now).
    Each variant is bound under its macros, all are timed interleaved, and each is reported against its tile's
    `base` (the names are "<tile> <variant>")."""
    m, n, k = shape
    fns = {}
    for label, bind in binders.items():
        for v in variants:
            _set(VARIANTS[v])
            fns[f"{label} {v}"] = bind()
    _set(())
    for run in fns.values():
        run()
    times = timer.interleaved(fns, reps, rotate=True)
    report(f"{m}x{n}x{k}", times, 2 * m * n * k, lambda name: name.rsplit(" ", 1)[0] + " base", "base")


def main(argv=None) -> int:
    args, shapes, tiles, variants = probe_args(argv, __doc__, "8192x4096x7168,8192x7168x16384",
                                               "256x128,128x128,128x192", "BLOCK_MxBLOCK_N[sSTAGES][c2]")

    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm, heuristics

    fp8 = args.out_dtype != "bfloat16"
    configs = {(m, n, k, tile): tile_config(tile, n, k, args.out_dtype, m) for m, n, k in shapes for tile in tiles}
    build_all(configs.values(), variants)

    print(provenance_line(), flush=True)
    timer = Timer(settle_s=0.5, warmup=3)
    for m, n, k in shapes:
        a, sa, b, sb = dense_inputs(m, n, k)
        out = cupy.empty((m, n), dtype=cupy.uint8 if fp8 else cugemm8.api.BF16)
        out_scale = cugemm8.empty_scale((m, -(-n // 128))) if fp8 else None
        binders = {}
        for tile in tiles:
            cfg = configs[m, n, k, tile]
            grid = heuristics.grid_for(cfg, -(-m // cfg.block_m) * -(-n // cfg.block_n), 132)
            label = f"{cfg.block_m}x{cfg.block_n} s{cfg.stages}" + (" pairs" if cfg.cluster > 1 else "")
            label += f" split {cfg.split_k}" if cfg.split_k > 1 else ""
            binders[label] = lambda cfg=cfg, grid=grid: fp8_gemm.bind(cfg, a, sa, b, sb, out, grid=grid,
                                                                      out_scale=out_scale)
        time_variants(timer, (m, n, k), binders, variants, args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

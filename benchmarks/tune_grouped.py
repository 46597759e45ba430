"""Sweep kernel configurations of the grouped layouts (masked, contiguous) on the GPU and compare with
the heuristic's pick and with the dense kernel.

    python -m benchmarks.tune_grouped [--layout masked|contiguous|both|uneven] [--reps 10] [--out FILE] [--quick]
                                      [--jobs N] [--widths 192,256] [--pairs 128,192] [--share-b 160,192]
                                      [--rasters 4,8,16]

Not a test and not the benchmark: a tool for setting the heuristic from measurements (the grouped
counterpart of benchmarks/tune.py, whose compiling, timing and output it shares). Each configuration is
timed by the protocol (protocol.py: L2 flushed before each call, CUDA events, median of --reps) and checked
once against the API's own answer on the valid rows.

Masked: the benchmark's shapes (G, expected_m, N, K) with max_m = shapes.MASKED_MAX_M, in two scenarios:
"draw" (masked_m from shapes.draw_masked_m, the benchmark's draw) and "one" (only group 0 non-empty,
with its drawn rows), the latter against the dense kernel on group 0's rows ("dense" reference).
Contiguous: the benchmark's shapes plus two with uneven experts (G=8, about 4096 rows each, drawn as
int(4096*U(0.7, 1.3)) and rescaled to the same valid total), segments padded to
cugemm8.get_m_alignment_for_contiguous_layout(), against the dense kernel on the same total M, N, K
("dense_same_mnk"). Every case also times the API call itself ("api": the pick with the API's grid).
Uneven (issue 22's table): 128- and 256-row tiles, CTA pairs sharing A at --pairs widths and sharing B at --share-b
widths, or the pick at --rasters band widths.

One file past 400 lines: the masked, contiguous and uneven sweeps share its input builders, checks and output rows;
apart, each would import the others' pieces.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time

import cupy
import numpy as np

import cugemm8
from cugemm8 import heuristics

from . import library, shapes
from .env import bf16_to_f32, poison_bf16
from .tune import ATOL, RTOL, SweepTimer, compile_all, gpu_props, prefill_candidates, provenance, write

# (G, expected rows per group, N, K): the benchmark's masked table.
MASKED = [(s.groups, s.m, s.n, s.k) for s in shapes.MASKED_SHAPES]
MASKED_MAX_M = shapes.MASKED_MAX_M
MASKED_SCENARIOS = ("draw", "one")
# (G, rows per group or UNEVEN, N, K): the benchmark's contiguous table plus uneven experts.
UNEVEN = "uneven"
UNEVEN_MEAN = 4096
CONTIGUOUS = [(s.groups, s.m, s.n, s.k) for s in shapes.CONTIGUOUS_SHAPES] + [(8, UNEVEN, 4096, 7168),
                                                                            (8, UNEVEN, 7168, 2048)]
BLOCK_MS = (64, 128, 256)
# The uneven-expert sweep: 128- and 256-row tiles of these widths (256: 128x256 in column halves), pairs (DeepGEMM
# 8dfa329 runs its contiguous GEMM in pairs) at 128 wide; segments padded to shapes.PREFILL_ALIGN rows.
UNEVEN_BLOCK_N = (96, 112, 128, 144, 160, 192, 256)
RASTER_GROUP = heuristics.RASTER_GROUP  # the default band width (rows name only others)
QUICK_CANDIDATES = 6
SEED = shapes.SEED
contiguous_layout = shapes.contiguous_layout


# ----------------------------------------------------------------------------- pure helpers (no GPU)
def candidates(layout: str, n: int, k: int, groups: int, min_wide_block_n: int = 16) -> list:
    """Every BLOCK_M in BLOCK_MS with the heuristic's BLOCK_N candidates that are multiples of 16 and the
    most stages that fit (at least 2); `min_wide_block_n` drops narrower tiles for BLOCK_M >= 128."""
    lib, out = library.current(), []
    for bm in BLOCK_MS:
        for bn in lib.block_n_candidates(bm):
            if bn % 16 or (bm >= 128 and bn < min_wide_block_n):
                continue
            cfg = lib.make_config(layout, n, k, groups, bm, bn)
            if cfg.stages >= 2:
                out.append(cfg)
    return out


def with_pick(cfgs: list, pick, quick: bool) -> list:
    """The configurations to time: all of them (the pick appended if it is not among them), or with
    --quick at most QUICK_CANDIDATES spread over the list, the pick replacing the last if missing."""
    cfgs = list(cfgs)
    if quick and len(cfgs) > QUICK_CANDIDATES:
        step = len(cfgs) / QUICK_CANDIDATES
        cfgs = [cfgs[int(i * step)] for i in range(QUICK_CANDIDATES)]
    if pick is not None and pick not in cfgs:
        if quick and len(cfgs) >= QUICK_CANDIDATES:
            cfgs[-1] = pick
        else:
            cfgs.append(pick)
    return cfgs


def uneven_rows(groups: int, mean: int = UNEVEN_MEAN, seed: int = SEED) -> list[int]:
    return shapes.uneven_rows(groups, mean, seed)


def tflops(rows: int, n: int, k: int, us: float | None) -> float | None:
    return 2 * rows * n * k / us / 1e6 if us else None


def cfg_label(row: dict) -> str:
    raster = row.get("raster", RASTER_GROUP)
    pair = "b2" if row.get("share_b") else "c2" if row.get("cluster", 1) == 2 else ""
    return (f"{row['block_m']}x{row['block_n']}x{row['stages']}" + pair
            + (f"r{raster}" if raster != RASTER_GROUP else ""))


def best_row(rows: list[dict]) -> dict | None:
    """The fastest correct row (the fastest timed one if none is correct)."""
    timed = [r for r in rows if r.get("us") is not None]
    good = [r for r in timed if r["ok"]] or timed
    return min(good, key=lambda r: r["us"]) if good else None


# ----------------------------------------------------------------------------- GPU work
def f32(x):
    return bf16_to_f32(cupy, cupy.ascontiguousarray(x))


def quantize_a(x, lead: tuple):
    """(fp8 [*lead, K], row-major scales [*lead, kb], TMA-aligned scales) of x [prod(lead), K]."""
    a, s = cugemm8.per_token_cast_to_fp8(x)
    a, s = a.reshape(*lead, a.shape[-1]), s.reshape(*lead, s.shape[-1])
    return a, s, cugemm8.get_col_major_tma_aligned_tensor(s)


def quantize_b(rng, g: int, n: int, k: int):
    parts = [cugemm8.per_block_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32)) for _ in range(g)]
    return cupy.stack([p[0] for p in parts]), cupy.stack([p[1] for p in parts])


def sweep(cfgs, errors, make_call, check, valid_rows: int, n: int, k: int, pick, timer: SweepTimer):
    """One row per configuration: checked once (poisoned output, valid rows), then timed."""
    rows = []
    for cfg in cfgs:
        row = {"block_m": cfg.block_m, "block_n": cfg.block_n, "stages": cfg.stages, "num_math_wg": cfg.num_math_wg,
               "cluster": cfg.cluster, "share_b": getattr(cfg, "share_b", False), "raster": cfg.raster_group,
               "us": None, "tflops": None, "ok": False, "picked": pick is not None and cfg == pick}
        if cfg in errors:
            row["error"] = errors[cfg]
        else:
            try:
                call = make_call(cfg)
                row["ok"] = check(call)
                us = timer(call)
                row.update(us=us, tflops=tflops(valid_rows, n, k, us))
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        rows.append(row)
    rows.sort(key=lambda r: (r["us"] is None, r["us"] or 0.0))
    return rows


def time_ref(timer: SweepTimer, fn, rows: int, n: int, k: int, **extra) -> dict:
    try:
        fn()
        cupy.cuda.get_current_stream().synchronize()
        us = timer(fn)
        return {"us": us, "tflops": tflops(rows, n, k, us), **extra}
    except Exception as exc:
        return {"us": None, "error": f"{type(exc).__name__}: {str(exc)[:500]}", **extra}


def choose(layout: str, m: int, n: int, k: int, groups: int, sms: int):
    """The heuristic's LaunchPlan, or None if it raises (it is someone else's moving target)."""
    try:
        return library.current().choose(layout, m, n, k, groups, sms)
    except Exception as exc:
        print(f"heuristics.choose{(layout, m, n, k, groups, sms)} raised {type(exc).__name__}: {exc}", flush=True)
        return None


def plan_dict(plan) -> dict | None:
    if plan is None:
        return None
    c = plan.config
    return {"block_m": c.block_m, "block_n": c.block_n, "stages": c.stages, "grid": plan.grid,
            "num_tiles": plan.num_tiles}


def summary_line(head: str, rows: list[dict], refs: dict, dense_key: str | None) -> str:
    best = best_row(rows)
    mine = next((r for r in rows if r["picked"]), None)
    if best is None:
        return f"{head}  no configuration ran: " + "; ".join(sorted({r.get('error', '?')[:120] for r in rows}))
    text = f"{head}  best {cfg_label(best):>10s} {best['us']:8.1f}us {best['tflops'] or 0:6.0f}TF  "
    if mine and mine.get("us") is not None:
        text += f"pick {cfg_label(mine)} {mine['us']:8.1f}us ({mine['us'] / best['us']:.2f}x)"
    else:
        text += "pick " + (f"{cfg_label(mine)} failed" if mine else "not swept")
    api = refs.get("api", {})
    if api.get("us"):
        text += f"  api {api['us']:.1f}us"
    if dense_key:
        dense = refs.get(dense_key, {})
        if dense.get("us"):
            text += (f"  {dense_key} {dense['us']:.1f}us best/dense {best['us'] / dense['us']:.2f}"
                     + (f" pick/dense {mine['us'] / dense['us']:.2f}" if mine and mine.get("us") else ""))
    bad = [cfg_label(r) for r in rows if r.get("us") is not None and not r["ok"]]
    failed = [cfg_label(r) for r in rows if r.get("us") is None]
    if bad:
        text += f"  MISMATCH in {bad}"
    if failed:
        text += f"  FAILED {failed}"
    return text


def run_masked_shape(shape, cfgs, errors, timer: SweepTimer, sms: int) -> list[dict]:
    g, expected, n, k = shape
    max_m = MASKED_MAX_M
    mm = shapes.draw_masked_m(g, expected, max_m)
    rng = cupy.random.default_rng(SEED)
    a, s_rows, sa = quantize_a(rng.standard_normal((g * max_m, k), dtype=cupy.float32), (g, max_m))
    b, sb = quantize_b(rng, g, n, k)
    out = cupy.empty((g, max_m, n), dtype=cugemm8.api.BF16)
    api_out = cupy.empty_like(out)
    pick = choose("masked", expected, n, k, g, sms)
    rows0 = int(mm[0])
    a0 = a[0, :rows0]
    sa0 = cugemm8.get_col_major_tma_aligned_tensor(cupy.ascontiguousarray(s_rows[0, :rows0]))
    dense_out = cupy.empty((rows0, n), dtype=cugemm8.api.BF16)

    results = []
    for scenario in MASKED_SCENARIOS:
        counts = mm if scenario == "draw" else np.array([rows0] + [0] * (g - 1), dtype=np.int32)
        counts = [int(c) for c in counts]
        masked_m = cupy.asarray(np.asarray(counts, dtype=np.int32))
        valid = sum(counts)
        entry = {"layout": "masked", "scenario": scenario, "groups": g, "expected_m": expected, "n": n, "k": k,
                 "max_m": max_m, "masked_m": counts, "valid_rows": valid, "pick": plan_dict(pick)}

        def api_call(out=api_out):
            return cugemm8.m_grouped_matmul_masked(a, sa, b, sb, masked_m, expected, out=out)

        refs = {"api": time_ref(timer, api_call, valid, n, k, grid=pick and pick.grid)}
        ref, entry["ref"] = api_out, "api"
        if refs["api"].get("us") is None:   # the API itself fails: check against the dense kernel per group
            ref, entry["ref"] = cupy.zeros_like(out), "dense per group"
            for i, r in enumerate(counts):
                if r:
                    si = cugemm8.get_col_major_tma_aligned_tensor(cupy.ascontiguousarray(s_rows[i, :r]))
                    cugemm8.matmul(a[i, :r], si, b[i], sb[i], out=ref[i, :r])
        if scenario == "one":
            refs["dense"] = time_ref(timer, lambda: cugemm8.matmul(a0, sa0, b[0], sb[0], out=dense_out), rows0, n, k)
        ref_rows = [f32(ref[i, :r]) for i, r in enumerate(counts) if r]

        def check(call):
            poison_bf16(cupy, out)
            call()
            cupy.cuda.get_current_stream().synchronize()
            got = [f32(out[i, :r]) for i, r in enumerate(counts) if r]
            return all(bool(cupy.allclose(x, y, rtol=RTOL, atol=ATOL)) for x, y in zip(got, ref_rows))

        rows = sweep(cfgs, errors, lambda cfg: library.current().bind(cfg, a, sa, b, sb, out, layout=masked_m), check,
                     valid, n, k, pick and pick.config, timer)
        entry.update(refs=refs, rows=rows)
        head = f"masked G={g} e={expected:4d} {n:5d}x{k:5d} {scenario:4s} rows={valid:5d}"
        print(summary_line(head, rows, refs, "dense" if scenario == "one" else None), flush=True)
        results.append(entry)
    return results


def contiguous_rows(shape, prefill: bool) -> list[int]:
    """Rows per expert of a contiguous sweep shape: issue 22's uneven draw (prefill), the 0.7-1.3 draw (UNEVEN)
    or m each."""
    g, m = shape[0], shape[1]
    if prefill:
        return shapes.uneven_expert_rows(g, m)
    return uneven_rows(g) if m == UNEVEN else [m] * g


def run_contiguous_shape(shape, cfgs, errors, timer: SweepTimer, sms: int, align: int,
                         prefill: bool = False) -> list[dict]:
    g, m, n, k = shape
    per_group = contiguous_rows(shape, prefill)
    idx, offsets = contiguous_layout(per_group, align)
    total, valid = len(idx), sum(per_group)
    rng = cupy.random.default_rng(SEED)
    a, s_rows, sa = quantize_a(rng.standard_normal((total, k), dtype=cupy.float32), (total,))
    b, sb = quantize_b(rng, g, n, k)
    m_indices = cupy.asarray(idx)
    out = cupy.empty((total, n), dtype=cugemm8.api.BF16)
    api_out = cupy.empty_like(out)
    dense_out = cupy.empty_like(out)
    pick = choose("contiguous", total, n, k, g, sms)
    segments = [(off, r) for off, r in zip(offsets, per_group) if r]
    entry = {"layout": "contiguous", "groups": g, "uneven": m == UNEVEN or prefill, "prefill": prefill,
             "mean_rows": m if prefill else None, "rows_per_group": per_group,
             "segment_offsets": offsets, "alignment": align, "n": n, "k": k, "total_m": total, "valid_rows": valid,
             "pick": plan_dict(pick)}

    def api_call(out=api_out):
        return cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, m_indices, out=out)

    refs = {"api": time_ref(timer, api_call, valid, n, k, grid=pick and pick.grid),
            # dense kernel on the same total M (padded), N, K: its TFLOPS count all its rows
            "dense_same_mnk": time_ref(timer, lambda: cugemm8.matmul(a, sa, b[0], sb[0], out=dense_out),
                                       total, n, k)}
    ref, entry["ref"] = api_out, "api"
    if refs["api"].get("us") is None:
        ref, entry["ref"] = cupy.zeros_like(out), "dense per expert"
        for i, (off, r) in enumerate(zip(offsets, per_group)):
            if r:
                si = cugemm8.get_col_major_tma_aligned_tensor(cupy.ascontiguousarray(s_rows[off:off + r]))
                cugemm8.matmul(a[off:off + r], si, b[i], sb[i], out=ref[off:off + r])
    ref_rows = [f32(ref[off:off + r]) for off, r in segments]   # exactly the rows with m_indices >= 0

    def check(call):
        poison_bf16(cupy, out)
        call()
        cupy.cuda.get_current_stream().synchronize()
        return all(bool(cupy.allclose(f32(out[off:off + r]), y, rtol=RTOL, atol=ATOL))
                   for (off, r), y in zip(segments, ref_rows))

    rows = sweep(cfgs, errors, lambda cfg: library.current().bind(cfg, a, sa, b, sb, out, layout=m_indices), check,
                 valid, n, k, pick and pick.config, timer)
    entry.update(refs=refs, rows=rows)
    label = f"u{m}" if prefill else "uneven" if m == UNEVEN else m
    head = f"contig G={g} m={label:>6} {n:5d}x{k:5d} M={total:5d}"
    print(summary_line(head, rows, refs, "dense_same_mnk"), flush=True)
    return [entry]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", default="both", choices=("masked", "contiguous", "both", "uneven"),
                    help="uneven: issue 22's uneven-expert table (shapes.PREFILL_UNEVEN_SHAPES, segments padded to "
                         "128), 128- and 256-row tiles")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help=f"first shape of each layout, at most "
                                                         f"{QUICK_CANDIDATES} configurations")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="compile processes")
    ap.add_argument("--rasters", default="", help="uneven: comma-separated band widths (n-blocks) to sweep with the "
                                                  "heuristic's tile instead of the tiles")
    ap.add_argument("--pairs", default="128", help="uneven: comma-separated tile widths also swept as CTA pairs "
                                                   "sharing A by TMA multicast (none: '')")
    ap.add_argument("--widths", default=",".join(map(str, UNEVEN_BLOCK_N)),
                    help="uneven: comma-separated tile widths to sweep (256: 128x256 in column halves)")
    ap.add_argument("--share-b", default="", help="uneven: comma-separated widths of 128-row tiles also swept as CTA "
                                                  "pairs sharing B")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    try:
        pair_widths = tuple(int(w) for w in args.pairs.split(",") if w)
        share_b_widths = tuple(int(w) for w in args.share_b.split(",") if w)
        widths = tuple(int(w) for w in args.widths.split(",") if w)
        rasters = tuple(int(r) for r in args.rasters.split(",") if r)
    except ValueError:
        ap.error(f"--pairs, --share-b, --widths and --rasters take comma-separated integers, got {args.pairs!r}, "
                 f"{args.share_b!r}, {args.widths!r} and {args.rasters!r}")
    if any(r < 1 for r in rasters):
        ap.error(f"--rasters must be positive band widths, got {args.rasters!r}")
    t0 = time.time()
    sms = cugemm8.get_num_sms()
    align = cugemm8.get_m_alignment_for_contiguous_layout()

    # (layout, shape, configurations to time), and every kernel the run will launch
    work, extra = [], set()   # extra: the dense references' kernels (compiled with the rest)

    def config_of(*problem):
        plan = choose(*problem, sms)
        return plan and plan.config

    if args.layout in ("masked", "both"):
        for shape in MASKED[:1] if args.quick else MASKED:
            g, e, n, k = shape
            pick = config_of("masked", e, n, k, g)
            work.append(("masked", shape, with_pick(candidates("masked", n, k, g), pick, args.quick)))
            extra.add(config_of("normal", int(shapes.draw_masked_m(g, e, MASKED_MAX_M)[0]), n, k, 1))
    if args.layout in ("contiguous", "both"):
        for shape in CONTIGUOUS[:1] if args.quick else CONTIGUOUS:
            g, m, n, k = shape
            total = len(contiguous_layout(uneven_rows(g) if m == UNEVEN else [m] * g, align)[0])
            pick = config_of("contiguous", total, n, k, g)
            work.append(("contiguous", shape, with_pick(candidates("contiguous", n, k, g), pick, args.quick)))
            extra.add(config_of("normal", total, n, k, 1))
    if args.layout == "uneven":
        for s in shapes.PREFILL_UNEVEN_SHAPES[:1] if args.quick else shapes.PREFILL_UNEVEN_SHAPES:
            shape = (s.groups, s.m, s.n, s.k)
            total = len(contiguous_layout(contiguous_rows(shape, True), shapes.PREFILL_ALIGN)[0])
            pick = config_of("contiguous", total, s.n, s.k, s.groups)
            if rasters:
                cands = [dataclasses.replace(pick, raster_group=r) for r in rasters]
            else:
                cands = prefill_candidates("contiguous", s.n, s.k, s.groups, widths, pair_block_ns=pair_widths,
                                           share_b_block_ns=share_b_widths)
            work.append(("uneven", shape, with_pick(cands, pick, args.quick)))
            extra.add(config_of("normal", total, s.n, s.k, 1))
    extra.discard(None)
    todo = {cfg for _, _, cfgs in work for cfg in cfgs}
    errors = compile_all(todo | extra, args.jobs)
    compile_s = time.time() - t0
    failed = sorted((c.layout, c.num_groups, c.n, c.k, c.block_m, c.block_n) for c in errors)
    print(f"compiled {len(todo | extra)} configurations in {compile_s:.0f}s"
          + (f"; {len(errors)} failed: {failed}" if errors else ""), flush=True)
    for cfg, err in sorted(errors.items(), key=lambda kv: repr(kv[0]))[:3]:   # the first few logs
        print(f"  {cfg}:\n    " + "\n    ".join(err.splitlines()[:6]), flush=True)

    info = {**provenance(), "reps": args.reps, "quick": args.quick, "sms": sms, "contiguous_alignment": align,
            "masked_max_m": MASKED_MAX_M, "seed": SEED, "rtol": RTOL, "atol": ATOL, "compile_s": compile_s,
            "configs_compiled": len(todo | extra), "compile_errors": len(errors),
            "timer": "protocol.py: 1 GiB memset, CUDA events around one call, median; no settling",
            "note": "us/tflops over valid rows; configs launched by fp8_gemm.bind with its default grid "
                    "(masked: all SMs); refs.api is the API call (the pick with the heuristic's grid)"}
    timer = SweepTimer(args.reps)
    results = []
    for layout, shape, cfgs in work:
        try:
            if layout == "masked":
                results += run_masked_shape(shape, cfgs, errors, timer, sms)
            elif layout == "uneven":
                results += run_contiguous_shape(shape, cfgs, errors, timer, sms, shapes.PREFILL_ALIGN, prefill=True)
            else:
                results += run_contiguous_shape(shape, cfgs, errors, timer, sms, align)
        except Exception as exc:
            print(f"{layout} {shape}: error {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            results.append({"layout": layout, "shape": list(shape), "error": f"{type(exc).__name__}: {exc}"})
        finally:
            cupy.cuda.get_current_stream().synchronize()
            cupy.get_default_memory_pool().free_all_blocks()
        info["wall_s"] = time.time() - t0
        write(args.out, {"gpu": gpu_props(), "info": info, "results": results})   # keep what we have
    print(f"done in {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

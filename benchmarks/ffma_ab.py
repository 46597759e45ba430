"""A/B of the FFMA interleave patch (cugemm8.ffma) on the benchmark shapes, in one run on the GPU.

    python -m benchmarks.ffma_ab [--reps 60] [--sections dense,contiguous,masked] [--variants off,on,...]
                              [--quick] [--out FILE.json]
    python -m benchmarks.ffma_ab --dry-run [--sms 132]     # no GPU: configurations and patch counts only

For every benchmark shape (shapes.py) the heuristic's configuration is built once per variant (patch off,
the default patch, fraction 1.0, keep_compiler_yields=False, both) and launched through
fp8_gemm.bind(..., ffma=variant) on the same inputs. Before timing, every variant's output is
compared bit for bit with the unpatched kernel's (the patch changes scheduling hints only), and the
unpatched output is checked against the FP32 product (calc_diff). Timing is the protocol's
(protocol.py, interleaved with the order rotating every repetition, median of --reps calls per variant),
so drift hits the variants alike. "off_aa" times the unpatched kernel a second time: its ratio to "off" is
the noise floor of this very run.

Per variant and shape: FFMAs patched, median µs, interquartile range, the ratio of medians to "off"
(< 1: faster) and the interquartile range of the per-repetition paired ratios; "+"/"-" marks a
variant whose whole paired IQR lies below/above 1 (faster/slower beyond the run-to-run spread).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from cugemm8 import ffma

from . import library
from .protocol import FLUSH_BYTES, WARMUP_CALLS, CudaDevice, Timer, paired
from .shapes import (CONTIGUOUS_SHAPES, DENSE_SHAPES, MASKED_MAX_M, MASKED_SHAPES, SEED, Shape, contiguous_m_indices,
                     draw_masked_m, geomean)

BASELINE = "off"
CONTROL = "off_aa"           # the baseline timed again: the A/A noise floor
VARIANTS = {
    "off": {"enabled": False},
    "on": {"enabled": True, "fraction": 9 / 16, "keep_compiler_yields": True},
    "frac1": {"enabled": True, "fraction": 1.0, "keep_compiler_yields": True},
    "nokeep": {"enabled": True, "fraction": 9 / 16, "keep_compiler_yields": False},
    "nokeep_frac1": {"enabled": True, "fraction": 1.0, "keep_compiler_yields": False},
}
SECTIONS = {"dense": DENSE_SHAPES, "contiguous": CONTIGUOUS_SHAPES, "masked": MASKED_SHAPES}
QUICK = (DENSE_SHAPES[0], DENSE_SHAPES[3], DENSE_SHAPES[16])
WARMUP = WARMUP_CALLS
DIFF_LIMIT = 1e-3
CONTIGUOUS_ALIGN = 64   # cugemm8.get_m_alignment_for_contiguous_layout() (checked in Bench)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=60, help="timed calls per variant and shape (>= 30)")
    ap.add_argument("--sections", default="dense,contiguous,masked")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"some of {list(VARIANTS)} ('off' is always run)")
    ap.add_argument("--quick", action="store_true", help=f"only {[s.label for s in QUICK]}")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: print configurations and patch counts")
    ap.add_argument("--sms", type=int, default=132, help="SM count for --dry-run")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                    help="processes that compile the kernels up front (1: compile in line)")
    args = ap.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    unknown = set(names) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}")
    args.variants = [BASELINE] + [v for v in VARIANTS if v in names and v != BASELINE]
    sections = [s for s in args.sections.split(",") if s]
    if set(sections) - set(SECTIONS):
        ap.error(f"sections must be some of {list(SECTIONS)}")
    args.shapes = list(QUICK) if args.quick else [s for name in sections for s in SECTIONS[name]]
    if args.reps < 30 and not args.dry_run:
        print(f"warning: --reps {args.reps} < 30 (the protocol's minimum)", file=sys.stderr)
    return args


# ----------------------------------------------------------------------------- pure helpers
def plan_for(shape: Shape, num_sms: int):
    """(heuristics plan, rows the kernel sees, rows per group for the heuristic)."""
    lib = library.current()
    if shape.kind == "normal":
        return lib.choose("normal", shape.m, shape.n, shape.k, 1, num_sms), shape.m
    if shape.kind == "contiguous":
        _, seg = contiguous_m_indices(shape.groups, shape.m, CONTIGUOUS_ALIGN)
        rows = shape.groups * seg
        return lib.choose("contiguous", rows, shape.n, shape.k, shape.groups, num_sms), rows
    return lib.choose("masked", min(shape.m, MASKED_MAX_M), shape.n, shape.k, shape.groups, num_sms), MASKED_MAX_M


def cfg_label(cfg) -> str:
    return (f"bm{cfg.block_m} bn{cfg.block_n} st{cfg.stages} wg{cfg.num_math_wg}"
            + (f" cl{cfg.cluster}" if cfg.cluster > 1 else ""))


def variant_cubins(cfg, variants):
    """{variant: (cubin, FFMAs patched, same bytes as off)}; checks build() against a direct patch."""
    lib = library.current()
    off = lib.build(cfg, ffma=VARIANTS[BASELINE])
    out = {}
    for name in variants:
        spec = VARIANTS[name]
        cubin = lib.build(cfg, ffma=spec)
        if spec["enabled"]:
            expected, count = ffma.interleave(off, spec["fraction"], keep_compiler_yields=spec["keep_compiler_yields"])
            if cubin != expected:
                raise AssertionError(f"{name}: fp8_gemm.build differs from ffma.interleave of the unpatched cubin")
        else:
            count = 0
        out[name] = (cubin, count, cubin == off)
    return out


def summarize(samples: dict, base: str = BASELINE) -> dict:
    """Per series (µs): median, quartiles, and against `base`: ratio of medians and paired-ratio quartiles."""
    out = {}
    for name, row in paired(samples, base).items():
        for key in ("median", "q1", "q3", "iqr", "min", "max"):
            row[f"{key}_us"] = row.pop(key)
        out[name] = {**row, "samples_us": samples[name]}
    return out


# ----------------------------------------------------------------------------- GPU
class Bench:
    def __init__(self):
        import cupy as cp

        import cugemm8

        self.cp, self.cg, self.lib = cp, cugemm8, library.current()
        self.device = cp.cuda.runtime.getDevice()
        self.num_sms = cugemm8.get_num_sms()
        self.stream = cp.cuda.Stream(non_blocking=False)
        self.timer = Timer(CudaDevice(self.stream), settle_s=0.0, warmup=WARMUP)
        self.rng = cp.random.default_rng(SEED)
        assert cugemm8.get_m_alignment_for_contiguous_layout() == CONTIGUOUS_ALIGN

    def randn(self, shape):
        return self.rng.standard_normal(shape, dtype=self.cp.float32)

    def quantize_a(self, x):
        k = x.shape[-1]
        q, s = self.cg.per_token_cast_to_fp8(x.reshape(-1, k))
        q, s = q.reshape(*x.shape), s.reshape(*x.shape[:-1], s.shape[-1])
        return q, self.cg.get_col_major_tma_aligned_tensor(s)

    def quantize_b(self, w):
        if w.ndim == 2:
            return self.cg.per_block_cast_to_fp8(w)
        parts = [self.cg.per_block_cast_to_fp8(w[g]) for g in range(w.shape[0])]
        return self.cp.stack([p[0] for p in parts]), self.cp.stack([p[1] for p in parts])

    def inputs(self, shape: Shape, rows: int):
        """a, sa, b, sb, layout array (or None), out shape, and [(rows of out, fp32 reference)] pairs."""
        cp, g, n, k = self.cp, shape.groups, shape.n, shape.k
        if shape.kind == "normal":
            x, w = self.randn((rows, k)), self.randn((n, k))
            refs, layout, out_shape = [(slice(None), x @ w.T)], None, (rows, n)
        elif shape.kind == "contiguous":
            idx, seg = contiguous_m_indices(g, shape.m, CONTIGUOUS_ALIGN)
            x, w = self.randn((rows, k)), self.randn((g, n, k))
            refs = [(slice(i * seg, i * seg + shape.m), x[i * seg:i * seg + shape.m] @ w[i].T) for i in range(g)]
            layout, out_shape = cp.asarray(idx), (rows, n)
        else:
            mm = draw_masked_m(g, shape.m)
            x, w = self.randn((g, MASKED_MAX_M, k)), self.randn((g, n, k))
            refs = [((i, slice(0, int(mm[i]))), x[i, :mm[i]] @ w[i].T) for i in range(g)]
            layout, out_shape = cp.asarray(mm), (g, MASKED_MAX_M, n)
        a, sa = self.quantize_a(x)
        b, sb = self.quantize_b(w)
        return a, sa, b, sb, layout, out_shape, refs

    def calc_diff(self, out, refs) -> float:
        cp = self.cp
        f32 = (out.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32)
        xy = sq = 0.0
        for where, ref in refs:
            y, r = f32[where].astype(cp.float64), ref.astype(cp.float64)
            xy += float((y * r).sum())
            sq += float((y * y + r * r).sum())
        return 1.0 - 2.0 * xy / sq if sq else float("nan")

    def run_shape(self, shape: Shape, variants: list, reps: int) -> dict:
        cp = self.cp
        from cugemm8.api import BF16

        plan, rows = plan_for(shape, self.num_sms)
        cfg = plan.config
        t0 = time.perf_counter()
        cubins = variant_cubins(cfg, variants)
        build_s = time.perf_counter() - t0
        a, sa, b, sb, layout, out_shape, refs = self.inputs(shape, rows)
        out = cp.empty(out_shape, dtype=BF16)
        launchers = {name: self.lib.bind(cfg, a, sa, b, sb, out, layout=layout, grid=plan.grid,
                                             ffma=VARIANTS[name])
                     for name in variants}
        stream = self.stream.ptr

        def caller(run, d):
            return lambda: run(out=d, stream_ptr=stream)

        # Check: every variant's output, on a NaN-poisoned buffer, bit for bit against the unpatched one.
        outputs = {}
        for name in variants:
            d = cp.empty(out_shape, dtype=BF16)
            with self.stream:
                d.view(cp.uint16).fill(0xFFFF)
            caller(launchers[name], d)()
            outputs[name] = d
        self.stream.synchronize()
        base = outputs[BASELINE].view(cp.uint16)
        bitwise = {name: bool(cp.array_equal(outputs[name].view(cp.uint16), base)) for name in variants}
        diff = self.calc_diff(outputs[BASELINE], refs)
        del outputs, base, refs

        # Time: the protocol, variants alternating call by call, the order rotating per repetition.
        series = variants + [CONTROL]
        calls = {name: caller(launchers[BASELINE if name == CONTROL else name], out) for name in series}
        seconds = self.timer.interleaved(calls, reps, rotate=True)
        samples = {name: [t * 1e6 for t in seconds[name]] for name in series}
        stats = summarize(samples)
        for name in variants:
            _, count, same = cubins[name]
            stats[name].update(ffma_patched=count, same_cubin_as_off=same, bitwise_equal=bitwise[name],
                               ffma=VARIANTS[name])
        row = {**dataclasses.asdict(shape), "label": shape.label, "config": dataclasses.asdict(cfg),
               "grid": plan.grid, "rows": rows, "calc_diff_off": diff, "build_s": build_s, "variants": stats}
        del a, sa, b, sb, layout, out, launchers, calls
        cp.get_default_memory_pool().free_all_blocks()
        return row


# ----------------------------------------------------------------------------- report
def print_row(row: dict, variants: list) -> None:
    cfg = library.current().config(row["config"])
    v = row["variants"]
    off = v[BASELINE]
    ok = all(v[name]["bitwise_equal"] for name in variants) and row["calc_diff_off"] < DIFF_LIMIT
    patched = " ".join(f"{n}={v[n]['ffma_patched']}" for n in variants if n != BASELINE)
    print(f"{row['label']:<22} {cfg_label(cfg):<28} grid {row['grid']:3d}  "
          f"patched {patched}  "
          f"{'bitwise ok' if ok else 'CHECK FAILED'} (diff {row['calc_diff_off']:.1e})")
    print(f"    {'off':<13} {off['median_us']:9.1f} us  iqr {off['iqr_us']:6.2f} us ({off['iqr_us'] / off['median_us']:.1%})")
    for name in [n for n in variants if n != BASELINE] + [CONTROL]:
        s = v[name]
        mark = {"faster": "+", "slower": "-", "same": " "}[s["verdict"]]
        extra = "" if name == CONTROL else (
            f"  n={s['ffma_patched']}" + (" (same cubin)" if s["same_cubin_as_off"] else "")
            + ("" if s["bitwise_equal"] else "  OUTPUT DIFFERS"))
        print(f"    {name:<13} {s['median_us']:9.1f} us  iqr {s['iqr_us']:6.2f} us  ratio {s['ratio']:.4f}"
              f"  paired [{s['paired_q1']:.4f}, {s['paired_q3']:.4f}] {mark}{extra}")


def summary(rows: list, variants: list) -> dict:
    groups = {
        "all": rows,
        "dense": [r for r in rows if r["kind"] == "normal"],
        "grouped": [r for r in rows if r["kind"] != "normal"],
        "block_m_64": [r for r in rows if r["config"]["block_m"] == 64],
        "block_m_128_256": [r for r in rows if r["config"]["block_m"] != 64],
    }
    out = {}
    for name in [n for n in variants if n != BASELINE] + [CONTROL]:
        per = {}
        for gname, rs in groups.items():
            if not rs:
                continue
            vs = [r["variants"][name] for r in rs]
            per[gname] = {"geomean_ratio": geomean(s["ratio"] for s in vs), "shapes": len(vs),
                          "faster": sum(s["verdict"] == "faster" for s in vs),
                          "slower": sum(s["verdict"] == "slower" for s in vs)}
        changed = [r["variants"][name] for r in rows if not r["variants"][name].get("same_cubin_as_off", True)]
        if changed:
            per["cubin_changed"] = {"geomean_ratio": geomean(s["ratio"] for s in changed), "shapes": len(changed),
                                    "faster": sum(s["verdict"] == "faster" for s in changed),
                                    "slower": sum(s["verdict"] == "slower" for s in changed)}
        out[name] = per
    return out


def print_summary(summ: dict) -> None:
    print("\ngeometric mean of time ratios vs off (< 1: faster); +faster / -slower: shapes whose paired IQR "
          "excludes 1")
    for name, per in summ.items():
        print(f"  {name:<13} " + "  ".join(f"{g} {p['geomean_ratio']:.4f} (+{p['faster']}/-{p['slower']} of {p['shapes']})"
                                           for g, p in per.items()))


def _build_one(job) -> float:
    cfg, name = job
    t0 = time.perf_counter()
    lib = library.current()
    lib.build(lib.config(cfg), ffma=VARIANTS[name])
    return time.perf_counter() - t0


def precompile(args, num_sms: int) -> None:
    """Fill the disk cache with every (configuration, variant) in parallel processes (jit.build
    compiles one source at a time per process); the measurement then loads them from disk."""
    if args.jobs <= 1 or _cache_disabled():
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cfgs = {plan_for(shape, num_sms)[0].config for shape in args.shapes}
    jobs = [(dataclasses.asdict(cfg), name) for cfg in sorted(cfgs, key=repr) for name in args.variants]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        total = sum(pool.map(_build_one, jobs))
    print(f"built {len(jobs)} cubins ({len(cfgs)} configurations x {len(args.variants)} variants) in "
          f"{time.perf_counter() - t0:.1f} s ({total:.1f} s of compile/load)", flush=True)


def dry_run(args) -> int:
    for shape in args.shapes:
        plan, rows = plan_for(shape, args.sms)
        cubins = variant_cubins(plan.config, args.variants)
        print(f"{shape.label:<22} {cfg_label(plan.config):<28} grid {plan.grid:3d}  "
              + " ".join(f"{n}={c}{'' if not same or n == BASELINE else '(same)'}"
                         for n, (_, c, same) in cubins.items()), flush=True)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        precompile(args, args.sms)
        return dry_run(args)
    t0 = time.perf_counter()
    bench = Bench()
    precompile(args, bench.num_sms)
    props = bench.lib.device_properties(bench.device)
    print(f"{props['name']}, {bench.num_sms} SMs; NVRTC {bench.lib.nvrtc_version()}; {ffma.PATCHER_VERSION}; "
          f"{args.reps} reps; variants {args.variants} + {CONTROL}", flush=True)
    rows, failures = [], []
    for shape in args.shapes:
        row = bench.run_shape(shape, args.variants, args.reps)
        rows.append(row)
        print_row(row, args.variants)
        sys.stdout.flush()
        if not all(row["variants"][n]["bitwise_equal"] for n in args.variants) or not row["calc_diff_off"] < DIFF_LIMIT:
            failures.append(shape.label)
    summ = summary(rows, args.variants)
    print_summary(summ)
    elapsed = time.perf_counter() - t0
    print(f"{len(rows)} shapes in {elapsed:.0f} s" + (f"; CHECK FAILED on {failures}" if failures else ""))
    if args.out:
        import cupy

        doc = {"gpu": props, "num_sms": bench.num_sms, "nvrtc": bench.lib.nvrtc_version(), "cupy": cupy.__version__,
               "patcher_version": ffma.PATCHER_VERSION, "reps": args.reps, "warmup": WARMUP,
               "flush_bytes": FLUSH_BYTES, "variants": {n: VARIANTS[n] for n in args.variants},
               "baseline": BASELINE, "control": CONTROL, "elapsed_s": elapsed, "failures": failures,
               "summary": summ, "rows": rows}
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())


def _cache_disabled() -> bool:
    """CUGEMM8_JIT_DISABLE_CACHE, read by the package's rule (0, false, no, off: off); imported here, not at the top,
    so that importing this module needs no CuPy."""
    from cugemm8 import envvars

    return envvars.flag(envvars.JIT_DISABLE_CACHE)

"""A/B of this checkout's library against another checkout's, for proving that a change moved no speed
(or how much it did):

    git archive <commit> cugemm8 cuda_src | tar -x -C /tmp/base
    python -m benchmarks.round_robin --base /tmp/base [--rounds 20] [--quick] [--sections dense,masked]
                                     [--shapes MxNxK,...] [--match REGEX] [--out-dtype float8_e4m3] [--out FILE.json]

The other checkout's package is loaded under the alias cugemm8_base (library.load): its own modules, its
own cuda_src/, its own JIT cache keys. Each case (the benchmark's shapes) gets the heuristic's configuration
of each package, launched on the same inputs; the outputs must be bitwise equal (DIFF otherwise). Then
rounds: every case and variant is timed once per round by the protocol (protocol.py: L2 flush, CUDA
events; the order rotates by one every round), "base" twice ("base" and "base_aa"): the A/A ratio is this
run's noise floor. Per case: the median-time ratio cur/base and the interquartile range of the per-round
paired ratios. With --out-dtype float8_e4m3 (or float8_e4m3_ue8m0) every call writes e4m3 with 1x128 scales, and
payloads and scales must both be bitwise equal.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import sys
import time

from . import library
from .protocol import Timer, paired
from .shapes import (DECODE_DENSE_SHAPES, DECODE_MASKED_SHAPES, DECODE_NARROW_SHAPES, DECODE_QUICK, MASKED_MAX_M,
                     PREFILL_QUICK, PREFILL_TABLES, QUICK_SHAPES, TABLES, Shape, contiguous_m_indices, decode_masked_m,
                     decode_max_m, draw_masked_m, geomean, parse_mnk, uneven_m_indices)

BASE_ALIAS = "cugemm8_base"
VARIANTS = ("base", "cur", "base_aa")
# decode: the dense and narrow decode shapes (M <= 128); decode-masked: the decode section's masked MoE rows (its
# max_m and masked_m draw); uneven: the prefill section's uneven experts (issue 22)
SECTIONS = ("dense", "contiguous", "masked", "decode", "decode-masked", "uneven")
DEFAULT_SECTIONS = ("dense", "contiguous", "masked")


# ----------------------------------------------------------------------------- pure parts
def section_shapes(section: str, quick: bool) -> tuple[Shape, ...]:
    if section == "decode":
        return DECODE_QUICK["dense"] + DECODE_QUICK["narrow"] if quick else DECODE_DENSE_SHAPES + DECODE_NARROW_SHAPES
    if section == "uneven":
        return PREFILL_QUICK["uneven"] if quick else PREFILL_TABLES["uneven"]
    if section == "decode-masked":
        return DECODE_MASKED_SHAPES[:2] if quick else DECODE_MASKED_SHAPES
    return QUICK_SHAPES[section] if quick else TABLES[section]


def cases(sections=DEFAULT_SECTIONS, quick: bool = False, shapes: str | None = None) -> list[Shape]:
    """The sections' shapes, or with `shapes` ("MxNxK,..."), those dense GEMMs instead."""
    if shapes is not None:
        return [Shape("normal", 1, *parse_mnk(s)) for s in shapes.split(",") if s]
    return [s for sec in sections for s in section_shapes(sec, quick)]


def problem(shape: Shape, align: int) -> tuple:
    """(layout, rows the heuristic sees, groups, A rows) as the API plans the benchmark's call."""
    if shape.kind == "normal":
        return "normal", shape.m, 1, shape.m
    if shape.kind == "uneven":
        rows = uneven_m_indices(shape.groups, shape.m).size
        return "contiguous", rows, shape.groups, rows
    if shape.kind == "contiguous":
        _, seg = contiguous_m_indices(shape.groups, shape.m, align)
        return "contiguous", shape.groups * seg, shape.groups, shape.groups * seg
    if shape in DECODE_MASKED_SHAPES:
        return "masked", shape.m, shape.groups, decode_max_m(shape.m)
    return "masked", min(shape.m, MASKED_MAX_M), shape.groups, MASKED_MAX_M


def summarize(samples: dict[str, list[float]]) -> dict:
    """samples: per variant, seconds per round (one case). Medians in µs, cur/base and A/A ratios with
    the quartiles of the paired per-round ratios."""
    stats = paired(samples, "base")
    out = {f"{v}_us": stats[v]["median"] * 1e6 for v in samples}
    for name, key in (("cur", "ratio"), ("base_aa", "aa")):
        s = stats[name]
        out[key] = s["ratio"]
        out[f"{key}_q1"], out[f"{key}_q3"] = s["paired_q1"], s["paired_q3"]
        out[f"{key}_verdict"] = s["verdict"]
    return out


def case_line(label: str, cfgs: dict, row: dict) -> str:
    tiles = "/".join(sorted({f"{c['block_m']}x{c['block_n']}" for c in cfgs.values()}))
    same = "" if row.get("bitwise_equal", True) else "  DIFF"
    if "ratio" not in row:
        return f"{label:<22} {tiles:<16} {row.get('error', 'not timed')}{same}"
    mark = {"faster": "+", "slower": "-", "same": " "}[row["ratio_verdict"]]
    return (f"{label:<22} {tiles:<16} base {row['base_us']:9.1f} us  cur {row['cur_us']:9.1f} us  "
            f"cur/base {row['ratio']:.4f} [{row['ratio_q1']:.4f}, {row['ratio_q3']:.4f}]{mark}  "
            f"A/A {row['aa']:.4f} [{row['aa_q1']:.4f}, {row['aa_q3']:.4f}]{same}")


def overall(rows: list[dict]) -> dict:
    timed = [r for r in rows if "ratio" in r]
    return {"cases": len(rows), "timed": len(timed), "geomean_cur_over_base": geomean(r["ratio"] for r in timed),
            "geomean_aa": geomean(r["aa"] for r in timed),
            "slower": [r["label"] for r in timed if r["ratio_verdict"] == "slower"],
            "faster": [r["label"] for r in timed if r["ratio_verdict"] == "faster"],
            "diff": [r["label"] for r in rows if not r.get("bitwise_equal", True)]}


# ----------------------------------------------------------------------------- GPU
def make_inputs(cp, cg, shape: Shape, a_rows: int, align: int, rng):
    """a, TMA-aligned a_scale, b, b_scale, layout array (or None), out shape."""
    g, n, k = shape.groups, shape.n, shape.k
    lead = (a_rows,) if shape.kind != "masked" else (g, a_rows)
    x = rng.standard_normal((math.prod(lead), k), dtype=cp.float32)
    a, sa = cg.per_token_cast_to_fp8(x)
    a, sa = a.reshape(*lead, k), sa.reshape(*lead, sa.shape[-1])
    sa = cg.get_col_major_tma_aligned_tensor(sa)
    if shape.kind == "normal":
        b, sb = cg.per_block_cast_to_fp8(rng.standard_normal((n, k), dtype=cp.float32))
        return a, sa, b, sb, None, (a_rows, n)
    parts = [cg.per_block_cast_to_fp8(rng.standard_normal((n, k), dtype=cp.float32)) for _ in range(g)]
    b, sb = cp.stack([p[0] for p in parts]), cp.stack([p[1] for p in parts])
    if shape.kind == "contiguous":
        return a, sa, b, sb, cp.asarray(contiguous_m_indices(g, shape.m, align)[0]), (a_rows, n)
    if shape.kind == "uneven":
        return a, sa, b, sb, cp.asarray(uneven_m_indices(shape.groups, shape.m)), (a_rows, n)
    masked_m = decode_masked_m(g, shape.m) if shape in DECODE_MASKED_SHAPES else draw_masked_m(g, shape.m)
    return a, sa, b, sb, cp.asarray(masked_m), (g, a_rows, n)


def prepare(cp, cg, libs: dict, shape: Shape, sms: int, align: int, rng,
            out_format: str = "bfloat16") -> tuple[dict, dict, bool]:
    """Per variant: the bound call and its configuration; and whether the outputs (e4m3: and their scales) are
    bitwise equal."""
    layout, m, groups, a_rows = problem(shape, align)
    a, sa, b, sb, idx, out_shape = make_inputs(cp, cg, shape, a_rows, align, rng)
    fp8 = out_format != "bfloat16"
    calls, cfgs, outs = {}, {}, {}
    for name, lib in libs.items():
        plan = lib.choose(layout, m, shape.n, shape.k, groups, sms, *((out_format,) if fp8 else ()))
        # NaN bits (e4m3 0xFF, bf16 0xFFFF): an element left unwritten shows up as a difference
        out = cp.full(out_shape, 0xFF if fp8 else 0xFFFF, dtype=cp.uint8 if fp8 else cp.uint16)
        scale = None
        if fp8:
            scale = cg.empty_scale((*out_shape[:-1], -(-shape.n // 128)))
            scale.fill(float("nan"))
        calls[name] = lib.bind(plan.config, a, sa, b, sb, out, layout=idx, grid=plan.grid, out_scale=scale)
        cfgs[name] = {**dataclasses.asdict(plan.config), "grid": plan.grid}
        outs[name] = (out, scale)
        calls[name]()
    cp.cuda.get_current_stream().synchronize()

    def equal(x, y) -> bool:
        return x is None or bool(cp.array_equal(x.view(cp.uint32) if x.dtype == cp.float32 else x,
                                                y.view(cp.uint32) if y.dtype == cp.float32 else y))

    same = all(equal(o, outs["base"][0]) and equal(s, outs["base"][1]) for o, s in outs.values())
    return calls, cfgs, same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    library.add_base_argument(ap)
    ap.add_argument("--rounds", type=int, default=20, help="rounds (samples per case and variant)")
    ap.add_argument("--sections", default=",".join(DEFAULT_SECTIONS))
    ap.add_argument("--quick", action="store_true", help="the benchmark's quick subset of shapes")
    ap.add_argument("--shapes", default=None, help="dense GEMMs MxNxK, comma-separated, in place of the sections")
    ap.add_argument("--match", default=None, help="a regular expression: only the cases whose labels it finds")
    ap.add_argument("--out-dtype", default="bfloat16", choices=("bfloat16", "float8_e4m3", "float8_e4m3_ue8m0"),
                    help="the output every call writes (e4m3: with its 1x128 scales)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    if set(sections) - set(SECTIONS):
        ap.error(f"sections must be some of {list(SECTIONS)}")
    try:
        shapes = cases(sections, args.quick, args.shapes)
    except ValueError as exc:
        ap.error(str(exc))
    import cupy as cp

    import cugemm8

    from .tune import gpu_props, provenance, write

    t0 = time.perf_counter()
    libs = {"base": library.load(args.base, BASE_ALIAS), "cur": library.current()}
    print(f"base: {libs['base'].source_dir()}; cur: {libs['cur'].source_dir()}", flush=True)
    sms, align = cugemm8.get_num_sms(), cugemm8.get_m_alignment_for_contiguous_layout()
    rng = cp.random.default_rng(20261122)
    fns, rows, cfgs = {}, [], {}
    for shape in shapes:
        if args.match and not re.search(args.match, shape.label):
            continue
        row = {"label": shape.label, **dataclasses.asdict(shape)}
        try:
            calls, cfgs[shape.label], row["bitwise_equal"] = prepare(cp, cugemm8, libs, shape, sms, align, rng,
                                                                     args.out_dtype)
            row["configs"] = cfgs[shape.label]
            for v in VARIANTS:
                fns[(shape.label, v)] = calls["base" if v == "base_aa" else v]
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rows.append(row)
    print(f"{len(rows)} cases prepared in {time.perf_counter() - t0:.0f} s; {args.rounds} rounds", flush=True)
    times = Timer().interleaved(fns, args.rounds, rotate=True)
    for row in rows:
        if "error" not in row:
            row["samples_s"] = {v: times[(row["label"], v)] for v in VARIANTS}
            row.update(summarize(row["samples_s"]))
        print(case_line(row["label"], cfgs.get(row["label"], {}), row), flush=True)
    summ = overall(rows)
    print(f"geomean cur/base {summ['geomean_cur_over_base'] or float('nan'):.4f}, A/A "
          f"{summ['geomean_aa'] or float('nan'):.4f}; slower {summ['slower']}; faster {summ['faster']}"
          + (f"; DIFF {summ['diff']}" if summ["diff"] else ""))
    if args.out:
        write(args.out, {"gpu": gpu_props(), **provenance(), "base": os.path.abspath(args.base),
                         "rounds": args.rounds, "out_dtype": args.out_dtype, "variants": VARIANTS, "summary": summ,
                         "rows": rows})
    return 1 if summ["diff"] else 0


if __name__ == "__main__":
    sys.exit(main())

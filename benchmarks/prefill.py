"""The prefill section (issue 22): cugemm8 against DeepGEMM, timed side by side in one run, where prefill
spends its time.

* dense: M in {2048, 8192, 16384} x the dense table's six (N, K); each row is the dense table's row
  (tables.bench_dense_shape: cugemm8, cuBLASLt blockwise and per-tensor, DeepGEMM, interleaved);
* uneven: the contiguous layout with G in {8, 16, 32, 64} experts of uneven rows (shapes.uneven_expert_rows:
  0.5-1.5 x the mean, some experts empty), every segment padded to 128 rows with m_indices = -1, cugemm8's
  m_grouped_matmul_contiguous against DeepGEMM's contiguous GEMM on the same operands, and the dense kernel on
  the same total rows beside them.

The score is DeepGEMM's time / cugemm8's per row; the summary gives its geometric mean per table, the lowest
ratio and its shape, the rows below 1.0, and issue 22's targets. Importing this module needs no GPU."""
from __future__ import annotations

from .env import Env, calc_diff_gpu, quantize_a
from .report import config_text, counted_label, fmt, row_label, status_text, us
from .shapes import (PREFILL_ALIGN, Shape, contiguous_layout, gemm_flops, geomean, masked_decode_bytes,
                     prefill_shapes, ratio, uneven_expert_rows)
from .tables import base_row, bench_dense_shape, contiguous_candidates, finish_row, measure

TARGET_GEOMEAN = 1.05   # issue 22: DeepGEMM time / cugemm8 time, geometric mean over each table
TARGET_MIN_UNEVEN = 1.0  # issue 22: and no uneven shape below this
TABLES = ("dense", "uneven")


# ----------------------------------------------------------------------------- rows
def bench_prefill_dense(env: Env, shape: Shape, reps: int) -> dict:
    row = bench_dense_shape(env, shape, reps)
    row["table"] = "dense"
    return row


def bench_uneven_shape(env: Env, shape: Shape, reps: int) -> dict:
    """cugemm8's and DeepGEMM's contiguous GEMMs (and the dense kernel on all rows) on G experts of uneven rows.
    The check covers the valid rows of the non-empty experts only; FLOPs count those rows, and the bytes their
    A and D and the weights of the non-empty experts (shapes.masked_decode_bytes)."""
    cp, cg = env.cp, env.cg
    g, n, k = shape.groups, shape.n, shape.k
    rows = uneven_expert_rows(g, shape.m)
    idx, offsets = contiguous_layout(rows, PREFILL_ALIGN)
    total, valid = int(idx.size), sum(rows)
    row = {**base_row(shape), **env.plan("contiguous", total, n, k, g), "table": "uneven", "align": PREFILL_ALIGN,
           "expert_rows": rows, "segment_offsets": offsets, "total_rows": total, "valid_rows": valid,
           "empty_experts": sum(1 for r in rows if r == 0), "bytes": masked_decode_bytes(rows, n, k),
           "dense_config": env.plan("normal", total, n, k, 1).get("config")}
    x = env.randn((total, k))
    a, sa, sa_tma, row["a_scale_layout"] = quantize_a(cg, x)
    b = cp.empty((g, n, k), dtype=cp.uint8)
    sb = cp.empty((g, -(-n // 128), -(-k // 128)), dtype=cp.float32)
    refs = []
    for i in range(g):   # one expert's float32 weights at a time (64 x 16384 x 5120 at once would be 21 GB)
        w = env.randn((n, k))
        b[i], sb[i] = cg.per_block_cast_to_fp8(w)
        if rows[i]:
            refs.append((offsets[i], rows[i], x[offsets[i]:offsets[i] + rows[i]] @ w.T))
    del x, w
    m_indices = cp.asarray(idx)

    def diff_of(y):
        return calc_diff_gpu(cp, [(y[o:o + r], ref) for o, r, ref in refs])

    entries = measure(env, contiguous_candidates(env, a, sa, sa_tma, b, sb, m_indices, diff_of), reps,
                      gemm_flops(valid, n, k), row["bytes"])
    row = finish_row(row, entries)
    row["dense_time_over_contiguous"] = ratio(entries.get("dense_same_mnk", {}).get("median_s"),
                                              entries.get("cugemm8", {}).get("median_s"))
    return row


def prefill_row(env: Env, table: str, shape: Shape, reps: int) -> dict:
    """One measured row, or the row's error (the section goes on); GPU memory freed after it."""
    try:
        return bench_uneven_shape(env, shape, reps) if table == "uneven" else bench_prefill_dense(env, shape, reps)
    except Exception as exc:
        return {**base_row(shape), "table": table, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        env.free()


# ----------------------------------------------------------------------------- summary
def cugemm8_ok(row: dict) -> bool:
    return "error" not in row and row.get("results", {}).get("cugemm8", {}).get("status") == "ok"


def table_summary(rows: list[dict], table: str) -> dict:
    """DeepGEMM time / cugemm8 time over one table: geomean, minimum and its shape, rows below 1.0, and the
    target (met: None unless every row of the table has a ratio)."""
    rs = [r for r in rows if r.get("table") == table]
    scored = [r for r in rs if r.get("ratio_deepgemm")]
    worst = min(scored, key=lambda r: r["ratio_deepgemm"], default=None)
    gm = geomean(r["ratio_deepgemm"] for r in scored)
    below = [row_label(r) for r in scored if r["ratio_deepgemm"] < 1.0]
    s = {"rows": len(rs), "rows_compared": len(scored), "geomean_deepgemm_over_cugemm8": gm,
         "min_deepgemm_over_cugemm8": worst and worst["ratio_deepgemm"], "min_shape": worst and row_label(worst),
         "rows_below_1": len(below), "shapes_below_1": below, "target_geomean": TARGET_GEOMEAN,
         "cugemm8_not_ok": [row_label(r) for r in rs if not cugemm8_ok(r)]}
    if table == "uneven":
        s["target_min"] = TARGET_MIN_UNEVEN
        s["geomean_dense_time_over_contiguous"] = geomean(r.get("dense_time_over_contiguous") for r in rs)
    complete = bool(rs) and len(scored) == len(rs)
    met = gm is not None and gm >= TARGET_GEOMEAN
    if table == "uneven":
        met = met and worst["ratio_deepgemm"] >= TARGET_MIN_UNEVEN
    s["target_met"] = met if complete else None
    return s


def prefill_summary(rows: list[dict]) -> dict:
    return {table: table_summary(rows, table) for table in TABLES}


def prefill_summary_lines(summary: dict) -> list[str]:
    """The prefill section's summary (prefill_summary) with issue 22's targets, one line per table."""
    lines = []
    for table in TABLES:
        s = summary.get(table)
        if not s:
            continue
        target = f">= {s['target_geomean']:.2f}x geomean" + (
            f", no shape below {s['target_min']:.2f}x" if "target_min" in s else "")
        verdict = {True: "met", False: "NOT met", None: f"not assessed ({s['rows_compared']} of {s['rows']} rows"
                                                         " compared)"}[s["target_met"]]
        line = f"prefill {table}: no DeepGEMM/cugemm8 ratio ({s['rows']} rows)"
        if s["rows_compared"]:
            line = (f"prefill {table}: DeepGEMM/cugemm8 time geomean {s['geomean_deepgemm_over_cugemm8']:.3f}x over"
                    f" {s['rows_compared']} of {s['rows']} rows, min {s['min_deepgemm_over_cugemm8']:.3f}x at"
                    f" {s['min_shape']}, {s['rows_below_1']} below 1.0")
        if s.get("geomean_dense_time_over_contiguous"):
            line += f"; dense kernel on the same rows / contiguous {s['geomean_dense_time_over_contiguous']:.2f}x"
        line += f"; issue 22 target {target}: {verdict}"
        if s["cugemm8_not_ok"]:
            line += f"; cugemm8 wrong/error on {', '.join(s['cugemm8_not_ok'])}"
        lines.append(line)
    return lines


# ----------------------------------------------------------------------------- printing
def row_text(row: dict) -> str:
    label = counted_label(row, "empty_experts")
    if "error" in row:
        return f"{label:>42s} error: {row['error']}"
    res = row["results"]
    cg, dg = res.get("cugemm8", {}), res.get("deepgemm", {})
    line = (f"{label:>42s} {config_text(row):>15s} {fmt(cg.get('diff'), '.1e', 8)}"
            f" {fmt(us(cg.get('median_s')), '.1f', 8)} {fmt(cg.get('tflops'), '.0f')}"
            f" | {fmt(us(dg.get('median_s')), '.1f', 8)} {fmt(dg.get('tflops'), '.0f')}"
            f" {fmt(row.get('ratio_deepgemm'), '.3f', 6)}")
    if row.get("table") == "uneven":
        line += (f" | {fmt(us(res.get('dense_same_mnk', {}).get('median_s')), '.1f', 8)}"
                 f" {fmt(row.get('dense_time_over_contiguous'), '.2f', 6)}")
    else:
        line += f" | {fmt(row.get('ratio_blockwise'), '.2f', 6)}"
    notes = [f"{name}:{status_text(e)}" for name, e in res.items() if status_text(e) and name != "dense_same_mnk"]
    return line + ("  " + "; ".join(notes) if notes else "")


def print_row(row: dict, previous: dict | None) -> None:
    """One row as soon as it is measured (a long run that is cut short still shows what it measured)."""
    if previous is None or previous.get("table") != row.get("table"):
        head = (f"{'shape':>42s} {'config':>15s} {'diff':>8s} {'cg µs':>8s} {'TFLOPS':>7s} | {'DG µs':>8s}"
                f" {'TFLOPS':>7s} {'DG/cg':>6s}")
        head += f" | {'dense µs':>8s} {'d/cont':>6s}" if row.get("table") == "uneven" else f" | {'blk/cg':>6s}"
        print(f"-- {row.get('table')}\n{head}", flush=True)
    print(row_text(row), flush=True)


def print_head() -> None:
    print("\n== prefill (median of flushed, event-timed calls, interleaved; DG/cg = DeepGEMM time / cugemm8 time;"
          " TFLOPS over the valid rows) ==\nuneven: rows per expert 0.5-1.5 x the mean, some experts empty, segments"
          f" padded to {PREFILL_ALIGN} rows; d/cont = the dense kernel's time on the same rows / the contiguous time;"
          " blk/cg = cuBLASLt blockwise time / cugemm8 time", flush=True)


def run_prefill(env: Env, args) -> dict:
    """The section. `args.checkpoint(partial)`, when the caller sets it, is called after every row."""
    if not hasattr(env.cg, "m_grouped_matmul_contiguous"):
        print("\n== prefill ==\nskipped: cugemm8.m_grouped_matmul_contiguous does not exist")
        return {"skipped": "cugemm8.m_grouped_matmul_contiguous does not exist"}
    checkpoint = getattr(args, "checkpoint", None) or (lambda partial: None)
    print_head()
    rows = []
    with env.stream:
        for table, shape in prefill_shapes(args.quick):
            rows.append(prefill_row(env, table, shape, args.reps))
            print_row(rows[-1], rows[-2] if len(rows) > 1 else None)
            checkpoint({"rows": rows, "partial": True})
    res = {"rows": rows, "summary": prefill_summary(rows)}
    if env.deepgemm is None:
        print(f"DeepGEMM: {getattr(env, 'deepgemm_note', 'not loaded')} (no ratios)")
    for line in prefill_summary_lines(res["summary"]):
        print(line)
    return res

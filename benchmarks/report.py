"""The benchmark's output: tables and summary on stdout, the JSON, the PNG chart, and the run's
provenance (GPU, clocks through nvidia-smi, versions, git commit)."""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
from pathlib import Path

import numpy as np

from .protocol import FLUSH_BYTES, SETTLE_S, WARMUP_CALLS
from .shapes import ANCHOR_GPU, ANCHOR_SOURCE, SEED, Shape, geomean

DIFF_LIMIT = 1e-3   # env.DIFF_LIMIT (repeated: this module imports no GPU code)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "gpu"


def fmt(value, spec: str = ".1f", width: int = 7) -> str:
    text = "-" if value is None else format(value, spec)
    return text.rjust(width)


def us(seconds: float | None) -> float | None:
    """Seconds as microseconds (None stays None)."""
    return None if seconds is None else seconds * 1e6


# ----------------------------------------------------------------------------- printing
def config_text(row: dict) -> str:
    c = row.get("config")
    if not c:
        return "?"
    if c.get("kernel") == "small_m":
        return (f"small-M {16 * c['row_tiles']}x{8 * c['token_tiles']} w{c['warps']} d{c['depth']}"
                + (f" k/{c['split']}" if c["split"] > 1 else ""))
    split = c.get("split_k", 1)
    pair = " pB" if c.get("share_b") else " pA" if c.get("cluster", 1) > 1 else ""  # CTA pairs sharing B or A
    return f"{c['block_m']}x{c['block_n']} s{c['stages']} w{c['num_math_wg']}" + (f" k/{split}" if split > 1 else "") + pair


def row_label(row: dict) -> str:
    if "label" in row:   # sections whose rows name themselves (wgrad)
        return row["label"]
    return Shape(row["kind"], row["groups"], row["m"], row["n"], row["k"]).label


def counted_label(row: dict, empty_key: str) -> str:
    """row_label, with a grouped row's valid rows and its empty groups (row[empty_key]) where it has them."""
    label = row_label(row)
    if "valid_rows" in row:
        label += f" ({row['valid_rows']} rows, {row[empty_key]} empty)"
    return label


def status_text(entry: dict) -> str:
    status = entry.get("status", "-")
    return "" if status == "ok" else (" WRONG" if status == "wrong" else f" {status}")


def print_table(section: str, rows: list[dict], env) -> None:
    dense = section == "dense"
    print(f"\n== {section} (median of flushed, event-timed calls; ratio = peer time / cugemm8 time) ==")
    head = f"{'shape':>22s} {'config':>15s} {'diff':>8s} {'µs':>8s} {'TFLOPS':>7s} {'GB/s':>7s}"
    if dense:
        head += f" | {'blk µs':>7s} {'blk/cg':>6s} | {'pt µs':>7s} {'pt/cg':>6s}"
    print(head + f" | {'DG-H200':>7s} {'cg/DG':>6s}")
    for row in rows:
        print(row_text(row, dense))
    if dense and env.peers is None:
        print(f"peers: {env.peers_note}")
    print("DG-H200: DeepGEMM 8dfa329 TFLOPS measured on an NVIDIA H200 (2026-11-22); cg/DG = cugemm8 "
          "TFLOPS / that, meaningful only when this GPU is an H200" + ("" if env.is_anchor_gpu else " (it is not)"))


def row_text(row: dict, dense: bool) -> str:
    label = row_label(row)
    if "error" in row:
        return f"{label:>22s} error: {row['error']}"
    res = row["results"]
    cg = res.get("cugemm8", {})
    us = lambda e: e.get("median_s") and e["median_s"] * 1e6  # noqa: E731
    line = (f"{label:>22s} {config_text(row):>15s} {fmt(cg.get('diff'), '.1e', 8)} {fmt(us(cg), '.1f', 8)}"
            f" {fmt(cg.get('tflops'), '.0f')} {fmt(cg.get('gbps'), '.0f')}")
    if dense:
        bw, pt = res.get("cublaslt_blockwise", {}), res.get("cublaslt_per_tensor", {})
        line += (f" | {fmt(us(bw), '.1f')} {fmt(row['ratio_blockwise'], '.2f', 6)}"
                 f" | {fmt(us(pt), '.1f')} {fmt(row['ratio_per_tensor'], '.2f', 6)}")
    line += f" | {fmt(row['deepgemm_h200_tflops'], '.0f')} {fmt(row['vs_deepgemm_h200'], '.2f', 6)}"
    if row.get("ratio_deepgemm") is not None:
        line += f" | DeepGEMM {fmt(us(res['deepgemm']), '.1f')} µs, DG/cg {row['ratio_deepgemm']:.2f}"
    if row.get("dense_time_over_contiguous") is not None:
        line += f" | dense same MNK {fmt(us(res['dense_same_mnk']), '.1f')} µs, contiguous/dense TFLOPS " \
                f"{row['dense_time_over_contiguous']:.2f}"
    if row.get("masked_one_group_over_dense") is not None:
        line += f" | one group ({row['one_group_rows']} rows): masked {fmt(us(res['masked_one_group']), '.1f')} µs " \
                f"/ dense {fmt(us(res['dense_one_group']), '.1f')} µs = {row['masked_one_group_over_dense']:.2f}"
    if row.get("vs_deepgemm_h200_at_anchor_rows") is not None:
        line += f" | at DG's {sum(row['anchor_masked_m'])} rows: {row['tflops_at_anchor_rows']:.0f} TFLOPS, " \
                f"cg/DG {row['vs_deepgemm_h200_at_anchor_rows']:.2f}"
        if row.get("ratio_deepgemm_at_anchor_rows") is not None:
            line += f", DeepGEMM same run {fmt(us(res['deepgemm_at_anchor_rows']), '.1f')} µs, " \
                    f"DG/cg {row['ratio_deepgemm_at_anchor_rows']:.2f}"
    a = row.get("alone")
    if a:
        line += f" | alone (as the anchors): {a['cugemm8_tflops']:.0f} TFLOPS, cg/DG-H200 {fmt(a['cugemm8_over_anchor'], '.2f', 0)}"
        if a["deepgemm_tflops"]:
            line += (f"; DeepGEMM alone {a['deepgemm_tflops']:.0f} TFLOPS = {a['deepgemm_over_anchor']:.2f} of its"
                     f" anchor, DG/cg {a['deepgemm_over_cugemm8_time']:.2f}")
    notes = [f"{name}:{status_text(e)}" for name, e in res.items() if status_text(e) and name not in
             ("dense_same_mnk", "masked_one_group", "dense_one_group", "masked_at_anchor_rows",
              "deepgemm_at_anchor_rows")]
    return line + ("  " + "; ".join(notes) if notes else "")


def print_jit(compiled: dict, cold: dict, warm: dict) -> None:
    print("\n== JIT: cold NVRTC compile per configuration (compile_cubin(render(cfg)) in a new process, "
          "CUDA compute cache off, no SASS patch) ==")
    if "error" in compiled:
        print(f"error: {compiled['error']}")
    else:
        print(f"NVRTC start-up (first, empty kernel): {compiled['nvrtc_init_s']:.2f} s")
    for r in compiled.get("compiles", []):
        c = r["config"]
        name = f"{c['block_m']}x{c['block_n']} s{c['stages']} n{c['n']} k{c['k']}"
        print(f"{name:28s} " + (f"{r['compile_s']:.2f} s  {r['cubin_bytes']} B  ({', '.join(r['shapes'])})"
                                if "compile_s" in r else f"error: {r.get('error')}"))
    for what, r in (("empty cache", cold), ("warm disk cache", warm)):
        if "error" in r:
            print(f"first call, new process, {what}: error: {r['error']}")
        else:
            print(f"first call, new process, {what}: {r['first_call_s'] * 1e3:.1f} ms "
                  f"(second call {r['second_call_s'] * 1e3:.2f} ms, import {r['import_s'] * 1e3:.0f} ms)")


def table_summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if "results" in r]
    bw = [r["ratio_blockwise"] for r in ok if r["ratio_blockwise"]]
    pt = [r["ratio_per_tensor"] for r in ok if r["ratio_per_tensor"]]
    dg = [r["vs_deepgemm_h200"] for r in ok if r["vs_deepgemm_h200"]]
    dg_rows = [r["vs_deepgemm_h200_at_anchor_rows"] for r in ok if r.get("vs_deepgemm_h200_at_anchor_rows")]
    live = [r["ratio_deepgemm"] for r in ok if r.get("ratio_deepgemm")]
    slowest = min((r for r in ok if r.get("ratio_deepgemm")), key=lambda r: r["ratio_deepgemm"], default=None)
    worst = min((r for r in ok if r["ratio_blockwise"]), key=lambda r: r["ratio_blockwise"], default=None)
    alone = [r["alone"] for r in ok if r.get("alone")]
    worst_alone = min((r for r in ok if r.get("alone") and r["alone"]["cugemm8_over_anchor"]),
                      key=lambda r: r["alone"]["cugemm8_over_anchor"], default=None)
    bad = [row_label(r) for r in rows if "error" in r or r.get("results", {}).get("cugemm8", {}).get("status") != "ok"]
    return {"geomean_blockwise_over_cugemm8": geomean(bw), "geomean_per_tensor_over_cugemm8": geomean(pt),
            "min_blockwise_over_cugemm8": worst and worst["ratio_blockwise"],
            "min_blockwise_shape": worst and row_label(worst),
            "geomean_cugemm8_over_deepgemm_h200": geomean(dg), "rows_compared": len(bw),
            "geomean_cugemm8_over_deepgemm_h200_at_anchor_rows": geomean(dg_rows),
            "geomean_deepgemm_over_cugemm8": geomean(live), "rows_compared_deepgemm": len(live),
            "min_deepgemm_over_cugemm8": slowest and slowest["ratio_deepgemm"],
            "min_deepgemm_shape": slowest and row_label(slowest),
            "geomean_alone_cugemm8_over_deepgemm_h200": geomean(a["cugemm8_over_anchor"] for a in alone),
            "min_alone_cugemm8_over_deepgemm_h200": worst_alone and worst_alone["alone"]["cugemm8_over_anchor"],
            "min_alone_shape": worst_alone and row_label(worst_alone),
            "geomean_alone_deepgemm_over_deepgemm_h200": geomean(a["deepgemm_over_anchor"] for a in alone),
            "geomean_alone_deepgemm_over_cugemm8": geomean(a["deepgemm_over_cugemm8_time"] for a in alone),
            "cugemm8_not_ok": bad}


def print_summary(results: dict, info: dict, json_path: Path) -> None:
    print(f"\n== summary: {info.get('gpu')} ({info.get('sms')} SMs), reps={info['reps']} ==")
    on_anchor_gpu = info.get("gpu") == ANCHOR_GPU
    for section in ("dense", "contiguous", "masked"):
        res = results.get(section)
        if res is None:
            continue
        s = res.get("summary")
        if s is None:
            print(f"{section}: " + (res.get("skipped") and f"skipped: {res['skipped']}" or f"error: {res.get('error')}"))
            continue
        line = f"{section}:"
        if section == "dense":
            line += (f" cuBLASLt-blockwise/cugemm8 geomean {fmt(s['geomean_blockwise_over_cugemm8'], '.2f', 0)}x"
                     f" (min {fmt(s['min_blockwise_over_cugemm8'], '.2f', 0)}x at {s['min_blockwise_shape']}),"
                     f" per-tensor/cugemm8 geomean {fmt(s['geomean_per_tensor_over_cugemm8'], '.2f', 0)}x,")
        line += (f" cugemm8/DeepGEMM-H200-anchor geomean {fmt(s['geomean_cugemm8_over_deepgemm_h200'], '.2f', 0)}x"
                 + ("" if on_anchor_gpu else " (anchor is an H200: meaningful only on an H200)"))
        if s.get("geomean_cugemm8_over_deepgemm_h200_at_anchor_rows"):
            line += f"; at DeepGEMM's valid rows {s['geomean_cugemm8_over_deepgemm_h200_at_anchor_rows']:.2f}x"
        if s.get("geomean_deepgemm_over_cugemm8"):
            line += (f"; DeepGEMM (same run)/cugemm8 time geomean {s['geomean_deepgemm_over_cugemm8']:.2f}x"
                     f" (min {s['min_deepgemm_over_cugemm8']:.2f}x at {s['min_deepgemm_shape']})")
        if s.get("geomean_alone_cugemm8_over_deepgemm_h200"):
            line += (f"; timed alone as the anchors were: cugemm8/DeepGEMM-H200-anchor geomean"
                     f" {s['geomean_alone_cugemm8_over_deepgemm_h200']:.2f}x (min {s['min_alone_cugemm8_over_deepgemm_h200']:.2f}x"
                     f" at {s['min_alone_shape']}), DeepGEMM alone/its anchor "
                     f"{fmt(s['geomean_alone_deepgemm_over_deepgemm_h200'], '.2f', 0)}x")
        if s["cugemm8_not_ok"]:
            line += f"; cugemm8 wrong/error on {', '.join(s['cugemm8_not_ok'])}"
        print(line)
    for name, res in results.get("wgrad", {}).items():
        s = res.get("summary") if isinstance(res, dict) else None
        if s:
            print(f"{name} weight gradient: DeepGEMM (same run)/cugemm8 time geomean "
                  f"{fmt(s['geomean_deepgemm_over_cugemm8'], '.3f', 0)}x, min {fmt(s['min_deepgemm_over_cugemm8'], '.3f', 0)}x"
                  f" over {s['with_deepgemm']} of {s['shapes']} shapes; cugemm8 all ok: {s['all_cugemm8_ok']}")
    pre = results.get("prefill")
    if pre is not None and "summary" in pre:
        from .prefill import prefill_summary_lines   # here: prefill imports this module

        print("\n".join(prefill_summary_lines(pre["summary"])))
    elif pre is not None:
        print("prefill: " + (f"skipped: {pre['skipped']}" if "skipped" in pre else f"error: {pre.get('error')}"))
    dec = results.get("decode")
    if dec is not None:
        print(decode_summary_line(dec))
    ov = results.get("overhead", {}).get("rows")
    if ov:
        calls = next(iter(ov.values())).get("calls", "?")
        print(f"overhead µs/call (wall, {calls} back-to-back calls): "
              + ", ".join(f"{k} {fmt(v.get('wall_us'), '.1f', 0)}" for k, v in ov.items()))
    js = results.get("jit", {}).get("summary")
    if js:
        print(f"jit: compile {fmt(js['compile_mean_s'], '.2f', 0)} s/config mean (max "
              f"{fmt(js['compile_max_s'], '.2f', 0)} s, {js['compiled']}/{js['configs']} configs, NVRTC start-up "
              f"{fmt(js['nvrtc_init_s'], '.2f', 0)} s); first call in a new process: warm cache "
              f"{fmt(js['first_call_warm_cache_ms'], '.1f', 0)} ms, empty cache "
              f"{fmt(js['first_call_cold_cache_ms'], '.0f', 0)} ms")
    print(f"json: {json_path}")


def decode_summary_line(res: dict) -> str:
    s = res.get("summary")
    if s is None:
        return f"decode: error: {res.get('error')}"
    line = (f"decode: roofline fraction geomean dense {fmt(s['roofline_geomean_dense'], '.2f', 0)}, narrow "
            f"{fmt(s['roofline_geomean_narrow'], '.2f', 0)}, masked {fmt(s['roofline_geomean_masked'], '.2f', 0)}"
            f" (min {fmt(s['roofline_min'], '.2f', 0)} at {s['roofline_min_shape']}); DeepGEMM/cugemm8 time"
            f" geomean dense {fmt(s['deepgemm_over_cugemm8_geomean_dense'], '.2f', 0)}x; CUDA graph"
            f" {fmt(s['graph_us_per_call'], '.2f', 0)} µs/call")
    if s["cugemm8_not_ok"]:
        line += f"; cugemm8 wrong/error on {', '.join(s['cugemm8_not_ok'])}"
    return line


# ----------------------------------------------------------------------------- run info, JSON, chart
def nvidia_smi(query: str) -> list[dict] | None:
    try:
        proc = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in proc.stdout.strip().splitlines() if line.strip()]
    if proc.returncode != 0 or len(lines) < 2:
        return None
    keys = [h.strip() for h in lines[0].split(",")]
    return [dict(zip(keys, (v.strip() for v in line.split(",")))) for line in lines[1:]]


SMI_CLOCKS = "name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu"


def package_version(name: str) -> str | None:
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:
        return None


def git_info() -> dict | None:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "dirty_files": len(dirty.stdout.splitlines())}


def run_info(env, args) -> dict:
    cp = env.cp
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    info = {"gpu": name, "sms": props["multiProcessorCount"], "cugemm8_num_sms": env.num_sms,
            "compute_capability": f"{props['major']}.{props['minor']}", "l2_bytes": props.get("l2CacheSize"),
            "memory_bytes": props.get("totalGlobalMem"), "device": dev.id,
            "driver_api_version": cp.cuda.runtime.driverGetVersion(),
            "cuda_runtime_version": cp.cuda.runtime.runtimeGetVersion(),
            "utc_start": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "reps": args.reps, "quick": args.quick, "sections": args.sections, "peers": env.peers_note,
            "deepgemm": env.deepgemm_note,
            "protocol": {"flush_bytes": FLUSH_BYTES, "statistic": "median", "diff_limit": DIFF_LIMIT,
                         "warmup_calls": WARMUP_CALLS, "settle_s": SETTLE_S, "seed": SEED,
                         "alone": "grouped shapes: cugemm8 and DeepGEMM also timed each by itself "
                                  "(Timer.alone), as the anchors were",
                         "timer": "CUDA events around one call",
                         "cugemm8_call": "pre-aligned a_scale (get_col_major_tma_aligned_tensor), out= preallocated"},
            "anchors": {"gpu": ANCHOR_GPU, "source": ANCHOR_SOURCE},
            "smi_driver": nvidia_smi("driver_version"), "git": git_info()}
    info["versions"] = versions(env)
    return info


def versions(env) -> dict:
    out = {"python": platform.python_version(), "numpy": np.__version__, "cupy": env.cp.__version__,
           "cuda_bindings": package_version("cuda-bindings"), "ml_dtypes": package_version("ml_dtypes"),
           "cugemm8": getattr(env.cg, "__version__", None)}
    try:
        out["nvrtc"] = ".".join(map(str, env.lib.nvrtc_version()))
    except Exception as exc:
        out["nvrtc"] = f"unknown ({exc})"
    if env.peers is not None:
        torch = env.peers.torch
        out.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
    return out



def write_json(path: Path, info: dict, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"info": info, "results": results}, indent=1, default=str))
    os.replace(tmp, path)


CHART_SERIES = (("cugemm8", "cugemm8"), ("cublaslt_blockwise", "cuBLASLt blockwise"),
                ("cublaslt_per_tensor", "cuBLASLt per-tensor"), ("deepgemm_h200", "DeepGEMM (H200 anchor)"))


def chart_values(row: dict, key: str) -> float:
    if key == "deepgemm_h200":
        return row.get("deepgemm_h200_tflops") or 0.0
    e = row.get("results", {}).get(key, {})
    return (e.get("tflops") or 0.0) if e.get("status") == "ok" else 0.0


def write_chart(path: Path, results: dict, title: str) -> str | None:
    rows = [r for s in ("dense", "contiguous", "masked") for r in results.get(s, {}).get("rows", [])]
    return bar_chart(path, rows, CHART_SERIES, chart_values, "TFLOPS (2MNK / median time)", title, 0.75)


DECODE_CHART_SERIES = (("cugemm8", "cugemm8"), ("deepgemm", "DeepGEMM (same run)"),
                       ("cublaslt_per_tensor", "cuBLASLt per-tensor"))


def decode_chart_value(row: dict, key: str) -> float:
    e = row.get("results", {}).get(key, {})
    return (e.get("roofline_fraction") or 0.0) if e.get("status") == "ok" else 0.0


def write_decode_chart(path: Path, rows: list[dict], title: str) -> str | None:
    """The decode section's roofline fraction per row and implementation (1 = the memory floor)."""
    return bar_chart(path, rows, DECODE_CHART_SERIES, decode_chart_value,
                     "fraction of the memory floor ((bytes / copy bw + empty kernel) / time)", title, 0.3)


WGRAD_CHART_SERIES = (("cugemm8", "cugemm8"), ("deepgemm", "DeepGEMM (same run)"))


def write_wgrad_chart(path: Path, results: dict, title: str) -> str | None:
    """The training section's TFLOPS per row: the weight gradient and its k-grouped form."""
    rows = [r for s in ("wgrad", "k_grouped") for r in results.get(s, {}).get("rows", []) if "label" in r]
    return bar_chart(path, rows, WGRAD_CHART_SERIES, chart_values, "TFLOPS (2MNK / median time)", title, 0.5)


def bar_chart(path: Path, rows: list[dict], series, value, ylabel: str, title: str, inch_per_row: float) -> str | None:
    """Grouped bars, one group per row and one bar per (key, name) in `series` at value(row, key); None on
    success, else why there is no chart."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"matplotlib unavailable: {exc}"
    if not rows:
        return "no rows"
    labels = [row_label(r) for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, inch_per_row * len(rows)), 5))
    width = 0.8 / len(series)
    for i, (key, name) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [value(r, key) for r in rows], width, label=name, hatch="//" if key == "deepgemm_h200" else None)
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None

"""Every GEMM kernel configuration under compute-sanitizer: memcheck, racecheck, synccheck.

    python -m benchmarks.sanitize [--out sanitize.json] [--tools memcheck,racecheck,synccheck] [--budget 280]
    python -m benchmarks.sanitize --list [--num-sms 132]      (the cases, no GPU needed with --num-sms)

Cases: one small problem for every configuration the benchmark shapes pick (shapes.py's tables), forced
through the public API with
the benchmark's configuration but a small M (the configuration fixes N, K and the groups, not M);
plus the edge shapes of sanitize_cases.py, through the normal heuristic or a forced tile: M = 1, M not a multiple of the block, N = 8 and
K = 16, masked groups empty / full / out of range, contiguous with whole padding blocks and
out-of-range expert ids; the weight gradients (dense and k-grouped). racecheck gets the smallest M (1 row, 2 rows
per masked group).

Each tool is one subprocess, `compute-sanitizer --tool T --error-exitcode 1 python -m
benchmarks.sanitize_child CASES`, which runs all the cases (CuPy's memory pool off, so every array is its own allocation and memcheck
sees its exact bounds). The kernels are compiled beforehand, in parallel, into the JIT's disk cache.
A summary line per tool gives the count from its "ERROR SUMMARY: N errors" line; the JSON (--out)
has that, the exit status, the time and the log path. Exit status 1 on any error, failed case,
missing summary or timeout (--budget seconds are shared among the tools).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import library, shapes
from .sanitize_cases import EDGE_CASES, contiguous_ids

REPO = Path(__file__).resolve().parents[1]

TOOLS = ("memcheck", "racecheck", "synccheck")
BUDGET_SHARE = {"memcheck": 0.35, "racecheck": 0.42, "synccheck": 0.23}
# memcheck/synccheck end with "ERROR SUMMARY: N errors"; racecheck with
# "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)".
SUMMARY_RE = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?|RACECHECK SUMMARY:.*?\((\d+) errors?")


# ----------------------------------------------------------------------------- the cases
def bench_shapes() -> tuple[list, str]:
    """[(layout, groups, plan_m, n, k, label)] as the benchmark calls the API, and where they came from."""
    import cugemm8

    out = [("normal", 1, s.m, s.n, s.k, s.label) for s in shapes.DENSE_SHAPES]
    for s in shapes.CONTIGUOUS_SHAPES:
        idx, _ = shapes.contiguous_m_indices(s.groups, s.m, cugemm8.get_m_alignment_for_contiguous_layout())
        out.append(("contiguous", s.groups, len(idx), s.n, s.k, s.label))
    for s in shapes.MASKED_SHAPES:
        out.append(("masked", s.groups, min(s.m, shapes.MASKED_MAX_M), s.n, s.k, s.label))
    return out, "benchmarks.shapes"


def forced_case(cfg, labels: list[str], tiny: bool) -> dict:
    """One small problem that runs configuration `cfg` (a KernelConfig)."""
    bm, g = cfg.block_m, cfg.num_groups
    case = {"name": f"{cfg.layout} N={cfg.n} K={cfg.k} G={g} {bm}x{cfg.block_n} s{cfg.stages} c{cfg.cluster}"
                    + (" split" if cfg.tail_split else ""),
            "bench_shapes": labels, "layout": cfg.layout, "n": cfg.n, "k": cfg.k, "groups": g,
            "config": dataclasses.asdict(cfg), "a_scale": "aligned"}
    if cfg.layout == "normal":
        case["m"] = 1 if tiny else bm + 1                 # the last M block partial
    elif cfg.layout == "contiguous":
        # a tile of two experts (two passes when it is 128 or 256 rows), then a whole padding block
        case["m_indices"] = contiguous_ids([(0, 64), (g - 1, 100), (-1, 28), (-1, 64), (-1, 256)])
    else:
        max_m = 2 if tiny else bm + 1
        case["max_m"] = max_m
        case["masked_m"] = [(max_m, 0, 1)[i % 3] for i in range(g)]   # full, empty, one row, ...
        case["expected_m"] = max_m
    return case


WGRAD_LAYOUTS = ("wgrad", "k_grouped_wgrad")   # cases of the weight gradients (heuristics_wgrad.ENTRY_LAYOUTS)


def wgrad_plan(case: dict, num_sms: int):
    """The weight-gradient configuration of a case: forced, or what the API would choose."""
    h = library.current().wgrad_heuristics
    layout = h.ENTRY_LAYOUTS[case["layout"]]
    groups = len(case.get("k_sizes", [0]))
    if "force" in case:  # (BLOCK_M, BLOCK_N), computing D or, with "transposed", D^T (the kernel's N is M); "loaded": load_d
        transposed = case.get("transposed", False)
        return h.make_config(layout, case["m"] if transposed else case["n"], groups, *case["force"],
                             transpose_d=transposed, load_d=case.get("loaded", False))
    return h.choose(layout, case["m"], case["n"], groups, num_sms).config


def plan_inputs(case: dict) -> tuple:
    """(layout, plan_m, n, k, groups) the API hands the heuristic for an unforced case."""
    fmt = out_format(case)
    if case["layout"] == "normal":
        return "normal", case["m"], case["n"], case["k"], 1, fmt
    if case["layout"] == "contiguous":
        return "contiguous", len(case["m_indices"]), case["n"], case["k"], case["groups"], fmt
    return "masked", min(case["expected_m"], case["max_m"]) or 1, case["n"], case["k"], case["groups"], fmt


def out_format(case: dict) -> str:
    """The kernel's output format (heuristics.OUT_FORMATS) of a case."""
    if case.get("out_dtype") != "float8_e4m3":
        return "bfloat16"
    return "float8_e4m3_ue8m0" if case.get("scale_format") == "ue8m0" else "float8_e4m3"


def build_cases(num_sms: int, tiny: bool) -> tuple[list[dict], str]:
    lib = library.current()
    configs: dict = {}
    shapes, source = bench_shapes()
    for layout, groups, plan_m, n, k, label in shapes:
        cfg = lib.choose(layout, plan_m, n, k, groups, num_sms).config
        configs.setdefault(cfg, []).append(label)
    cases = [forced_case(cfg, labels, tiny) for cfg, labels in configs.items()]
    for edge in EDGE_CASES:
        case = dict(edge)
        if case["layout"] in WGRAD_LAYOUTS:
            case["config" if "force" in case else "chosen"] = dataclasses.asdict(wgrad_plan(case, num_sms))
            case.pop("force", None)
            cases.append(case)
            continue
        if "force" in case:   # an explicit tile shape instead of the heuristic's (split as it would split)
            extra = {key: case.pop(key) for key in ("split_k", "group_ctas") if key in case}
            if out_format(case) != "bfloat16":
                extra["out_format"] = out_format(case)
            case["config"] = dataclasses.asdict(lib.make_config(
                case["layout"], case["n"], case["k"], case.get("groups", 1), *case.pop("force"), **extra))
        inputs = plan_inputs(case)
        small = lib.small_m_choice(inputs[0], *inputs[1:4], num_sms, inputs[5])
        if small is not None:   # the API runs the small-M kernel (compiled by the child)
            case["chosen_small_m"] = dataclasses.asdict(small)
        else:
            case["chosen"] = dataclasses.asdict(lib.choose(*inputs[:5], num_sms, *inputs[5:]).config)
        cases.append(case)
    return cases, source


def case_configs(cases: list[dict], num_sms: int) -> list:
    lib = library.current()
    out = []
    for case in cases:
        if "config" in case:
            out.append(lib.config(case["config"]))
        elif case["layout"] in WGRAD_LAYOUTS:
            out.append(wgrad_plan(case, num_sms))
        elif "chosen_small_m" not in case:
            inputs = plan_inputs(case)
            out.append(lib.choose(*inputs[:5], num_sms, *inputs[5:]).config)
    return list(dict.fromkeys(out))


# ----------------------------------------------------------------------------- parent
def _compile_one(cfg) -> str:
    t0 = time.monotonic()
    library.current().build(cfg)
    return f"{time.monotonic() - t0:.1f}s"


def precompile(configs: list, workers: int) -> None:
    """Fill the JIT disk cache for every configuration (NVRTC in parallel processes)."""
    import concurrent.futures
    import multiprocessing

    t0 = time.monotonic()
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        list(pool.map(_compile_one, configs))
    print(f"sanitize: {len(configs)} kernel configurations compiled in {time.monotonic() - t0:.1f} s", flush=True)


def find_sanitizer(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "compute-sanitizer").exists():
            return str(Path(root) / "bin" / "compute-sanitizer")
    return None


def run_tool(sanitizer: str, tool: str, cases_file: Path, log: Path, timeout: float, tiny: bool) -> dict:
    # Host API errors are not reported: the only ones seen (H200, driver 580) were cuda-bindings'
    # cuGetProcAddress probes for entry points the driver lacks, at import. Kernel launch failures
    # still fail the case (the child checks every call's result).
    cmd = [sanitizer, "--tool", tool, "--report-api-errors", "no", "--error-exitcode", "1", sys.executable,
           "-m", "benchmarks.sanitize_child", str(cases_file)] + (["--tiny"] if tiny else [])
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    t0 = time.monotonic()
    timed_out = False
    with open(log, "w") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    seconds = time.monotonic() - t0
    text = log.read_text(errors="replace")
    counts = [int(a or b) for a, b in SUMMARY_RE.findall(text)]
    done = len(re.findall(r"^sanitize-case \d+/\d+ ", text, re.M))
    failed_cases = re.findall(r"^sanitize-case \d+/\d+ FAIL .*$", text, re.M)
    return {"errors": sum(counts) if counts else None, "summary_found": bool(counts), "exit_code": rc,
            "timed_out": timed_out, "seconds": round(seconds, 1), "cases_done": done,
            "failed_cases": failed_cases, "log": str(log), "command": cmd}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the summary here as JSON")
    p.add_argument("--tools", default=",".join(TOOLS), help="comma-separated, in order (default: all three)")
    p.add_argument("--budget", type=float, default=280.0, help="seconds for all the tools together")
    p.add_argument("--num-sms", type=int, help="plan for this many SMs (default: the GPU's, as the API does)")
    p.add_argument("--cases", help="only cases whose name matches this regular expression")
    p.add_argument("--list", action="store_true", help="print the cases and exit")
    p.add_argument("--logdir", help="where the tools' logs go (default: next to --out, or a temp folder)")
    p.add_argument("--sanitizer", help="path of compute-sanitizer (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    p.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1), help="parallel NVRTC compiles")
    args = p.parse_args(argv)

    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        p.error(f"unknown tools {sorted(unknown)}; choose from {TOOLS}")
    if args.num_sms:
        num_sms, gpu = args.num_sms, None
    else:
        import cupy as cp

        import cugemm8

        num_sms = cugemm8.get_num_sms()
        gpu = library.current().device_properties(cp.cuda.runtime.getDevice())["name"]
    pattern = re.compile(args.cases) if args.cases else None
    case_sets = {}
    source = ""
    for tiny in (False, True):
        cases, source = build_cases(num_sms, tiny)
        case_sets[tiny] = [c for c in cases if pattern is None or pattern.search(c["name"])]
    if args.list:
        for c in case_sets[False]:
            extra = f" (bench: {', '.join(c['bench_shapes'])})" if "bench_shapes" in c else ""
            print(f"{c['name']}{extra}")
        print(f"{len(case_sets[False])} cases, shapes from {source}, {num_sms} SMs")
        return 0

    sanitizer = find_sanitizer(args.sanitizer)
    if sanitizer is None:
        print("sanitize: compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin; or --sanitizer)",
              file=sys.stderr)
        return 2
    t_start = time.monotonic()
    configs = case_configs(case_sets[False] + case_sets[True], num_sms)
    try:
        precompile(configs, args.jobs)
    except Exception as exc:  # noqa: BLE001 - the children compile what is missing
        print(f"sanitize: parallel precompile failed ({type(exc).__name__}: {exc}); the runs compile instead",
              file=sys.stderr)
    logdir = Path(args.logdir or (Path(args.out).resolve().parent if args.out else tempfile.mkdtemp(prefix="sanitize-")))
    logdir.mkdir(parents=True, exist_ok=True)
    files = {}
    for tiny, cases in case_sets.items():
        files[tiny] = logdir / f"sanitize-cases{'-tiny' if tiny else ''}.json"
        files[tiny].write_text(json.dumps(cases, indent=1))

    budget_left = args.budget - (time.monotonic() - t_start)
    results = {}
    share_left = sum(BUDGET_SHARE[t] for t in tools)
    for tool in tools:
        timeout = budget_left * BUDGET_SHARE[tool] / share_left
        tiny = tool == "racecheck"
        t0 = time.monotonic()
        res = run_tool(sanitizer, tool, files[tiny], logdir / f"sanitize-{tool}.log", timeout, tiny)
        budget_left -= time.monotonic() - t0
        share_left -= BUDGET_SHARE[tool]
        res["cases"] = len(case_sets[tiny])
        results[tool] = res
        ok = (res["errors"] == 0 and res["exit_code"] == 0 and not res["timed_out"]
              and res["cases_done"] == res["cases"] and not res["failed_cases"])
        res["ok"] = ok
        errors = "no ERROR SUMMARY line" if res["errors"] is None else f"{res['errors']} errors"
        print(f"{tool}: {errors}, {res['cases_done']}/{res['cases']} cases, {len(res['failed_cases'])} failed, "
              f"exit {res['exit_code']}{', TIMED OUT' if res['timed_out'] else ''}, {res['seconds']} s -> "
              f"{'OK' if ok else 'FAIL'} (log {res['log']})", flush=True)
        for line in res["failed_cases"][:10]:
            print(f"  {line}")
    all_ok = bool(results) and all(r["ok"] for r in results.values())
    summary = {"ok": all_ok, "gpu": gpu, "num_sms": num_sms, "shapes_from": source, "sanitizer": sanitizer,
               "seconds": round(time.monotonic() - t_start, 1), "tools": results,
               "cases": [{k: v for k, v in c.items() if k not in ("m_indices",)} for c in case_sets[False]]}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"sanitize: {'OK' if all_ok else 'FAILED'} in {summary['seconds']} s", flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Every GEMM kernel configuration under compute-sanitizer: memcheck, racecheck, synccheck.

    python scripts/sanitize.py [--out sanitize.json] [--tools memcheck,racecheck,synccheck] [--budget 280]
    python scripts/sanitize.py --list [--num-sms 132]          (the cases, no GPU needed with --num-sms)

Cases: one small problem for every configuration the benchmark shapes pick (cugemm8.bench's tables,
or DESIGN.md section 6's list if that module cannot be imported), forced through the public API with
the benchmark's configuration but a small M (the configuration fixes N, K and the groups, not M);
plus edge shapes through the normal heuristic: M = 1, M not a multiple of the block, N = 8 and
K = 16, masked groups empty / full / out of range, contiguous with whole padding blocks and
out-of-range expert ids. racecheck gets the smallest M (1 row, 2 rows per masked group).

Each tool is one subprocess, `compute-sanitizer --tool T --error-exitcode 1 python <this> --child`,
which runs all the cases (CuPy's memory pool off, so every array is its own allocation and memcheck
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
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TOOLS = ("memcheck", "racecheck", "synccheck")
BUDGET_SHARE = {"memcheck": 0.35, "racecheck": 0.42, "synccheck": 0.23}
# memcheck/synccheck end with "ERROR SUMMARY: N errors"; racecheck with
# "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)".
SUMMARY_RE = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?|RACECHECK SUMMARY:.*?\((\d+) errors?")
CONTIGUOUS_ALIGN = 64   # the fallback list's padding (cugemm8.get_m_alignment_for_contiguous_layout())

# DESIGN.md section 6, used only if cugemm8.bench cannot be imported.
FALLBACK_DENSE = [(m, n, k) for m in (64, 128, 4096) for n, k in
                  ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]
FALLBACK_CONTIGUOUS = [(4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168), (8, 4096, 7168, 2048)]
FALLBACK_MASKED = [(g, e, n, k) for g, e in ((1, 1024), (2, 512), (4, 256)) for n, k in ((4096, 7168), (7168, 2048))]
FALLBACK_MASKED_MAX_M = 4096


# ----------------------------------------------------------------------------- the cases
def bench_shapes() -> tuple[list, str]:
    """[(layout, groups, plan_m, n, k, label)] as the benchmark calls the API, and where they came from."""
    try:
        import cugemm8
        from cugemm8 import bench

        out = []
        for s in bench.DENSE_SHAPES:
            out.append(("normal", 1, s.m, s.n, s.k, s.label))
        for s in bench.CONTIGUOUS_SHAPES:
            idx, _ = bench.contiguous_m_indices(s.groups, s.m, cugemm8.get_m_alignment_for_contiguous_layout())
            out.append(("contiguous", s.groups, len(idx), s.n, s.k, s.label))
        for s in bench.MASKED_SHAPES:
            out.append(("masked", s.groups, min(s.m, bench.MASKED_MAX_M), s.n, s.k, s.label))
        return out, "cugemm8.bench"
    except Exception as exc:  # noqa: BLE001 - any import problem: fall back to the documented list
        print(f"sanitize: cugemm8.bench not usable ({type(exc).__name__}: {exc}); using DESIGN.md section 6",
              file=sys.stderr)
    out = [("normal", 1, m, n, k, f"{m}x{n}x{k}") for m, n, k in FALLBACK_DENSE]
    for g, m, n, k in FALLBACK_CONTIGUOUS:
        out.append(("contiguous", g, g * -(-m // CONTIGUOUS_ALIGN) * CONTIGUOUS_ALIGN, n, k, f"c{g}x{m}x{n}x{k}"))
    for g, e, n, k in FALLBACK_MASKED:
        out.append(("masked", g, min(e, FALLBACK_MASKED_MAX_M), n, k, f"m{g}x{e}x{n}x{k}"))
    return out, "DESIGN.md"


def contiguous_ids(segments: list[tuple[int, int]]) -> list[int]:
    """[(expert or -1, rows)] -> per-row ids."""
    return [e for e, r in segments for _ in range(r)]


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


EDGE_CASES = [
    {"name": "edge dense M=1", "layout": "normal", "m": 1, "n": 2112, "k": 7168, "a_scale": "aligned"},
    {"name": "edge dense M=200 K=400 row-major a_scale", "layout": "normal", "m": 200, "n": 264, "k": 400,
     "a_scale": "rowmajor"},
    {"name": "edge dense M=64 N=8 K=16", "layout": "normal", "m": 64, "n": 8, "k": 16, "a_scale": "aligned"},
    {"name": "edge dense M=5 N=8 K=16", "layout": "normal", "m": 5, "n": 8, "k": 16, "a_scale": "aligned"},
    {"name": "edge masked empty/full groups", "layout": "masked", "groups": 4, "max_m": 100, "n": 264, "k": 256,
     "masked_m": [0, 100, 37, 0], "expected_m": 64, "a_scale": "aligned"},
    {"name": "edge masked all empty", "layout": "masked", "groups": 2, "max_m": 64, "n": 128, "k": 128,
     "masked_m": [0, 0], "expected_m": 1, "a_scale": "aligned"},
    {"name": "edge masked split last wave (K=4096: every tile split over a CTA pair)", "layout": "masked",
     "groups": 2, "max_m": 129, "n": 256, "k": 4096, "masked_m": [129, 1], "expected_m": 129, "a_scale": "aligned"},
    {"name": "edge masked out-of-range masked_m", "layout": "masked", "groups": 3, "max_m": 70, "n": 136, "k": 256,
     "masked_m": [-5, 1000, 70], "expected_m": 32, "a_scale": "aligned"},
    {"name": "edge contiguous whole padding blocks", "layout": "contiguous", "groups": 3, "n": 256, "k": 256,
     "m_indices": contiguous_ids([(0, 100), (-1, 28), (-1, 128), (2, 128), (-1, 128)]), "a_scale": "aligned"},
    {"name": "edge contiguous out-of-range ids", "layout": "contiguous", "groups": 2, "n": 128, "k": 128,
     "m_indices": contiguous_ids([(5, 128), (1, 60), (-9, 68)]), "a_scale": "aligned"},
    # 256x128 tiles on two CTAs, 16 k-blocks in 3 stages: tiles start at every stage of the ring (ring rounds)
    {"name": "edge contiguous ring rounds from every stage (256x128, K=2048, 2 CTAs)", "layout": "contiguous",
     "groups": 3, "n": 256, "k": 2048, "force": (256, 128), "num_sms": 2, "a_scale": "aligned",
     "m_indices": contiguous_ids([(0, 64), (2, 100), (-1, 28), (1, 768), (-1, 64), (2, 256)])},
    # 128x128 tiles on 8 CTAs, 5 n-blocks: the last group's 20-row block goes last and its tiles are split
    {"name": "edge masked light last blocks go last, split (128x128, K=1024, 8 CTAs)", "layout": "masked",
     "groups": 3, "max_m": 300, "n": 640, "k": 1024, "masked_m": [300, 0, 20], "expected_m": 256,
     "force": (128, 128), "num_sms": 8, "a_scale": "aligned"},
]


def plan_inputs(case: dict) -> tuple:
    """(layout, plan_m, n, k, groups) the API hands the heuristic for an unforced case."""
    if case["layout"] == "normal":
        return "normal", case["m"], case["n"], case["k"], 1
    if case["layout"] == "contiguous":
        return "contiguous", len(case["m_indices"]), case["n"], case["k"], case["groups"]
    return "masked", min(case["expected_m"], case["max_m"]) or 1, case["n"], case["k"], case["groups"]


def build_cases(num_sms: int, tiny: bool) -> tuple[list[dict], str]:
    from cugemm8 import heuristics

    configs: dict = {}
    shapes, source = bench_shapes()
    for layout, groups, plan_m, n, k, label in shapes:
        cfg = heuristics.choose(layout, plan_m, n, k, groups, num_sms).config
        configs.setdefault(cfg, []).append(label)
    cases = [forced_case(cfg, labels, tiny) for cfg, labels in configs.items()]
    for edge in EDGE_CASES:
        case = dict(edge)
        if "force" in case:   # an explicit tile shape instead of the heuristic's (split as it would split)
            case["config"] = dataclasses.asdict(heuristics.make_config(
                case["layout"], case["n"], case["k"], case.get("groups", 1), *case.pop("force")))
        cfg = heuristics.choose(*plan_inputs(case), num_sms).config
        case["chosen"] = dataclasses.asdict(cfg)
        cases.append(case)
    return cases, source


def case_configs(cases: list[dict], num_sms: int) -> list:
    from cugemm8 import heuristics

    out = []
    for case in cases:
        if "config" in case:
            out.append(heuristics.KernelConfig(**case["config"]))
        else:
            out.append(heuristics.choose(*plan_inputs(case), num_sms).config)
    return list(dict.fromkeys(out))


# ----------------------------------------------------------------------------- child: run the cases
def _codes(rng, shape):
    """Random finite e4m3 codes of moderate magnitude, from a 1 MiB pattern (cheap for big B)."""
    import numpy as np

    size = int(np.prod(shape))
    n = min(size, 1 << 20)
    exp = rng.integers(6, 11, size=n, dtype=np.int32)
    mant = rng.integers(0, 8, size=n, dtype=np.int32)
    sign = rng.integers(0, 2, size=n, dtype=np.int32)
    pattern = (sign << 7 | exp << 3 | mant).astype(np.uint8)
    return np.resize(pattern, size).reshape(shape)


def _a_scale(cp, np, rng, lead: tuple, m: int, kb: int, kind: str):
    """float32 [*lead, m, kb] on the device: the kernel's M-major layout built on the host (no
    conversion kernel), or row-major (the API converts it)."""
    values = rng.uniform(0.5, 2.0, size=lead + (m, kb)).astype(np.float32)
    if kind == "rowmajor":
        return cp.asarray(values)
    am = -(-m // 4) * 4
    store = np.zeros(lead + (kb, am), np.float32)
    store[..., :m] = np.swapaxes(values, -1, -2)
    return cp.asarray(store).swapaxes(-1, -2)[..., :m, :]


def _poisoned_out(cp, shape, bf16):
    out = cp.empty(shape, dtype=bf16)
    out.data.memset(0xFF, out.nbytes)            # all NaN, no kernel
    return out


def _nonfinite(bits):
    return (bits & 0x7F80) == 0x7F80


def run_case(case: dict, tiny: bool) -> str:
    import cupy as cp
    import numpy as np

    import cugemm8
    from cugemm8 import api, heuristics, runtime

    rng = np.random.default_rng(zlib.crc32(case["name"].encode()))
    n, k = case["n"], case["k"]
    kb, nb = -(-k // 128), -(-n // 128)
    groups = case.get("groups", 1)
    real_choose = api.choose
    api._prepared.clear()           # forced cases may share a call signature with another configuration
    if "config" in case:
        cfg = heuristics.KernelConfig(**case["config"])
        num_sms = case.get("num_sms") or runtime.get_num_sms()
        if cfg.layout == "normal":
            tiles = -(-case["m"] // cfg.block_m) * cfg.num_n_blocks
        elif cfg.layout == "contiguous":
            tiles = -(-len(case["m_indices"]) // cfg.block_m) * cfg.num_n_blocks
        else:
            tiles = -(-case["max_m"] // cfg.block_m) * cfg.num_n_blocks * groups
        grid = heuristics.grid_for(cfg, max(tiles, 1), num_sms)   # as the API would launch it

        def forced(layout, m_, n_, k_, groups_, sms_):
            assert (layout, n_, k_, groups_) == (cfg.layout, cfg.n, cfg.k, cfg.num_groups), "case/config mismatch"
            return heuristics.LaunchPlan(config=cfg, grid=grid, num_tiles=tiles)

        api.choose = forced
    try:
        if case["layout"] == "normal":
            m = case["m"]
            a = cp.asarray(_codes(rng, (m, k)))
            sa = _a_scale(cp, np, rng, (), m, kb, case["a_scale"])
            b = cp.asarray(_codes(rng, (n, k)))
            sb = cp.asarray(rng.uniform(0.5, 2.0, (nb, kb)).astype(np.float32))
            out = _poisoned_out(cp, (m, n), api.BF16)
            cugemm8.matmul(a, sa, b, sb, out=out)
            cp.cuda.Device().synchronize()
            bits = cp.asnumpy(out.view(cp.uint16))
            bad = int(_nonfinite(bits).sum())
            if bad:
                return f"{bad} outputs not written or not finite"
        elif case["layout"] == "contiguous":
            idx = np.asarray(case["m_indices"], np.int32)
            m = len(idx)
            a = cp.asarray(_codes(rng, (m, k)))
            sa = _a_scale(cp, np, rng, (), m, kb, case["a_scale"])
            b = cp.asarray(_codes(rng, (groups, n, k)))
            sb = cp.asarray(rng.uniform(0.5, 2.0, (groups, nb, kb)).astype(np.float32))
            out = _poisoned_out(cp, (m, n), api.BF16)
            cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, cp.asarray(idx), out=out)
            cp.cuda.Device().synchronize()
            bits = cp.asnumpy(out.view(cp.uint16))
            padding = np.zeros(m, bool)
            bm = (heuristics.KernelConfig(**case["config"]).block_m if "config" in case
                  else heuristics.KernelConfig(**case["chosen"]).block_m)
            for start in range(0, m, bm):
                first = idx[start]
                padding[start:start + bm] = (first < 0 or first >= groups)
            padding |= idx < 0
            if (bits[padding] != 0).any():
                return "padding rows are not zero"
            if _nonfinite(bits[~padding]).any():
                return "computed rows not written or not finite"
        else:
            max_m = case["max_m"]
            a = cp.asarray(_codes(rng, (groups, max_m, k)))
            sa = _a_scale(cp, np, rng, (groups,), max_m, kb, case["a_scale"])
            b = cp.asarray(_codes(rng, (groups, n, k)))
            sb = cp.asarray(rng.uniform(0.5, 2.0, (groups, nb, kb)).astype(np.float32))
            masked_m = np.asarray(case["masked_m"], np.int32)
            out = _poisoned_out(cp, (groups, max_m, n), api.BF16)
            cugemm8.m_grouped_matmul_masked(a, sa, b, sb, cp.asarray(masked_m), case["expected_m"], out=out)
            cp.cuda.Device().synchronize()
            bits = cp.asnumpy(out.view(cp.uint16))
            for g in range(groups):
                rows = min(max(int(masked_m[g]), 0), max_m)
                if _nonfinite(bits[g, :rows]).any():
                    return f"group {g}: valid rows not written or not finite"
                if (bits[g, rows:] != 0xFFFF).any():
                    return f"group {g}: rows past masked_m written"
        return ""
    finally:
        api.choose = real_choose
        api._prepared.clear()


def child(cases_file: str, tiny: bool) -> int:
    import cupy as cp

    cp.cuda.set_allocator(None)                  # every array its own cudaMalloc: exact bounds for memcheck
    cp.cuda.set_pinned_memory_allocator(None)
    cases = json.loads(Path(cases_file).read_text())
    failed = 0
    for i, case in enumerate(cases):
        t0 = time.monotonic()
        try:
            problem = run_case(case, tiny)
        except Exception as exc:  # noqa: BLE001 - report and go on with the other cases
            problem = f"{type(exc).__name__}: {exc}"
        failed += bool(problem)
        print(f"sanitize-case {i + 1}/{len(cases)} {'FAIL' if problem else 'ok'} {time.monotonic() - t0:.1f}s "
              f"{case['name']}{': ' + problem if problem else ''}", flush=True)
    print(f"sanitize-child done: {len(cases) - failed} ok, {failed} failed", flush=True)
    return 1 if failed else 0


# ----------------------------------------------------------------------------- parent
def _compile_one(cfg) -> str:
    from cugemm8 import kernels

    t0 = time.monotonic()
    kernels.build(cfg)
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
           str(Path(__file__).resolve()), "--child", str(cases_file)] + (["--tiny"] if tiny else [])
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    t0 = time.monotonic()
    timed_out = False
    with open(log, "w") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
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
    p.add_argument("--child", metavar="CASES_JSON", help=argparse.SUPPRESS)
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child, args.tiny)

    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        p.error(f"unknown tools {sorted(unknown)}; choose from {TOOLS}")
    if args.num_sms:
        num_sms, gpu = args.num_sms, None
    else:
        import cupy as cp

        from cugemm8 import runtime

        num_sms = runtime.get_num_sms()
        gpu = runtime.device_properties(cp.cuda.runtime.getDevice())["name"]
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

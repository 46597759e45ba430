"""SASS identity of this checkout's GEMM kernel against another checkout's, configuration by
configuration, with no GPU:

    git archive <commit> cugemm8 cuda_src | tar -x -C /tmp/base
    python -m benchmarks.sass_digests --base /tmp/base [--out FILE.json]

For every configuration the CPU tier compiles (tests/kernel_configs.py), each package renders and
compiles its own kernel (library.load: the other package with its own cuda_src/); the report gives
the SHA-256 of each kernel's code section, whether the two are byte-identical, and where they are not,
the instruction count of each main loop (innermost loops that issue wgmmas) and the stack frame. A
refactor that means to change nothing shows 'identical' everywhere; one that changes code goes to the
round robin (round_robin.py) for its timing.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from . import library

BASE_ALIAS = "cugemm8_base"
TESTS = Path(__file__).resolve().parent.parent / "tests"


def catalog() -> list:
    """The CPU tier's configurations (tests/kernel_configs.py)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from kernel_configs import CONFIGS

    return list(CONFIGS)


def config_id(c) -> str:
    return (f"{c.layout}-n{c.n}-k{c.k}-g{c.num_groups}-{c.block_m}x{c.block_n}-s{c.stages}-wg{c.num_math_wg}"
            f"-sw{c.swizzle_d}-c{c.cluster}-t{int(c.tail_split)}"
            + (f"-k{c.split_k}" if getattr(c, "split_k", 1) > 1 else "")
            + ("-ef" if getattr(c, "stream_b", False) else "")
            + (f"-{c.out_format}" if getattr(c, "out_format", "bfloat16") != "bfloat16" else "")
            + (f"-r{c.raster_group}" if getattr(c, "raster_group", 8) != 8 else ""))


def main_loops(listing: str) -> list[int]:
    """Instruction counts of the innermost loops (backward branches) that issue wgmmas, in address order."""
    ins = [(int(a, 16), op) for a, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", listing)]
    loops = []
    for addr, op in ins:
        m = re.match(r"@!?U?P\w+\s+BRA\s+0x([0-9a-f]+)", op)
        if m and int(m.group(1), 16) < addr:
            start = int(m.group(1), 16)
            if any(o.startswith("QGMMA") for a, o in ins if start <= a <= addr):
                loops.append((start, addr))
    inner = [(s, e) for s, e in loops if not any((s, e) != (s2, e2) and s <= s2 and e2 <= e for s2, e2 in loops)]
    return [sum(1 for a, _ in ins if s <= a <= e) for s, e in sorted(inner)]


def _facts(which: str, base: str, fields: dict) -> dict | None:
    """Compile one configuration with one package (a worker process) and describe its kernel; None where the
    base package has no such configuration (a field it lacks, not at its default, or sources that reject it)."""
    lib = library.current() if which == "cur" else library.load(base, BASE_ALIAS)
    sass = lib._mod("sass")
    try:
        config = lib.config(fields)
    except ValueError:
        if which == "cur":
            raise
        return None
    try:
        cubin = lib.compile_cubin(lib.render(config))
    except Exception:  # the base's sources reject it (a static_assert): a configuration new since the base
        if which == "cur":
            raise
        return None
    offset, size = sass.text_sections(cubin)["cugemm8_fp8_gemm"]
    usage = sass.resource_usage(cubin)["cugemm8_fp8_gemm"]
    return {"sha256": hashlib.sha256(cubin[offset:offset + size]).hexdigest(), "bytes": size,
            "registers": usage.get("REG"), "stack": usage.get("STACK"),
            "main_loops": main_loops(sass.disassemble(cubin))}


def compare(base: str, configs: list, jobs: int = 2) -> list[dict]:
    fields = [dataclasses.asdict(c) for c in configs]
    with ProcessPoolExecutor(jobs) as pool:
        cur = list(pool.map(_facts, ["cur"] * len(fields), [base] * len(fields), fields))
        old = list(pool.map(_facts, ["base"] * len(fields), [base] * len(fields), fields))
    rows = []
    for c, o, n in zip(configs, old, cur):
        rows.append({"config": config_id(c), "identical": o is not None and o["sha256"] == n["sha256"],
                     "new": o is None, "base": o, "cur": n})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    library.add_base_argument(ap)
    ap.add_argument("--out", default=None, help="write the comparison as JSON here")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    rows = compare(args.base, catalog(), args.jobs)
    for r in rows:
        b, c = r["base"], r["cur"]
        if r["new"]:
            print(f"new       {r['config']}")
            continue
        detail = "" if r["identical"] else (f"  bytes {b['bytes']} -> {c['bytes']}, main loops {b['main_loops']} -> "
                                            f"{c['main_loops']}, stack {b['stack']} -> {c['stack']}")
        print(f"{'identical' if r['identical'] else 'differs  '} {r['config']}{detail}")
    same = sum(r["identical"] for r in rows)
    new = sum(r["new"] for r in rows)
    print(f"{same} of {len(rows) - new} configurations byte-identical ({new} new, the base has no such configuration)")
    if args.out:
        Path(args.out).write_text(json.dumps({"base": str(args.base), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

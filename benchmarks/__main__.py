"""Benchmark tables for cugemm8: dense, grouped (contiguous, masked), e4m3 output, the weight gradients, the block
transpose, host overhead, JIT, prefill (large M, uneven experts), decode (M <= 128).

    python -m benchmarks [--only dense|contiguous|masked|fp8out|wgrad|transpose|overhead|jit|prefill|decode]
                         [--reps 30] [--out DIR] [--no-peers] [--quick]

Inputs are built once per shape (random normal, quantized by cugemm8's GPU quantizers); each
implementation's answer is checked (calc_diff against the unquantized product, on the GPU) before it is
timed by the protocol (protocol.py: L2 flush, CUDA events, median; interleaved, and alone for the grouped
anchors). Peers (peers.py) run in the same loop when importable. Results go to <out>/<gpu>-<UTC time>.json
and a PNG next to it (another, <...>-decode.png, for the decode section's roofline fractions). Importing this
module needs neither a GPU, CuPy nor torch.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

# prefill and decode last: their full tables run for minutes, and every section before them is saved first
SECTIONS = ("dense", "contiguous", "masked", "fp8out", "wgrad", "transpose", "overhead", "jit", "prefill", "decode")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description="cugemm8 benchmark tables")
    p.add_argument("--only", action="append", choices=SECTIONS, metavar="|".join(SECTIONS),
                   help="run only this section (repeatable; default: all)")
    p.add_argument("--out", default="bench/results/", help="folder for the JSON and PNG (default: bench/results/)")
    p.add_argument("--reps", type=int, default=30, help="timed calls per implementation and shape (median; >= 30)")
    p.add_argument("--no-peers", action="store_true", help="skip the peers (cuBLASLt through torch, and DeepGEMM)")
    p.add_argument("--quick", action="store_true", help="a few shapes only (smoke test)")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    args.sections = [s for s in SECTIONS if s in (args.only or SECTIONS)]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from . import decode, fp8_out, host, prefill, report, tables, transpose, wgrad
    from .env import Env
    from .peers import loaded_cublaslt_version

    runners = {"dense": tables.run_dense, "contiguous": tables.run_contiguous, "masked": tables.run_masked,
               "fp8out": fp8_out.run_fp8_out, "wgrad": wgrad.run_wgrad, "transpose": transpose.run_transpose,
               "overhead": host.run_overhead, "jit": host.run_jit, "prefill": prefill.run_prefill,
               "decode": decode.run_decode}
    try:
        env = Env(args)
    except Exception as exc:
        print(f"benchmarks: cannot start on a GPU: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.reps < 30:
        print(f"note: --reps {args.reps} is below the protocol's 30")
    info = report.run_info(env, args)
    info["smi_before"] = report.nvidia_smi(report.SMI_CLOCKS)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    json_path = Path(args.out) / f"{report.slug(info['gpu'])}-{stamp}.json"
    print(f"cugemm8 bench on {info['gpu']} ({info['sms']} SMs); peers: {env.peers_note}; DeepGEMM: {env.deepgemm_note}")
    results = {}
    # A long section (prefill, decode) saves its rows as it goes, so that a run cut short keeps them.
    args.checkpoint = lambda partial: report.write_json(json_path, info, {**results, section: partial})
    with env.stream:
        for section in args.sections:
            try:
                results[section] = runners[section](env, args)
            except Exception as exc:
                results[section] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
                print(f"\n== {section} ==\nerror: {results[section]['error']}")
            report.write_json(json_path, info, results)   # keep what we have if a later section dies
    info["smi_after"] = report.nvidia_smi(report.SMI_CLOCKS)
    info["versions"]["cublaslt_loaded"] = loaded_cublaslt_version()
    info["utc_end"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    chart = json_path.with_suffix(".png")
    info["chart"] = report.write_chart(chart, results, f"cugemm8 vs peers, {info['gpu']}, {stamp}") or str(chart)
    if any(results.get("wgrad", {}).get(s, {}).get("rows") for s in ("wgrad", "k_grouped")):
        chart = json_path.with_name(json_path.stem + "-wgrad.png")
        title = f"weight gradient: TFLOPS, {info['gpu']}, {stamp}"
        info["chart_wgrad"] = report.write_wgrad_chart(chart, results["wgrad"], title) or str(chart)
    if results.get("decode", {}).get("rows"):
        chart = json_path.with_name(json_path.stem + "-decode.png")
        title = f"decode: fraction of the memory floor, {info['gpu']}, {stamp}"
        info["chart_decode"] = report.write_decode_chart(chart, results["decode"]["rows"], title) or str(chart)
    report.write_json(json_path, info, results)
    report.print_summary(results, info, json_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

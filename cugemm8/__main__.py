"""Command line: ``python -m cugemm8 info | sass ...`` (the benchmark is ``python -m benchmarks`` in a checkout)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

DEFAULT_SMS = 132  # an H100/H200 SXM, used by `sass` when no GPU is present


def _gpu_or_none():
    try:
        import cupy

        dev = cupy.cuda.runtime.getDevice()
        from . import runtime

        return dev, runtime.device_properties(dev)
    except Exception:
        return None


def cmd_info(args) -> int:
    import cupy
    import cuda.bindings

    from . import __version__, jit

    gpu = _gpu_or_none()
    cache = jit.cache_dir()
    entries = sorted(cache.glob("*.cubin")) if cache.is_dir() else []
    info = {
        "cugemm8": __version__,
        "gpu": None if gpu is None else {"device": gpu[0], **gpu[1]},
        "cupy": cupy.__version__,
        "cuda_bindings": cuda.bindings.__version__,
        "nvrtc": ".".join(map(str, jit.nvrtc_version())),
        "cache_dir": str(cache),
        "cache_entries": len(entries),
        "cache_bytes": sum(p.stat().st_size for p in entries),
    }
    print(json.dumps(info, indent=2, default=str))
    return 0


def cmd_sass(args) -> int:
    import os

    from . import ffma, fp8_gemm, heuristics, sass

    if args.no_ffma_interleave:
        os.environ[ffma.DISABLE_ENV] = "1"
    sms = args.sms
    if sms is None:
        gpu = _gpu_or_none()
        sms = gpu[1]["num_sms"] if gpu else DEFAULT_SMS
    plan = heuristics.choose(args.layout, args.m, args.n, args.k, args.groups, sms)
    cfg = plan.config
    line = {**dataclasses.asdict(cfg), "grid": plan.grid, "threads": cfg.threads, "smem_bytes": cfg.smem_bytes,
            "num_sms": sms, "ffma_interleave": ffma.ffma_interleave_enabled()}
    print(json.dumps(line))
    sys.stdout.write(sass.disassemble(fp8_gemm.build(cfg)))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cugemm8", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="GPU, versions and the JIT cache")
    p = sub.add_parser("sass", help="the configuration and SASS of the kernel a call would launch (no GPU needed)")
    p.add_argument("--m", type=int, required=True, help="rows (contiguous: total rows; masked: expected rows per group)")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--sms", type=int, default=None, help=f"SM count (default: the GPU's, else {DEFAULT_SMS})")
    p.add_argument("--layout", choices=("normal", "contiguous", "masked"), default="normal")
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--no-ffma-interleave", action="store_true", help="show the SASS without the FFMA patch")
    args = parser.parse_args(argv)
    return {"info": cmd_info, "sass": cmd_sass}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())

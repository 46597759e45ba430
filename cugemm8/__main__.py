"""Command line: ``python -m cugemm8 info | sass | precompile | cache`` (the benchmark is ``python -m benchmarks``
in a checkout). Errors end as one line on stderr: exit status 2 for bad arguments, 1 for anything else."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from .heuristics_wgrad import ENTRY_LAYOUTS as WGRAD_LAYOUTS

DEFAULT_SMS = 132  # an H100/H200 SXM, used by `sass` and `precompile` when no GPU is present


class CliError(Exception):
    """A failure to report in one line (exit status 1)."""


def _gpu_or_none():
    from . import runtime

    if runtime.gpu_unavailable_reason() is not None:
        return None
    try:
        import cupy

        dev = cupy.cuda.runtime.getDevice()
        return dev, runtime.device_properties(dev)
    except Exception:
        return None


def cmd_info(args) -> int:
    import cupy
    import cuda.bindings

    from . import __version__, jit, runtime

    reason = runtime.gpu_unavailable_reason()
    gpu = None if reason else _gpu_or_none()
    try:
        driver = runtime._version(runtime.cu.cuDriverGetVersion()[1])
        driver = f"CUDA {driver[0]}.{driver[1]}"
    except Exception:
        driver = None
    info = {
        "cugemm8": __version__,
        "gpu": None if gpu is None else {"device": gpu[0], **gpu[1]},
        "no_gpu_reason": reason,
        "driver": driver,
        "cupy": cupy.__version__,
        "cuda_bindings": cuda.bindings.__version__,
        "nvrtc": ".".join(map(str, jit.nvrtc_version())),
        **_cache_summary(jit.cache_dir()),
    }
    print(json.dumps(info, indent=2, default=str))
    return 0


def _kernels(cache) -> list:
    """The cache's kernel files: ``<key>.cubin``, not the ``.tmp-*.cubin`` files of writes under way (pathlib's
    ``*`` matches names starting with a dot)."""
    return sorted(p for p in cache.glob("*.cubin") if not p.name.startswith(".")) if cache.is_dir() else []


def _cache_summary(cache) -> dict:
    entries = _kernels(cache)
    return {"cache_dir": str(cache), "cache_entries": len(entries), "cache_bytes": sum(p.stat().st_size for p in entries)}


def cmd_sass(args) -> int:
    from . import ffma, fp8_gemm, sass
    from .precompile import plan as plan_for
    from .validation import check_out_format

    _check_sizes(args)
    fmt = check_out_format(args.out_dtype, args.scale_format)
    if fmt != "bfloat16" and args.layout in WGRAD_LAYOUTS:
        raise ValueError(f"--out-dtype applies to the forward GEMMs; the weight gradient's output is float32")
    if fmt != "bfloat16" and args.n % 16:
        raise ValueError(f"--n must be a multiple of 16 with --out-dtype float8_e4m3; got {args.n}")
    if args.no_ffma_interleave:
        os.environ[ffma.DISABLE_ENV] = "1"
    sms = _sms(args.sms)
    plan = plan_for(args.layout, args.m, args.n, args.k, args.groups, sms, fmt)
    cfg = plan.config
    line = {**dataclasses.asdict(cfg), "grid": plan.grid, "threads": cfg.threads, "smem_bytes": cfg.smem_bytes,
            "num_sms": sms, "ffma_interleave": ffma.ffma_interleave_enabled()}
    print(json.dumps(line))
    if args.config_only:
        return 0
    try:
        sass.tool_path("cuobjdump")
        sass.tool_path("nvdisasm")
    except FileNotFoundError:
        raise CliError("sass needs cuobjdump and nvdisasm: pip install \"cugemm8[sass]\" (or use --config-only)") \
            from None
    sys.stdout.write(sass.disassemble(fp8_gemm.build(cfg)))
    return 0


def _check_sizes(args) -> None:
    """The API's rules on the sizes a call would have (validation.py), for sizes given on the command line."""
    if args.m < 1:
        raise ValueError(f"--m must be >= 1; got {args.m}")
    if args.n < 8 or args.n % 8:
        raise ValueError(f"--n must be a positive multiple of 8; got {args.n}")
    if args.k is None and args.layout not in WGRAD_LAYOUTS:
        raise ValueError(f"--k is required for the {args.layout} layout (only the weight gradients take K at run time)")
    if args.k is not None and (args.k < 16 or args.k % 16):
        raise ValueError(f"--k must be a positive multiple of 16; got {args.k}")
    if args.groups < 1 or (args.layout in ("normal", "wgrad") and args.groups != 1):
        raise ValueError(f"--groups must be >= 1 (and 1 for the normal and wgrad layouts); got {args.groups}")
    if args.layout == "contiguous" and args.m % 64:
        raise ValueError(f"--m (total rows) must be a multiple of 64 for the contiguous layout; got {args.m}")


def _sms(sms) -> int:
    if sms is not None:
        if sms < 1:
            raise ValueError(f"--sms must be >= 1; got {sms}")
        return sms
    gpu = _gpu_or_none()
    return gpu[1]["num_sms"] if gpu else DEFAULT_SMS


def _m_range(text: str):
    """'64' or '1:16384' (inclusive)."""
    low, sep, high = text.partition(":")
    try:
        return (int(low), int(high)) if sep else int(low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M or LOW:HIGH, got {text!r}") from None


def cmd_precompile(args) -> int:
    from . import jit
    from .precompile import precompile

    configs = precompile(args.n, args.k, layout=args.layout, m=args.m, groups=args.groups, num_sms=_sms(args.sms),
                         out_dtype=args.out_dtype, scale_format=args.scale_format, jobs=args.jobs,
                         progress=not args.quiet)
    print(f"{len(configs)} kernels in {jit.cache_dir()}")
    return 0


def cmd_cache(args) -> int:
    from . import jit

    root = jit.cache_dir()
    if args.action == "info":
        print(json.dumps(_cache_summary(root), indent=2))
        return 0
    kernels = other = 0
    if root.is_dir():
        for path in _kernels(root):
            path.unlink(missing_ok=True)
            kernels += 1
        for path in [*root.glob(".tmp-*.cubin"), *(root / jit.LOCK_DIR).glob("*.lock")]:
            path.unlink(missing_ok=True)
            other += 1
        try:
            (root / jit.LOCK_DIR).rmdir()
        except OSError:
            pass
    print(f"removed {kernels} kernels and {other} lock or temporary files from {root}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cugemm8", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="GPU (or why none is usable), driver, versions and the JIT cache")
    p = sub.add_parser("sass", help="the configuration and SASS of the kernel a call would launch (no GPU needed)")
    _shape_args(p, m_type=int, m_help="rows (contiguous: total rows; masked: expected rows per group)")
    p.add_argument("--config-only", action="store_true", help="print the configuration only (no disassembler)")
    p.add_argument("--no-ffma-interleave", action="store_true", help="show the SASS without the FFMA patch")
    p = sub.add_parser("precompile", help="compile every kernel the heuristic can pick for N, K over an M range")
    _shape_args(p, m_type=_m_range, m_help="M or LOW:HIGH, inclusive (masked: expected_m)", m_default=(1, 16384))
    p.add_argument("--jobs", type=int, default=1, help="compiler processes")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p = sub.add_parser("cache", help="the JIT cache on disk")
    p.add_argument("action", choices=("info", "clear"))
    return parser


def _shape_args(p, m_type, m_help: str, m_default=None) -> None:
    p.add_argument("--m", type=m_type, required=m_default is None, default=m_default, help=m_help)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, default=None, help="K (the weight gradients take it at run time: optional there)")
    p.add_argument("--sms", type=int, default=None, help=f"SM count (default: the GPU's, else {DEFAULT_SMS})")
    p.add_argument("--layout", choices=("normal", "contiguous", "masked", *WGRAD_LAYOUTS), default="normal",
                   help="the forward GEMMs' layouts, or the weight gradients (wgrad_matmul, k_grouped_wgrad_matmul)")
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--out-dtype", choices=("bfloat16", "float8_e4m3"), default="bfloat16")
    p.add_argument("--scale-format", choices=("float32", "ue8m0"), default="float32")


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    command = {"info": cmd_info, "sass": cmd_sass, "precompile": cmd_precompile, "cache": cmd_cache}[args.cmd]
    try:
        return command(args)
    except BrokenPipeError:   # `... | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (ValueError, TypeError) as exc:
        print(f"cugemm8: error: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"cugemm8: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:   # compile errors, missing tools, CUDA errors: one line, no traceback
        print(f"cugemm8: error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

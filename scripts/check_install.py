"""Check an installed cugemm8 (no GPU needed): import it, report its versions, and compile a set of GEMM
kernels with NVRTC through the package's own code, from a fresh, temporary JIT cache.

    python scripts/check_install.py     # with the environment's python, from outside the checkout

`make check-install` runs it in fresh virtual environments, one per CUDA extra (cu13, cu12). Prints one
line per step; on failure exits 1 with a one-line reason.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path

# (layout, m, n, k, groups, out_format) for heuristics.choose: each layout, decode (split K over a cluster)
# and prefill, e4m3 output.
SHAPES = [
    ("normal", 64, 2112, 7168, 1, "bfloat16"),
    ("normal", 4096, 7168, 2048, 1, "bfloat16"),
    ("normal", 4096, 7168, 2048, 1, "float8_e4m3"),
    ("contiguous", 4096, 4096, 7168, 8, "bfloat16"),
    ("masked", 32, 4096, 7168, 16, "bfloat16"),
]
NUM_SMS = 132   # H100 SXM
ELF_MAGIC = b"\x7fELF"


def fail(reason: str) -> None:
    print(f"check_install: FAILED: {reason}", flush=True)
    sys.exit(1)


def loaded_nvrtc() -> str:
    """Path of the libnvrtc this process has mapped (Linux), or '?'."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "libnvrtc.so" in os.path.basename(path):
                    return path
    except OSError:
        pass
    return "?"


def check_cubin(label: str, build) -> None:
    """Run `build`, check it returns an ELF cubin, print the size, time and any warning."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cubin = build()
        except Exception as exc:  # noqa: BLE001
            print(exc, file=sys.stderr)   # NVRTC's whole log
            lines = str(exc).strip().splitlines()
            fail(f"{label}: {type(exc).__name__}: {lines[-1] if lines else ''}")
    if bytes(cubin[:4]) != ELF_MAGIC:
        fail(f"{label}: NVRTC returned {len(cubin)} bytes that are not an ELF cubin")
    print(f"  {label}: {len(cubin)} bytes, {time.perf_counter() - start:.1f} s")
    for w in caught:
        print(f"    warning: {w.message}")


def main() -> None:
    try:
        import cugemm8
        from cugemm8 import fp8_gemm, heuristics, jit
    except Exception as exc:  # noqa: BLE001 - any import error is the answer
        fail(f"import cugemm8: {type(exc).__name__}: {exc}")

    where = Path(cugemm8.__file__).resolve().parent
    installed = metadata.version("cugemm8")
    print(f"cugemm8 {cugemm8.__version__} from {where}")
    if cugemm8.__version__ != installed:
        fail(f"cugemm8.__version__ is {cugemm8.__version__} but the installed metadata says {installed}")
    sources = jit.source_dir()
    if where not in sources.parents:
        fail(f"the CUDA sources come from {sources}, not from the installed package (an editable install?)")

    import cupy
    from cuda import bindings
    try:
        major, minor = jit.nvrtc_version()
    except Exception as exc:  # noqa: BLE001
        fail(f"NVRTC not usable: {type(exc).__name__}: {exc}")
    print(f"NVRTC {major}.{minor} ({loaded_nvrtc()}), cuda.bindings {bindings.__version__}, cupy {cupy.__version__}")
    if str(major) != bindings.__version__.split(".")[0]:
        fail(f"NVRTC {major}.{minor} does not match cuda.bindings {bindings.__version__}: mixed CUDA extras?")

    configs = [heuristics.choose(*shape[:5], NUM_SMS, shape[5]).config for shape in SHAPES]
    for cfg in configs:
        label = f"{fp8_gemm.cfg_str(cfg)}" + (f", split K {cfg.split_k}" if cfg.split_k > 1 else "")
        check_cubin(label, lambda cfg=cfg: fp8_gemm.build(cfg))

    from cugemm8 import quantize   # the quantizers' source, which CuPy compiles on the GPU at run time
    check_cubin("quantize.cu", lambda: jit.compile_cubin(
        quantize.kernel_source(), name="quantize.cu", options=(jit.ARCH_OPTION, "-std=c++17") + quantize.NVRTC_OPTIONS))
    print("check_install: OK")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="cugemm8-check-") as cache:
        os.environ["CUGEMM8_CACHE_DIR"] = cache   # nothing read from an existing cache
        os.environ.pop("CUGEMM8_JIT_DISABLE_CACHE", None)
        main()

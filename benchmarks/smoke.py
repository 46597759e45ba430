"""First-contact check of the GEMM kernels on a GPU, independent of the quantizers and the scale-layout
helper: random e4m3 codes and scales, a float64 reference on the GPU, one line per shape.

    python -m benchmarks.smoke            (exit status 1 if any shape is off)
"""
from __future__ import annotations

import sys

import cupy
import ml_dtypes
import numpy as np

import cugemm8
from cugemm8 import api
from cugemm8.reference import REL_TOLERANCE

from . import library
from .shapes import DENSE_SHAPES

# Edge shapes (tiny, unaligned M, N and K), then five of the benchmark's dense shapes (one per tile family).
EDGE_SHAPES = [(1, 8, 16), (64, 128, 128), (300, 136, 400), (1000, 4104, 2000), (129, 24576, 1536), (65, 192, 1040)]
TABLE_LABELS = ("64x2112x7168", "128x7168x2048", "4096x2112x7168", "4096x7168x2048", "4096x32768x512")

LUT = cupy.asarray(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64))


def codes(rng, shape):
    """Random e4m3 codes of magnitude 0.5 .. 15 (exponent field 6..10) and random sign: no NaNs, and no
    extreme dynamic range (which would make the 14-bit tensor-core accumulation error dominate)."""
    exp = rng.integers(6, 11, size=shape, dtype=np.int32)
    mant = rng.integers(0, 8, size=shape, dtype=np.int32)
    sign = rng.integers(0, 2, size=shape, dtype=np.int32)
    return cupy.asarray((sign << 7 | exp << 3 | mant).astype(np.uint8))


def aligned(sa):
    """[..., M, KB] -> the same values in the kernel's M-major layout, built by hand."""
    m, kb = sa.shape[-2:]
    am = -(-m // 4) * 4
    store = cupy.zeros(sa.shape[:-2] + (kb, am), cupy.float32)
    store[..., :m] = sa.swapaxes(-1, -2)
    return store.swapaxes(-1, -2)[..., :m, :]


def dense(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    kb, nb = -(-k // 128), -(-n // 128)
    a, b = codes(rng, (m, k)), codes(rng, (n, k))
    sa = cupy.asarray(rng.uniform(0.5, 2, (m, kb)).astype(np.float32))
    sb = cupy.asarray(rng.uniform(0.5, 2, (nb, kb)).astype(np.float32))
    out = cupy.full((m, n), 0xFFFF, cupy.uint16).view(api.BF16)
    cugemm8.matmul(a, aligned(sa), b, sb, out=out)
    ref = (LUT[a] * cupy.repeat(sa.astype(cupy.float64), 128, 1)[:, :k]) @ \
          (LUT[b] * cupy.repeat(cupy.repeat(sb.astype(cupy.float64), 128, 0), 128, 1)[:n, :k]).T
    o = out.astype(cupy.float64)
    rms = float(cupy.sqrt(cupy.mean(ref * ref)))
    err = float(cupy.max(cupy.abs(o - ref) / (cupy.abs(ref) + 0.01 * rms)))
    nan = int(cupy.isnan(o).sum())
    return err, nan


def main() -> int:
    lib = library.current()
    print(lib.device_properties(cupy.cuda.runtime.getDevice()), flush=True)
    bad = 0
    for m, n, k in EDGE_SHAPES + [(s.m, s.n, s.k) for s in DENSE_SHAPES if s.label in TABLE_LABELS]:
        cfg = lib.choose("normal", m, n, k, 1, cugemm8.get_num_sms()).config
        err, nan = dense(m, n, k)
        ok = err <= REL_TOLERANCE and nan == 0
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} M={m:5d} N={n:6d} K={k:6d} {cfg.block_m}x{cfg.block_n}x{cfg.stages} "
              f"swz{cfg.swizzle_d}: err {err:.4f} unwritten {nan}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

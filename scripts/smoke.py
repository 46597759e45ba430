"""First-contact check of the GEMM kernels on a GPU, independent of the quantizers and the scale-layout
helper: random e4m3 codes and scales, a float64 reference on the GPU, one line per shape.

    python scripts/smoke.py            (exit status 1 if any shape is off)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import cupy  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import cugemm8  # noqa: E402
from cugemm8 import api, heuristics  # noqa: E402
from cugemm8.reference import REL_TOLERANCE  # noqa: E402

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
    print(cugemm8.runtime.device_properties(cupy.cuda.runtime.getDevice()), flush=True)
    bad = 0
    shapes = [(1, 8, 16), (64, 128, 128), (64, 2112, 7168), (128, 7168, 2048), (300, 136, 400), (1000, 4104, 2000),
              (4096, 2112, 7168), (4096, 7168, 2048), (129, 24576, 1536), (4096, 32768, 512), (65, 192, 1040)]
    for m, n, k in shapes:
        cfg = heuristics.choose("normal", m, n, k, 1, cugemm8.get_num_sms()).config
        err, nan = dense(m, n, k)
        ok = err <= REL_TOLERANCE and nan == 0
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} M={m:5d} N={n:6d} K={k:6d} {cfg.block_m}x{cfg.block_n}x{cfg.stages} "
              f"swz{cfg.swizzle_d}: err {err:.4f} unwritten {nan}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

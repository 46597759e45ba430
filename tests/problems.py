"""Problems for the GPU tier: random FP8 operands and their scales, poisoned outputs, float64
references and error metrics. Importing this module touches no GPU."""
from __future__ import annotations

import time

import cupy
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import cugemm8
from cugemm8.reference import REL_TOLERANCE

BF16 = np.dtype(ml_dtypes.bfloat16)
POISON = 0xFFFF                      # a bfloat16 NaN bit pattern
HANG_SECONDS = 30


# ----------------------------------------------------------------------------- operands
def normal(shape, seed):
    return cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32)


def quantize(x, w) -> tuple:
    """(a, a_scale, b, b_scale): x per token (scales row-major), w per block."""
    a, sa = cugemm8.per_token_cast_to_fp8(x)
    b, sb = cugemm8.per_block_cast_to_fp8(w)
    return a, sa, b, sb


def quantized(a_shape, b_shape, seed) -> tuple:
    """(a, a_scale in the kernel's layout, b, b_scale) of two independent random-normal tensors."""
    a, sa, b, sb = quantize(normal(a_shape, seed), normal(b_shape, seed + 1))
    return a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb


def make_dense(m, n, k, seed) -> tuple:
    """(x, w, a, a_scale, b, b_scale): the float32 inputs and their quantized forms."""
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    w = rng.standard_normal((n, k), dtype=cupy.float32)
    return (x, w, *quantize(x, w))


def make_masked(groups, max_m, n, k, seed) -> tuple:
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((groups, max_m, k), dtype=cupy.float32)
    w = rng.standard_normal((groups, n, k), dtype=cupy.float32)
    return (x, w, *quantize(x, w))


def contiguous_indices(rows_per_group: list[int], align: int | None = None) -> np.ndarray:
    """Expert ids, each expert's rows padded with -1 to a multiple of `align` (default: the contiguous alignment)."""
    align = align or cugemm8.get_m_alignment_for_contiguous_layout()
    idx = []
    for g, r in enumerate(rows_per_group):
        idx += [g] * r + [-1] * (-(-r // align) * align - r)
    return np.array(idx, dtype=np.int32)


def make_contiguous(rows_per_group, n, k, seed, align: int | None = None) -> tuple:
    """(x, w, a, a_scale, b, b_scale, m_indices) for experts of these row counts, each padded (contiguous_indices)."""
    idx = contiguous_indices(rows_per_group, align)
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((idx.size, k), dtype=cupy.float32)
    w = rng.standard_normal((len(rows_per_group), n, k), dtype=cupy.float32)
    return (x, w, *quantize(x, w), cupy.asarray(idx))


# ----------------------------------------------------------------------------- outputs
def poisoned(shape):
    return cupy.full(shape, POISON, dtype=cupy.uint16).view(BF16)  # NaN everywhere


def as_float(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32, exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


class Guarded:
    """An `out` for the call inside one poisoned uint16 buffer: `guard` elements before and after it
    and, for 2-D outputs, `pad` extra columns per row. `bits()` reads `out` back; `intact()` says
    nothing outside it was written."""

    def __init__(self, shape: tuple, guard: int = 4096, pad: int = 0):
        assert pad == 0 or len(shape) == 2
        self.shape, self.guard, self.pad = tuple(shape), guard, pad
        rows = int(np.prod(shape[:-1]))
        self.row = shape[-1] + pad
        self.buf = cupy.full(2 * guard + rows * self.row, POISON, dtype=cupy.uint16)
        u16 = self.buf[guard:guard + rows * self.row].reshape(rows, self.row)[:, :shape[-1]]
        b16 = self.buf.view(BF16)[guard:guard + rows * self.row].reshape(rows, self.row)[:, :shape[-1]]
        self.u16 = u16.reshape(shape) if len(shape) == 3 else u16
        self.out = b16.reshape(shape) if len(shape) == 3 else b16
        assert self.out.data.ptr % 16 == 0

    def bits(self) -> np.ndarray:
        return cupy.asnumpy(self.u16)

    def intact(self) -> bool:
        g = self.guard
        ok = bool((self.buf[:g] == POISON).all()) and bool((self.buf[-g:] == POISON).all())
        if self.pad:
            body = self.buf[g:-g].reshape(-1, self.row)
            ok = ok and bool((body[:, self.shape[-1]:] == POISON).all())
        return ok


def finish(what: str = "kernel") -> None:
    """Wait for the current stream, failing (instead of hanging the session) after HANG_SECONDS."""
    ev = cupy.cuda.Event()
    ev.record()
    deadline = time.monotonic() + HANG_SECONDS
    while not ev.done:
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not finish within {HANG_SECONDS} s (hang?)")
        time.sleep(0.0005)


# ----------------------------------------------------------------------------- references and metrics
def _lut():
    return cupy.asarray(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64))


def dequant_a(q, s, k):
    """[..., M, K] e4m3 bits with one scale per 1x128 tile -> float64."""
    return _lut()[q] * cupy.repeat(s.astype(cupy.float64), 128, axis=-1)[..., :k]


def dequant_b(q, s, n, k):
    """[..., N, K] e4m3 bits with one scale per 128x128 tile -> float64."""
    s = cupy.repeat(cupy.repeat(s.astype(cupy.float64), 128, axis=-2), 128, axis=-1)
    return _lut()[q] * s[..., :n, :k]


def normalized_error(out, ref):
    """max |out - ref| / (|ref| + 0.01 rms(ref)): see cugemm8.reference for the bound."""
    out = out.astype(cupy.float64)
    rms = float(cupy.sqrt(cupy.mean(ref * ref)))
    return float(cupy.max(cupy.abs(out - ref) / (cupy.abs(ref) + 0.01 * rms + 1e-30)))


def calc_diff(x, y):
    x, y = x.astype(cupy.float64), y.astype(cupy.float64)
    denom = float(cupy.sum(x * x + y * y))
    return 1.0 - 2.0 * float(cupy.sum(x * y)) / denom if denom else 0.0


def check_against_reference(out, a, sa, b, sb, x, w):
    """`out` is all written, within REL_TOLERANCE of the float64 product of the dequantized operands,
    and (where that is not too noisy) close to the product of the unquantized inputs x, w."""
    m, k = a.shape[-2:]
    n = b.shape[-2]
    assert not bool(cupy.isnan(out.astype(cupy.float32)).any()), "some outputs were not written"
    ref = dequant_a(a, sa, k) @ dequant_b(b, sb, n, k).swapaxes(-1, -2)
    err = normalized_error(out, ref)
    assert err <= REL_TOLERANCE, f"normalized error {err:.4f} > {REL_TOLERANCE} (M={m}, N={n}, K={k})"
    if k >= 128 and out.size >= 1024:
        # Against the unquantized product, calc_diff measures the e4m3 quantization itself (not the
        # kernel): below one 128-wide block of K, or over a handful of outputs, it is too noisy for
        # the 1e-3 bound (seen: 1.02e-3 at M=1, N=8, K=16).
        diff = calc_diff(out, x.astype(cupy.float64) @ w.astype(cupy.float64).swapaxes(-1, -2))
        assert diff < 1e-3, f"calc_diff {diff:.2e} against the unquantized product"


PROPERTY_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))

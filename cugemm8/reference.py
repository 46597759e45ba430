"""Host references for checking the GEMMs, and the tolerance they are checked with.

``reference_matmul`` dequantizes both operands (q * s per tile) in float64 and multiplies: the exact
answer for the quantized inputs (float64 rounding is far below anything the kernel can resolve).
Arrays may be NumPy or CuPy (copied to the host).
"""
from __future__ import annotations

import numpy as np

from .quantize import TILE, fp8_e4m3_to_float

# --------------------------------------------------------------------------- tolerance
ACC_BITS = 14           # significant bits the FP8 tensor-core accumulator keeps (derivation under REL_TOLERANCE)
STEPS_PER_BLOCK = 4     # wgmma k32 steps that accumulate one 128-wide K block
BLOCK_PEAK = 3.0        # largest partial sum / largest product of a block, in units of the block sum's rms
RMS_FLOOR = 0.01        # absolute floor of the normalization, as a fraction of rms(ref)
BF16_UNIT = 2.0 ** -8   # unit roundoff of the bfloat16 output (8 significant bits)

REL_TOLERANCE = STEPS_PER_BLOCK * BLOCK_PEAK * 2.0 ** -(ACC_BITS - 1) / RMS_FLOOR + BF16_UNIT
"""Bound on ``max_rel_error(out, ref)`` for random-normal inputs (about 0.150).

Derivation. Inside one 128-wide K block the tensor core adds exact e4m3 x e4m3 products in four k32
steps; each step aligns the new products with the running sum and keeps ~14 significant bits, so it
loses at most one unit in the last place, 2^-13 of the larger of the running sum and the products.
Both stay below ~3 sigma_b (sigma_b: rms of one block's sum), so one block is off by at most
e_b <= 4 * 3 * 2^-13 * sigma_b ~ 1.5e-3 sigma_b. Every 128 of K the kernel promotes the block sum
into FP32 (error 2^-24, negligible); the blocks' errors are independent, so over K/128 blocks
|out - ref| grows like sqrt(K/128) e_b while rms(ref) grows like sqrt(K/128) sigma_b: the bound
|out - ref| <= 1.5e-3 rms(ref) holds for any K. Normalized by |ref| + 0.01 rms(ref), it is worst where
ref ~ 0: 1.5e-3 / 0.01 = 0.146. Where |ref| is large the error is the bfloat16 rounding, at most
2^-8 relative; adding it gives 0.150. Measured maxima (DeepGEMM and cuBLASLt alike) are 0.02-0.06:
typical steps lose well under a full unit. A real defect (a missing or mis-scaled block, a wrong
row) shows up as an error of order 1 or more near the zeros of ref.
"""


def _host(x) -> np.ndarray:
    if hasattr(x, "__cuda_array_interface__"):
        import cupy

        return cupy.asnumpy(x)
    return np.asarray(x)


def max_rel_error(out, ref) -> float:
    """max |out - ref| / (|ref| + 0.01 rms(ref)) in float64 (0 for empty arrays)."""
    out = _host(out).astype(np.float64)
    ref = _host(ref).astype(np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"out and ref must have the same shape; got {out.shape} and {ref.shape}")
    if ref.size == 0:
        return 0.0
    err = np.abs(out - ref)
    den = np.abs(ref) + RMS_FLOOR * np.sqrt(np.mean(ref * ref))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(den > 0, err / den, np.where(err > 0, np.inf, 0.0))
    return float(np.max(ratio))


def error_bound(ref) -> np.ndarray:
    """Elementwise allowed |out - ref|: REL_TOLERANCE * (|ref| + 0.01 rms(ref))."""
    ref = _host(ref).astype(np.float64)
    rms = np.sqrt(np.mean(ref * ref)) if ref.size else 0.0
    return REL_TOLERANCE * (np.abs(ref) + RMS_FLOOR * rms)


def calc_diff(x, y) -> float:
    """1 - 2 sum(x y) / sum(x^2 + y^2) in float64: 0 for equal arrays (including all-zero ones)."""
    x = _host(x).astype(np.float64)
    y = _host(y).astype(np.float64)
    den = np.sum(x * x + y * y)
    if den == 0:
        return 0.0
    return float(1.0 - 2.0 * np.sum(x * y) / den)


# --------------------------------------------------------------------------- dequantization
def dequantize_per_token(q, scale) -> np.ndarray:
    """e4m3 bits [..., M, K] with one scale per 1x128 tile ([..., M, ceil(K/128)]) -> float64."""
    q, scale = _host(q), _host(scale).astype(np.float64)
    k = q.shape[-1]
    if scale.shape != q.shape[:-1] + (-(-k // TILE),):
        raise ValueError(f"scale must have shape {q.shape[:-1] + (-(-k // TILE),)}; got {scale.shape}")
    return fp8_e4m3_to_float(q).astype(np.float64) * np.repeat(scale, TILE, axis=-1)[..., :k]


def dequantize_per_block(q, scale) -> np.ndarray:
    """e4m3 bits [..., N, K] with one scale per 128x128 tile -> float64."""
    q, scale = _host(q), _host(scale).astype(np.float64)
    n, k = q.shape[-2:]
    want = q.shape[:-2] + (-(-n // TILE), -(-k // TILE))
    if scale.shape != want:
        raise ValueError(f"scale must have shape {want}; got {scale.shape}")
    full = np.repeat(np.repeat(scale, TILE, axis=-2), TILE, axis=-1)
    return fp8_e4m3_to_float(q).astype(np.float64) * full[..., :n, :k]


# --------------------------------------------------------------------------- GEMM references
def reference_matmul(a_q, a_scale, b_q, b_scale) -> np.ndarray:
    """D[M, N] = (A * a_scale) @ (B * b_scale)^T in float64. a_q [M, K], a_scale [M, ceil(K/128)]
    (logical shape, any strides), b_q [N, K], b_scale [ceil(N/128), ceil(K/128)]."""
    return _product(dequantize_per_token(a_q, a_scale), dequantize_per_block(b_q, b_scale))


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [M, K] @ b [N, K]^T of two dequantized operands."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"expected a [M, K] and b [N, K]; got {a.shape} and {b.shape}")
    return a @ b.T


def reference_grouped_contiguous(a_q, a_scale, b_q, b_scale, m_indices) -> np.ndarray:
    """Contiguous layout: row i uses group m_indices[i] of b ([G, N, K]); rows with a negative index
    come out as 0. Returns float64 [sum M, N]."""
    a = dequantize_per_token(a_q, a_scale)
    b = dequantize_per_block(b_q, b_scale)
    idx = _host(m_indices)
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.float64)
    for g in range(b.shape[0]):
        rows = idx == g
        out[rows] = a[rows] @ b[g].T
    return out


def reference_grouped_masked(a_q, a_scale, b_q, b_scale, masked_m) -> np.ndarray:
    """Masked layout: out[g, :masked_m[g]] = A[g] B[g]^T; rows from masked_m[g] on are 0.
    a_q [G, max_m, K], b_q [G, N, K]. Returns float64 [G, max_m, N]."""
    a = dequantize_per_token(a_q, a_scale)
    b = dequantize_per_block(b_q, b_scale)
    counts = _host(masked_m)
    out = np.zeros((a.shape[0], a.shape[1], b.shape[1]), dtype=np.float64)
    for g in range(a.shape[0]):
        m = int(min(max(counts[g], 0), a.shape[1]))
        out[g, :m] = a[g, :m] @ b[g].T
    return out


def reference_wgrad(a_q, a_scale, b_q, b_scale) -> np.ndarray:
    """The weight gradient's product A·Bᵀ in float64, both operands with 1x128 scales: a_q [M, K], a_scale
    [M, ceil(K/128)], b_q [N, K], b_scale [N, ceil(K/128)]. Returns float64 [M, N] (what is added into out)."""
    return _product(dequantize_per_token(a_q, a_scale), dequantize_per_token(b_q, b_scale))


def reference_k_grouped_wgrad(a_q, a_scale, b_q, b_scale, k_sizes) -> np.ndarray:
    """The k-grouped weight gradient's products in float64: group g is columns k_sizes[0] + ... + k_sizes[g-1]
    onwards, k_sizes[g] of them, of a_q [M, sum K] and b_q [N, sum K] (1x128 scales as reference_wgrad).
    Returns float64 [G, M, N]; a group with K = 0 gives zeros."""
    a = dequantize_per_token(a_q, a_scale)
    b = dequantize_per_token(b_q, b_scale)
    sizes = [int(s) for s in _host(k_sizes)]
    out = np.zeros((len(sizes), a.shape[0], b.shape[0]), dtype=np.float64)
    begin = 0
    for g, size in enumerate(sizes):
        out[g] = a[:, begin:begin + size] @ b[:, begin:begin + size].T
        begin += size
    return out

"""DeepGEMM's early names and calling convention over cugemm8, for code moving from DeepGEMM:

    import cugemm8.deep_gemm as deep_gemm
    deep_gemm.gemm_fp8_fp8_bf16_nt((a, a_scale), (b, b_scale), out)

Each GEMM takes (payload, scales) pairs and a required `out`, writes `out` and returns None, as DeepGEMM's
first API (through commit 8dfa329) did. Arguments are anything cugemm8 takes: torch tensors
(``float8_e4m3fn`` or uint8 payloads), CuPy or JAX arrays.

The stream: DeepGEMM runs on torch's current stream, which cugemm8 cannot ask torch for (it never imports
torch, and torch's array interface names no stream). These functions run on `stream=`, default CuPy's
current stream. On torch's default stream that is the same stream (the legacy default stream), so code that
never leaves it needs no change. Code on a side stream passes `stream=torch.cuda.current_stream()`. The
inputs' pending work is ordered before the GEMM either way (DLPack's stream handshake).

Differences from DeepGEMM (details and a table in docs/migration.md):
- `get_m_alignment_for_contiguous_layout()` returns cugemm8's 64, not DeepGEMM's 128: code that pads each
  expert's segment to it pads less. Segments padded to 128 are still accepted.
- A row-major `a_scale` is converted on each call, as DeepGEMM does (it with torch operations, cugemm8 with one
  copy kernel). During a CUDA graph capture cugemm8 refuses that conversion (`cugemm8.CaptureError`): convert it
  once beforehand with `get_col_major_tma_aligned_tensor`.
- `get_col_major_tma_aligned_tensor` returns a CuPy array (hand it back as it is, or `torch.from_dlpack` it).
- `set_num_sms` caps the current device only; DeepGEMM's cap is one value for the process.
- Bad arguments raise `TypeError`/`ValueError` naming the argument, where DeepGEMM asserts. Some inputs that
  DeepGEMM refuses are taken: uint8 payloads, padded row strides in the grouped layouts, a masked `max_m` that is
  not a multiple of the block height, and N = 0, K = 0 or a masked `max_m` of 0.
- Not provided: `wgrad_gemm_fp8_fp8_fp32_nt`, `k_grouped_wgrad_gemm_fp8_fp8_fp32_nt`, `calc_diff` (use
  `cugemm8.calc_diff` on CuPy or NumPy arrays), `bench`, `bench_kineto` and the `jit` module. The `DG_*`
  environment variables are not read (cugemm8's are `CUGEMM8_*`).
"""
from __future__ import annotations

from typing import Any

from . import api
from .layout import get_col_major_tma_aligned_tensor, get_tma_aligned_size
from .runtime import get_num_sms, set_num_sms

__all__ = ["gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
           "get_col_major_tma_aligned_tensor", "get_tma_aligned_size", "get_m_alignment_for_contiguous_layout",
           "get_num_sms", "set_num_sms", "ceil_div"]

get_m_alignment_for_contiguous_layout = api.get_m_alignment_for_contiguous_layout


def ceil_div(x: int, y: int) -> int:
    """The least integer >= x / y."""
    return (x + y - 1) // y


def _pair(value, name: str, what: str) -> tuple:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        shown = f"a {type(value).__name__} of length {len(value)}" if isinstance(value, (tuple, list)) \
            else type(value).__name__
        raise TypeError(f"{name} must be a pair {what}; got {shown}")
    return tuple(value)


def gemm_fp8_fp8_bf16_nt(lhs: tuple, rhs: tuple, out: Any, *, stream: Any = None) -> None:
    """out = (lhs[0] * lhs[1]) @ (rhs[0] * rhs[1])^T: lhs (e4m3 [M, K], float32 [M, ceil(K/128)]), rhs (e4m3 [N, K],
    float32 [ceil(N/128), ceil(K/128)]), out bfloat16 [M, N]. cugemm8.matmul with out=out."""
    a, a_scale = _pair(lhs, "lhs", "(a [M, K], a_scale [M, ceil(K/128)])")
    b, b_scale = _pair(rhs, "rhs", "(b [N, K], b_scale [ceil(N/128), ceil(K/128)])")
    _require_out(out)
    api.matmul(a, a_scale, b, b_scale, out=out, stream=stream)


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs: tuple, rhs: tuple, out: Any, m_indices: Any, *,
                                              stream: Any = None) -> None:
    """The contiguous MoE layout: lhs (e4m3 [sum M, K], scales), rhs (e4m3 [G, N, K], float32 [G, ceil(N/128),
    ceil(K/128)]), out bfloat16 [sum M, N], m_indices int32 [sum M] (-1 on padding rows).
    cugemm8.m_grouped_matmul_contiguous with out=out."""
    a, a_scale = _pair(lhs, "lhs", "(a [sum M, K], a_scale [sum M, ceil(K/128)])")
    b, b_scale = _pair(rhs, "rhs", "(b [G, N, K], b_scale [G, ceil(N/128), ceil(K/128)])")
    _require_out(out)
    api.m_grouped_matmul_contiguous(a, a_scale, b, b_scale, m_indices, out=out, stream=stream)


def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs: tuple, rhs: tuple, out: Any, masked_m: Any, expected_m: int, *,
                                          stream: Any = None) -> None:
    """The masked MoE layout: lhs (e4m3 [G, max_m, K], scales), rhs (e4m3 [G, N, K], scales), out bfloat16
    [G, max_m, N], masked_m int32 [G] on the device, expected_m a host hint.
    cugemm8.m_grouped_matmul_masked with out=out."""
    a, a_scale = _pair(lhs, "lhs", "(a [G, max_m, K], a_scale [G, max_m, ceil(K/128)])")
    b, b_scale = _pair(rhs, "rhs", "(b [G, N, K], b_scale [G, ceil(N/128), ceil(K/128)])")
    _require_out(out)
    api.m_grouped_matmul_masked(a, a_scale, b, b_scale, masked_m, expected_m, out=out, stream=stream)


def _require_out(out) -> None:
    if out is None:
        raise TypeError("out must be a bfloat16 device array (DeepGEMM's GEMMs write into out); got None")

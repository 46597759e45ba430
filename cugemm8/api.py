"""The public GEMM entry points: validate, pick a configuration, launch. Nothing here synchronizes the
host, so every call can be captured in a CUDA graph once its kernel has been compiled."""
from __future__ import annotations

import cupy
import ml_dtypes
import numpy as np

from . import runtime
from .heuristics import CONTIGUOUS_M_ALIGNMENT, choose
from .layout import get_col_major_tma_aligned_tensor
from .validation import as_device_array, check_contiguous, check_dense, check_masked, describe

BF16 = np.dtype(ml_dtypes.bfloat16)


def get_m_alignment_for_contiguous_layout() -> int:
    """Each expert's segment in the contiguous layout starts at a multiple of this many rows."""
    return CONTIGUOUS_M_ALIGNMENT


def _stream_ptr(stream) -> int:
    if stream is None:
        return cupy.cuda.get_current_stream().ptr
    ptr = getattr(stream, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    raise TypeError(f"stream must be a cupy.cuda.Stream (or anything with an int .ptr), or a raw stream "
                    f"handle int; got {type(stream).__name__}")


def _fp8(x):
    return x.view(cupy.uint8) if x.dtype == np.int8 else x


def _prepare(arrays: dict, device: int):
    """Device arrays and their descriptions, in the order given."""
    arrs = {name: (None if x is None else as_device_array(x, name)) for name, x in arrays.items()}
    infos = {name: (None if x is None else describe(x)) for name, x in arrs.items()}
    return arrs, infos


def _launch(layout: str, plan_m: int, rows: int, n: int, k: int, groups: int, device: int, a, sa, sa_ld: int,
            b, b_ld: int, sb, out, d_ld: int, layout_ptr: int, stream) -> None:
    plan = choose(layout, plan_m, n, k, groups, runtime.get_num_sms(device))
    launcher = runtime.get_launcher(plan.config, device, plan.grid, rows, a.strides[-2], b_ld, sa_ld, d_ld,
                                    (a.data.ptr, b.data.ptr, sa.data.ptr, out.data.ptr))
    launcher.launch(a.data.ptr, b.data.ptr, sa.data.ptr, out.data.ptr, sb.data.ptr, layout_ptr,
                    _stream_ptr(stream))


def matmul(a, a_scale, b, b_scale, *, out=None, stream=None):
    """D = (A * a_scale) @ (B * b_scale)^T in bfloat16.

    a: uint8 [M, K] (e4m3 bits); a_scale: float32 [M, ceil(K/128)], row-major or M-major TMA-aligned
    (see get_col_major_tma_aligned_tensor: that layout is taken without a copy); b: uint8 [N, K];
    b_scale: float32 [ceil(N/128), ceil(K/128)]. Returns `out` (allocated if None)."""
    device = cupy.cuda.runtime.getDevice()
    arrs, infos = _prepare({"a": a, "a_scale": a_scale, "b": b, "b_scale": b_scale, "out": out}, device)
    m, n, k, kind = check_dense(infos["a"], infos["a_scale"], infos["b"], infos["b_scale"], infos["out"], device)
    runtime.require_hopper(device)
    a, sa, b, sb, out = (arrs[x] for x in ("a", "a_scale", "b", "b_scale", "out"))
    if out is None:
        out = cupy.empty((m, n), dtype=BF16)
    if m == 0:
        return out
    if kind == "rowmajor":
        sa = get_col_major_tma_aligned_tensor(sa)
    kb = -(-k // 128)
    sa_ld = sa.strides[1] // 4 if kb > 1 else -(-m // 4) * 4
    _launch("normal", m, m, n, k, 1, device, _fp8(a), sa, sa_ld, _fp8(b), b.strides[0], sb, out,
            out.strides[0] // 2, 0, stream)
    return out


def m_grouped_matmul_contiguous(a, a_scale, b, b_scale, m_indices, *, out=None, stream=None):
    """MoE grouped GEMM, experts' rows concatenated: row i of D uses expert m_indices[i] of B.

    a: uint8 [sum M, K]; b: uint8 [G, N, K]; b_scale: float32 [G, ceil(N/128), ceil(K/128)];
    m_indices: int32 [sum M], -1 on padding rows (those rows of D come out as zeros). Each expert's
    segment starts at a multiple of get_m_alignment_for_contiguous_layout(); the expert of a
    128-row block is read from its first row."""
    device = cupy.cuda.runtime.getDevice()
    arrs, infos = _prepare({"a": a, "a_scale": a_scale, "b": b, "b_scale": b_scale, "m_indices": m_indices,
                            "out": out}, device)
    m, n, k, groups, kind = check_contiguous(infos["a"], infos["a_scale"], infos["b"], infos["b_scale"],
                                             infos["m_indices"], infos["out"], device)
    runtime.require_hopper(device)
    a, sa, b, sb, idx, out = (arrs[x] for x in ("a", "a_scale", "b", "b_scale", "m_indices", "out"))
    if out is None:
        out = cupy.empty((m, n), dtype=BF16)
    if m == 0:
        return out
    if kind == "rowmajor":
        sa = get_col_major_tma_aligned_tensor(sa)
    kb = -(-k // 128)
    sa_ld = sa.strides[1] // 4 if kb > 1 else -(-m // 4) * 4
    _launch("contiguous", m, m, n, k, groups, device, _fp8(a), sa, sa_ld, _fp8(b), b.strides[1], sb, out,
            out.strides[0] // 2, idx.data.ptr, stream)
    return out


def m_grouped_matmul_masked(a, a_scale, b, b_scale, masked_m, expected_m, *, out=None, stream=None):
    """MoE grouped GEMM with a fixed capacity per group: D[g, :masked_m[g]] = A[g] B[g]^T.

    a: uint8 [G, max_m, K]; a_scale: float32 [G, max_m, ceil(K/128)]; b: uint8 [G, N, K];
    masked_m: int32 [G] on the device (read only by the kernel: CUDA-graph safe); expected_m: a host
    hint of the typical rows per group, used only to choose the configuration. Rows of D at or past
    masked_m[g] are not written."""
    device = cupy.cuda.runtime.getDevice()
    arrs, infos = _prepare({"a": a, "a_scale": a_scale, "b": b, "b_scale": b_scale, "masked_m": masked_m,
                            "out": out}, device)
    max_m, n, k, groups, kind = check_masked(infos["a"], infos["a_scale"], infos["b"], infos["b_scale"],
                                             infos["masked_m"], expected_m, infos["out"], device)
    runtime.require_hopper(device)
    a, sa, b, sb, mm, out = (arrs[x] for x in ("a", "a_scale", "b", "b_scale", "masked_m", "out"))
    if out is None:
        out = cupy.empty((groups, max_m, n), dtype=BF16)
    if max_m == 0:
        return out
    if kind == "rowmajor":
        sa = get_col_major_tma_aligned_tensor(sa)
    kb = -(-k // 128)
    sa_ld = sa.strides[0] // 4 // kb
    _launch("masked", min(expected_m, max_m), max_m, n, k, groups, device, _fp8(a), sa, sa_ld, _fp8(b),
            b.strides[1], sb, out, out.strides[1] // 2, mm.data.ptr, stream)
    return out

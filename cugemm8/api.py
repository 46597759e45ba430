"""The public GEMM entry points: validate, pick a configuration, launch. Nothing here synchronizes the
host, so every call can be captured in a CUDA graph once its kernel has been compiled.

Host cost: a call is keyed by everything the checks and the configuration depend on (each array's
shape, strides, dtype, device and base-address alignment). The first call with a key runs the full
validation, the heuristic and the kernel/tensor-map setup; later calls with the same key go straight
to the launch, which only swaps the arrays' addresses into the cached tensor maps.
"""
from __future__ import annotations

from typing import NamedTuple

import cupy
import ml_dtypes
import numpy as np

from . import fp8_gemm, runtime
from .arrays import as_device_array, describe
from .heuristics import CONTIGUOUS_M_ALIGNMENT, choose
from .layout import get_col_major_tma_aligned_tensor, get_tma_aligned_size
from .validation import (check_contiguous, check_dense, check_expected_m, check_fp8_out, check_masked,
                         check_out_format)

BF16 = np.dtype(ml_dtypes.bfloat16)
_ND = cupy.ndarray
_get_device = cupy.cuda.runtime.getDevice
_current_stream = cupy.cuda.get_current_stream


def get_m_alignment_for_contiguous_layout() -> int:
    """Each expert's segment in the contiguous layout starts at a multiple of this many rows."""
    return CONTIGUOUS_M_ALIGNMENT


class Problem(NamedTuple):
    """What an entry point's checks found, all that the configuration and the launcher depend on."""
    layout: str             # "normal", "contiguous" or "masked"
    device: int
    rows: int               # rows of A and D (masked: max_m, per group)
    plan_m: int             # rows the heuristic plans for (masked: the expected rows per group)
    n: int
    k: int
    groups: int
    a_scale_kind: str       # "aligned" or "rowmajor" (converted on every call)
    out_shape: tuple        # shape of the result when the caller gives no `out`
    a_ld: int               # row strides: A and B in bytes (uint8), D in elements
    b_ld: int
    d_ld: int
    base_ptr: int           # a valid, 16-byte aligned address (A's) for the maps' first encode
    out_format: str = "bfloat16"  # heuristics.OUT_FORMATS


class _Prepared(NamedTuple):
    launcher: fp8_gemm.GemmLauncher | None  # None: nothing to compute (M == 0)
    out_shape: tuple                        # shape of the result when the caller gives no `out`
    convert_a_scale: bool                   # a_scale is row-major: convert it on every call
    fp8_out: bool = False                   # D is e4m3 with scales: the call returns (out, out_scale)


_prepared: dict[tuple, _Prepared] = {}
_MAX_PREPARED = 4096


def _key(layout: str, device: int, arrays: tuple, extra=None) -> tuple:
    # The SM cap (set_num_sms) decides the grid, so it is part of the key.
    parts = [layout, device, extra, runtime._num_sms_override.get(device)]
    for x in arrays:
        if x is None:
            parts.append(None)
        else:
            d = x.data
            parts += (x.shape, x.strides, x.dtype, d.ptr & 15, d.device_id)
    return tuple(parts)


def _device_arrays(names: tuple, arrays: tuple) -> tuple:
    """Every argument as a cupy.ndarray (foreign device arrays are taken zero-copy)."""
    return tuple(x if (x is None or type(x) is _ND) else as_device_array(x, name) for name, x in zip(names, arrays))


def _stream_ptr(stream) -> int:
    if stream is None:
        return _current_stream().ptr
    ptr = getattr(stream, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    raise TypeError(f"stream must be a cupy.cuda.Stream (or anything with an int .ptr), or a raw stream "
                    f"handle int; got {type(stream).__name__}")


def _prepare(key: tuple, problem: Problem) -> _Prepared:
    """Choose the configuration and build the launcher of a first-seen call; cache them under `key`."""
    p = problem
    runtime.require_hopper(p.device)
    launcher = None
    if p.rows:
        plan = choose(p.layout, p.plan_m, p.n, p.k, p.groups, runtime.get_num_sms(p.device), p.out_format)
        base = p.base_ptr   # each launch sets the real addresses
        launcher = fp8_gemm.get_launcher(plan.config, p.device, plan.grid, p.rows, p.a_ld, p.b_ld,
                                         get_tma_aligned_size(p.rows, 4), p.d_ld, (base, base, base, base))
    prep = _Prepared(launcher, p.out_shape, p.a_scale_kind == "rowmajor", p.out_format != "bfloat16")
    if len(_prepared) >= _MAX_PREPARED:
        _prepared.clear()
    _prepared[key] = prep
    return prep


def _describe_all(names: tuple, arrays: tuple) -> list:
    return [None if x is None else describe(x, name) for name, x in zip(names, arrays)]


def _operands(infos: list, n: int) -> tuple:
    """Problem's (a_ld, b_ld, d_ld, base_ptr), from the ArrayInfos of every layout's (a, a_scale, b, ..., out)."""
    a, b, out = infos[0], infos[2], infos[-1]
    return a.strides[-2], b.strides[-2], n if out is None else out.strides[-2], a.ptr


def empty_scale(shape: tuple):
    """Uninitialized float32 scales of `shape` ([M, KB] or [G, M, KB]) in the M-major TMA-aligned layout that
    a_scale takes without a copy (see get_col_major_tma_aligned_tensor): e4m3 output's out_scale."""
    *lead, m, kb = shape
    am = get_tma_aligned_size(m, 4)
    storage = cupy.empty((*lead, kb, am), dtype=cupy.float32)
    return storage.swapaxes(-1, -2)[..., :m, :]


def _run(prep: _Prepared, a, a_scale, b, b_scale, out, layout_ptr: int, stream, out_scale=None):
    stream_ptr = _stream_ptr(stream)  # checked before anything (the scale conversion) is launched
    if prep.fp8_out:
        if out is None:
            out = cupy.empty(prep.out_shape, dtype=cupy.uint8)
        if out_scale is None:
            out_scale = empty_scale(prep.out_shape[:-1] + (-(-prep.out_shape[-1] // 128),))
        result = (out, out_scale)
    else:
        if out is None:
            out = cupy.empty(prep.out_shape, dtype=BF16)
        result = out
    if prep.launcher is None:
        return result
    if prep.convert_a_scale:
        if stream is None:
            a_scale = get_col_major_tma_aligned_tensor(a_scale)
        else:
            with cupy.cuda.ExternalStream(stream_ptr):
                a_scale = get_col_major_tma_aligned_tensor(a_scale)
    prep.launcher.launch(a.data.ptr, b.data.ptr, a_scale.data.ptr, out.data.ptr, b_scale.data.ptr, layout_ptr,
                         stream_ptr, 0 if out_scale is None else out_scale.data.ptr)
    return result


_FORMATS = {("bfloat16", "float32"): "bfloat16", ("float8_e4m3", "float32"): "float8_e4m3",
            ("float8_e4m3", "ue8m0"): "float8_e4m3_ue8m0"}
_OUTPUT_DOC = """
    out_dtype: "bfloat16" (the default) or "float8_e4m3". With "float8_e4m3" the call returns (out, out_scale):
    out uint8 (e4m3 bits) with D's shape, out_scale float32 [..., ceil(N/128)] in the M-major layout that
    a_scale takes without a copy, so (out, out_scale) feeds the next GEMM as (a, a_scale). Per row and 128
    columns: amax of the FP32 results (floored at 1e-4), scale = amax / 448, payload = e4m3(x * 448 / amax),
    rounded to nearest even and saturated; scale_format="ue8m0" rounds each scale up to a power of two
    (payload x / scale). N must be a multiple of 16. `out_scale` (with `out`) writes in place; see
    empty_scale for its layout."""


def _check_fp8(fmt: str, out_info, out_scale_info, shape: tuple, dims: str, n: int, device: int) -> None:
    if fmt == "bfloat16":
        if out_scale_info is not None:
            raise ValueError("out_scale is only written with out_dtype='float8_e4m3'; got an out_scale with "
                             "out_dtype='bfloat16'")
    else:
        check_fp8_out(out_info, out_scale_info, shape, dims, n, device)


_DENSE_NAMES = ("a", "a_scale", "b", "b_scale", "out", "out_scale")


def matmul(a, a_scale, b, b_scale, *, out=None, out_dtype="bfloat16", scale_format="float32", out_scale=None,
           stream=None):
    """D = (A * a_scale) @ (B * b_scale)^T, in bfloat16 or e4m3 with per-row scales.

    a: uint8 [M, K] (e4m3 bits); a_scale: float32 [M, ceil(K/128)], row-major or M-major TMA-aligned
    (see get_col_major_tma_aligned_tensor: that layout is taken without a copy); b: uint8 [N, K];
    b_scale: float32 [ceil(N/128), ceil(K/128)]. Returns `out` (allocated if None).""" + _OUTPUT_DOC + """
    """
    fmt = _FORMATS.get((out_dtype, scale_format)) or check_out_format(out_dtype, scale_format)
    arrays = (a, a_scale, b, b_scale, out, out_scale)
    if not all(x is None or type(x) is _ND for x in arrays):
        arrays = _device_arrays(_DENSE_NAMES, arrays)
    device = _get_device()
    key = _key("normal", device, arrays, fmt)
    prep = _prepared.get(key)
    if prep is None:
        infos = _describe_all(_DENSE_NAMES, arrays)
        fp8 = fmt != "bfloat16"
        m, n, k, kind = check_dense(*infos[:4], None if fp8 else infos[4], device)
        _check_fp8(fmt, infos[4], infos[5], (m, n), "[M, N]", n, device)
        prep = _prepare(key, Problem("normal", device, m, m, n, k, 1, kind, (m, n), *_operands(infos[:5], n), fmt))
    return _run(prep, *arrays[:5], 0, stream, arrays[5])


_CONTIGUOUS_NAMES = ("a", "a_scale", "b", "b_scale", "m_indices", "out", "out_scale")


def m_grouped_matmul_contiguous(a, a_scale, b, b_scale, m_indices, *, out=None, out_dtype="bfloat16",
                                scale_format="float32", out_scale=None, stream=None):
    """MoE grouped GEMM, experts' rows concatenated: row i of D uses expert m_indices[i] of B.

    a: uint8 [sum M, K]; b: uint8 [G, N, K]; b_scale: float32 [G, ceil(N/128), ceil(K/128)];
    m_indices: int32 [sum M], -1 on padding rows (those rows of D come out as zeros). Each expert's
    segment starts at a multiple of get_m_alignment_for_contiguous_layout() (64); the expert of
    each 64-row slab is read from the slab's first row, and rows whose id is not an expert (-1, or
    >= G) come out as zeros (with e4m3 output: a zero payload and the scale of amax 1e-4).""" + _OUTPUT_DOC + """
    """
    fmt = _FORMATS.get((out_dtype, scale_format)) or check_out_format(out_dtype, scale_format)
    arrays = _device_arrays(_CONTIGUOUS_NAMES, (a, a_scale, b, b_scale, m_indices, out, out_scale))
    device = _get_device()
    key = _key("contiguous", device, arrays, fmt)
    prep = _prepared.get(key)
    if prep is None:
        infos = _describe_all(_CONTIGUOUS_NAMES, arrays)
        fp8 = fmt != "bfloat16"
        m, n, k, groups, kind = check_contiguous(*infos[:5], None if fp8 else infos[5], device)
        _check_fp8(fmt, infos[5], infos[6], (m, n), "[sum M, N]", n, device)
        prep = _prepare(key, Problem("contiguous", device, m, m, n, k, groups, kind, (m, n),
                                     *_operands(infos[:6], n), fmt))
    a, a_scale, b, b_scale, m_indices, out, out_scale = arrays
    return _run(prep, a, a_scale, b, b_scale, out, m_indices.data.ptr, stream, out_scale)


_MASKED_NAMES = ("a", "a_scale", "b", "b_scale", "masked_m", "out", "out_scale")


def m_grouped_matmul_masked(a, a_scale, b, b_scale, masked_m, expected_m, *, out=None, out_dtype="bfloat16",
                            scale_format="float32", out_scale=None, stream=None):
    """MoE grouped GEMM with a fixed capacity per group: D[g, :masked_m[g]] = A[g] B[g]^T.

    a: uint8 [G, max_m, K]; a_scale: float32 [G, max_m, ceil(K/128)]; b: uint8 [G, N, K];
    masked_m: int32 [G] on the device (read only by the kernel: CUDA-graph safe); expected_m: a host
    hint of the typical rows per group, used only to choose the configuration. Rows of D at or past
    masked_m[g] are not written (with e4m3 output, nor are their scales).""" + _OUTPUT_DOC + """
    """
    fmt = _FORMATS.get((out_dtype, scale_format)) or check_out_format(out_dtype, scale_format)
    arrays = _device_arrays(_MASKED_NAMES, (a, a_scale, b, b_scale, masked_m, out, out_scale))
    if type(expected_m) is not int:
        expected_m = check_expected_m(expected_m)
    device = _get_device()
    key = _key("masked", device, arrays, (expected_m, fmt))
    prep = _prepared.get(key)
    if prep is None:
        infos = _describe_all(_MASKED_NAMES, arrays)
        fp8 = fmt != "bfloat16"
        max_m, n, k, groups, kind = check_masked(*infos[:5], expected_m, None if fp8 else infos[5], device)
        _check_fp8(fmt, infos[5], infos[6], (groups, max_m, n), "[G, max_m, N]", n, device)
        prep = _prepare(key, Problem("masked", device, max_m, min(expected_m, max_m) or 1, n, k, groups, kind,
                                     (groups, max_m, n), *_operands(infos[:6], n), fmt))
    a, a_scale, b, b_scale, masked_m, out, out_scale = arrays
    return _run(prep, a, a_scale, b, b_scale, out, masked_m.data.ptr, stream, out_scale)

"""The public GEMM entry points: validate, pick a configuration, launch. Nothing here synchronizes the
host, so every call can be captured in a CUDA graph once its kernel has been compiled.

Host cost: a call is keyed by everything the checks and the configuration depend on (each array's
shape, strides, dtype, device and base-address alignment). The first call with a key runs the full
validation, the heuristic and the kernel/tensor-map setup; later calls with the same key go straight
to the launch, which only swaps the arrays' addresses into the cached tensor maps.
"""
from __future__ import annotations

import logging
import sys
from typing import Any, NamedTuple, Union

import cupy
import ml_dtypes
import numpy as np

from . import envvars, fp8_gemm, heuristics_small_m, runtime, small_m
from .arrays import StreamRef, as_device_arrays, describe, stream_handle
from .errors import CaptureError
from .heuristics import CONTIGUOUS_M_ALIGNMENT, choose
from .layout import get_col_major_tma_aligned_tensor, get_tma_aligned_size
from .validation import (check_contiguous, check_dense, check_expected_m, check_fp8_out, check_masked,
                         check_out_format)

log = logging.getLogger(__name__)
BF16 = np.dtype(ml_dtypes.bfloat16)
_ND = cupy.ndarray
_get_device = runtime.current_device
_is_capturing = cupy.cuda.runtime.streamIsCapturing

Array = Any        # a CUDA device array: cupy.ndarray, a torch tensor, a JAX array, ... (see README, "Arrays")
Stream = Any       # None, a raw handle int, a cupy/torch stream or anything with __cuda_stream__
Result = Union[Array, "tuple[Array, Array]"]


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
    launcher: fp8_gemm.GemmLauncher | small_m.SmallMLauncher | None  # None: nothing to compute (M == 0)
    out_shape: tuple                        # shape of the result when the caller gives no `out`
    convert_a_scale: bool                   # a_scale is row-major: convert it on every call
    out_format: str = "bfloat16"            # not bf16: D is e4m3 with scales, the call returns (out, out_scale)
    zero_k: str = ""                        # K == 0 with a non-empty D: the layout whose D is filled, not computed


_prepared: dict[tuple, _Prepared] = {}
_MAX_PREPARED = 4096


def _key(layout: str, device: int, arrays: tuple, extra=None) -> tuple:
    # The SM cap (set_num_sms) decides the grid, so it is part of the key.
    parts = [layout, device, extra, runtime._num_sms_override.get(device), heuristics_small_m.enabled()]
    for x in arrays:
        if x is None:
            parts.append(None)
        else:
            d = x.data
            parts += (x.shape, x.strides, x.dtype, d.ptr & 15, d.device_id)
    return tuple(parts)


def _prepare(key: tuple, problem: Problem) -> _Prepared:
    """Choose the configuration and build the launcher of a first-seen call; cache them under `key`."""
    p = problem
    runtime.require_hopper(p.device)
    launcher = None
    small = heuristics_small_m.for_call(p.layout, p.rows, p.n, p.k, runtime.get_num_sms(p.device), p.out_format)
    if small is not None:
        launcher = small_m.SmallMLauncher(small, p.device, p.rows, p.a_ld, p.b_ld, get_tma_aligned_size(p.rows, 4),
                                          p.d_ld)
        _report(p, f"{small}, grid {small.grid}")
    elif p.rows and p.n and p.k:
        plan = choose(p.layout, p.plan_m, p.n, p.k, p.groups, runtime.get_num_sms(p.device), p.out_format)
        base = p.base_ptr   # each launch sets the real addresses
        launcher = fp8_gemm.get_launcher(plan.config, p.device, plan.grid, p.rows, p.a_ld, p.b_ld,
                                         get_tma_aligned_size(p.rows, 4), p.d_ld, (base, base, base, base))
        _report(p, f"{fp8_gemm.cfg_str(plan.config)}, split K {plan.config.split_k}, grid {plan.grid}")
    zero_k = p.layout if (p.rows and p.n and not p.k) else ""
    prep = _Prepared(launcher, p.out_shape, p.a_scale_kind == "rowmajor", p.out_format, zero_k)
    if len(_prepared) >= _MAX_PREPARED:
        _prepared.clear()
    _prepared[key] = prep
    return prep


def _report(p: Problem, config: str) -> None:
    """The configuration a new call signature got: on the cugemm8.api logger, and on stderr with
    CUGEMM8_PRINT_CONFIGS."""
    line = f"{p.layout} M={p.plan_m} N={p.n} K={p.k} G={p.groups} on device {p.device}: {config}"
    log.info("configuration: %s", line)
    if envvars.flag(envvars.PRINT_CONFIGS):
        print(f"cugemm8: {line}", file=sys.stderr)


def _describe_all(names: tuple, arrays: tuple) -> list:
    return [None if x is None else describe(x, name) for name, x in zip(names, arrays)]


def _operands(infos: list, n: int) -> tuple:
    """Problem's (a_ld, b_ld, d_ld, base_ptr), from the ArrayInfos of every layout's (a, a_scale, b, ..., out)."""
    a, b, out = infos[0], infos[2], infos[-1]
    return a.strides[-2], b.strides[-2], n if out is None else out.strides[-2], a.ptr


def empty_scale(shape: tuple) -> cupy.ndarray:
    """Uninitialized float32 scales of `shape` ([M, KB] or [G, M, KB]) in the M-major TMA-aligned layout that
    a_scale takes without a copy (see get_col_major_tma_aligned_tensor): e4m3 output's out_scale."""
    *lead, m, kb = shape
    am = get_tma_aligned_size(m, 4)
    storage = cupy.empty((*lead, kb, am), dtype=cupy.float32)
    return storage.swapaxes(-1, -2)[..., :m, :]


def _refuse_capture(stream_ptr: int, what: str) -> None:
    """Raise CaptureError if `stream_ptr` is capturing a CUDA graph: an allocation there would be replayed into
    memory the pool has since handed to someone else."""
    try:
        capturing = _is_capturing(stream_ptr)
    except cupy.cuda.runtime.CUDARuntimeError:   # the legacy stream while another captures: unsafe too
        capturing = True
    if capturing:
        raise CaptureError(f"this call would {what} while stream {stream_ptr:#x} captures a CUDA graph; a replay "
                           "would write to memory the pool has since reused. Pass out= (and out_scale=) and an "
                           "M-major a_scale (get_col_major_tma_aligned_tensor, once, before capture)")


def _run(prep: _Prepared, a, a_scale, b, b_scale, out, index, stream_ptr: int, out_scale=None):
    """Allocate what the caller did not pass, then launch (or fill, or nothing). `index`: m_indices or masked_m."""
    fp8 = prep.out_format != "bfloat16"
    if out is None or (fp8 and out_scale is None):
        _refuse_capture(stream_ptr, "allocate its result")
        if out is None:
            out = cupy.empty(prep.out_shape, dtype=cupy.uint8 if fp8 else BF16)
        if fp8 and out_scale is None:
            out_scale = empty_scale(prep.out_shape[:-1] + (-(-prep.out_shape[-1] // 128),))
    if prep.launcher is None:
        if prep.zero_k:
            _fill_zero_k(prep, out, out_scale, index, stream_ptr)
        return (out, out_scale) if fp8 else out
    if prep.convert_a_scale:
        _refuse_capture(stream_ptr, "convert a row-major a_scale into a new array")
        with cupy.cuda.Stream.from_external(StreamRef(stream_ptr)):
            a_scale = get_col_major_tma_aligned_tensor(a_scale)
    prep.launcher.launch(a.data.ptr, b.data.ptr, a_scale.data.ptr, out.data.ptr, b_scale.data.ptr,
                         0 if index is None else index.data.ptr,
                         stream_ptr, 0 if out_scale is None else out_scale.data.ptr)
    return (out, out_scale) if fp8 else out


_zero_k_rows = cupy.ElementwiseKernel(
    "raw int32 masked_m, int32 rows, int32 cols, T value", "T out",
    "if ((i / cols) % rows < masked_m[i / (cols * rows)]) out = value;", "cugemm8_fill_masked_rows")


def _fill_zero_k(prep: _Prepared, out, out_scale, index, stream_ptr: int) -> None:
    """K == 0: D is zero (e4m3: a zero payload and the scale of the amax floor, as for padding rows). The masked
    layout writes only the rows below masked_m[g]."""
    from .quantize import AMAX_FLOOR, quantize_scale

    targets = [(out.view(cupy.uint8 if out.itemsize == 1 else cupy.uint16), 0)]
    if out_scale is not None:
        fmt = "ue8m0" if prep.out_format.endswith("ue8m0") else "float32"
        targets.append((out_scale, quantize_scale(np.float32(AMAX_FLOOR), fmt)[0]))
    with cupy.cuda.Stream.from_external(StreamRef(stream_ptr)):
        for array, value in targets:
            if prep.zero_k == "masked":
                groups, rows, cols = array.shape
                _zero_k_rows(index, rows, cols, array.dtype.type(value), array)
            else:
                array.fill(value)


def _as_given(result, out, out_scale):
    """The caller's own `out`/`out_scale` objects in place of their cupy views: a torch `out` comes back as itself."""
    if isinstance(result, tuple):
        return (result[0] if out is None else out, result[1] if out_scale is None else out_scale)
    return result if out is None else out


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


def matmul(a: Array, a_scale: Array, b: Array, b_scale: Array, *, out: Array | None = None,
           out_dtype: str = "bfloat16", scale_format: str = "float32", out_scale: Array | None = None,
           stream: Stream = None) -> Result:
    """D = (A * a_scale) @ (B * b_scale)^T, in bfloat16 or e4m3 with per-row scales.

    a: uint8 [M, K] (e4m3 bits); a_scale: float32 [M, ceil(K/128)], row-major or M-major TMA-aligned
    (see get_col_major_tma_aligned_tensor: that layout is taken without a copy); b: uint8 [N, K];
    b_scale: float32 [ceil(N/128), ceil(K/128)]. Returns `out` (allocated if None).""" + _OUTPUT_DOC + """
    """
    fmt = _FORMATS.get((out_dtype, scale_format)) or check_out_format(out_dtype, scale_format)
    given = (a, a_scale, b, b_scale, out, out_scale)
    arrays = given
    if not all(x is None or type(x) is _ND for x in given):
        arrays = as_device_arrays(_DENSE_NAMES, given, stream)
    stream_ptr = stream_handle(stream)
    device = _get_device()
    key = _key("normal", device, arrays, fmt)
    prep = _prepared.get(key)
    if prep is None:
        infos = _describe_all(_DENSE_NAMES, arrays)
        fp8 = fmt != "bfloat16"
        m, n, k, kind = check_dense(*infos[:4], None if fp8 else infos[4], device)
        _check_fp8(fmt, infos[4], infos[5], (m, n), "[M, N]", n, device)
        prep = _prepare(key, Problem("normal", device, m, m, n, k, 1, kind, (m, n), *_operands(infos[:5], n), fmt))
    result = _run(prep, *arrays[:5], None, stream_ptr, arrays[5])
    return result if arrays is given else _as_given(result, out, out_scale)


_CONTIGUOUS_NAMES = ("a", "a_scale", "b", "b_scale", "m_indices", "out", "out_scale")


def m_grouped_matmul_contiguous(a: Array, a_scale: Array, b: Array, b_scale: Array, m_indices: Array, *,
                                out: Array | None = None, out_dtype: str = "bfloat16", scale_format: str = "float32",
                                out_scale: Array | None = None, stream: Stream = None) -> Result:
    """MoE grouped GEMM, experts' rows concatenated: row i of D uses expert m_indices[i] of B.

    a: uint8 [sum M, K]; b: uint8 [G, N, K]; b_scale: float32 [G, ceil(N/128), ceil(K/128)];
    m_indices: int32 [sum M], -1 on padding rows (those rows of D come out as zeros). Each expert's
    segment starts at a multiple of get_m_alignment_for_contiguous_layout() (64); the expert of
    each 64-row slab is read from the slab's first row, and rows whose id is not an expert (-1, or
    >= G) come out as zeros (with e4m3 output: a zero payload and the scale of amax 1e-4).""" + _OUTPUT_DOC + """
    """
    fmt = _FORMATS.get((out_dtype, scale_format)) or check_out_format(out_dtype, scale_format)
    arrays = as_device_arrays(_CONTIGUOUS_NAMES, (a, a_scale, b, b_scale, m_indices, out, out_scale), stream)
    stream_ptr = stream_handle(stream)
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
    result = _run(prep, *arrays[:4], arrays[5], arrays[4], stream_ptr, arrays[6])
    return _as_given(result, out, out_scale)


_MASKED_NAMES = ("a", "a_scale", "b", "b_scale", "masked_m", "out", "out_scale")


def m_grouped_matmul_masked(a: Array, a_scale: Array, b: Array, b_scale: Array, masked_m: Array, expected_m: int, *,
                            out: Array | None = None, out_dtype: str = "bfloat16", scale_format: str = "float32",
                            out_scale: Array | None = None, stream: Stream = None) -> Result:
    """MoE grouped GEMM with a fixed capacity per group: D[g, :masked_m[g]] = A[g] B[g]^T.

    a: uint8 [G, max_m, K]; a_scale: float32 [G, max_m, ceil(K/128)]; b: uint8 [G, N, K];
    masked_m: int32 [G] on the device (read only by the kernel: CUDA-graph safe); expected_m: a host
    hint of the typical rows per group, used only to choose the configuration. Rows of D at or past
    masked_m[g] are not written (with e4m3 output, nor are their scales).""" + _OUTPUT_DOC + """
    """
    fmt = _FORMATS.get((out_dtype, scale_format)) or check_out_format(out_dtype, scale_format)
    arrays = as_device_arrays(_MASKED_NAMES, (a, a_scale, b, b_scale, masked_m, out, out_scale), stream)
    stream_ptr = stream_handle(stream)
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
    result = _run(prep, *arrays[:4], arrays[5], arrays[4], stream_ptr, arrays[6])
    return _as_given(result, out, out_scale)

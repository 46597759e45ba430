"""cugemm8's GEMMs for JAX, under ``jax.jit`` too.

    import cugemm8.jax as cgj
    d = jax.jit(lambda a, sa, b, sb: cgj.matmul(a, sa, b, sb) * 2)(a, sa, b, sb)

Each GEMM is an XLA custom call made with ``jax.experimental.buffer_callback``: XLA hands the callback
its device buffers and its stream, and the callback launches cugemm8's kernel on that stream. The
kernel's tensor maps follow the buffers: every launch writes the buffers' current addresses into them
(``GemmLauncher.launch``), since XLA may place them anywhere from one call to the next. For the same
reason the call is not captured into XLA's command buffers (``command_buffer_compatible=False``): a
captured launch would keep the first call's addresses.

JAX arrays are row-major, so A's scales, which the kernel reads M-major, are padded and transposed
by XLA in the same computation (a few KB per call). FP8 arrays may be ``float8_e4m3fn`` or uint8
bits; e4m3 output comes back as ``float8_e4m3fn`` with row-major float32 scales, ready for the next
GEMM. JAX is imported when a function here is first called, not when cugemm8 is imported.
No differentiation rules and no vmap: these are inference/forward kernels.
"""
from __future__ import annotations

import functools
from typing import Any

import cupy
import ml_dtypes
import numpy as np

from . import api
from .arrays import FLOAT32, UINT8, ArrayInfo
from .dlpack import data_pointer, from_dlpack
from .layout import aligned_strides, get_tma_aligned_size
from .validation import (check_contiguous, check_dense, check_expected_m, check_fp8_out, check_masked,
                         check_out_format)

_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
_Result = Any   # a jax.Array D, or (D, D's scales) with e4m3 output (JAX is not imported to name its types)


def matmul(a, a_scale, b, b_scale, *, out_dtype: str = "bfloat16", scale_format: str = "float32") -> _Result:
    """``cugemm8.matmul`` on JAX arrays: a [M, K] e4m3 (float8_e4m3fn or uint8), a_scale float32 [M, ceil(K/128)],
    b [N, K] e4m3, b_scale float32 [ceil(N/128), ceil(K/128)]. Returns D [M, N] bfloat16, or with
    out_dtype="float8_e4m3" (D float8_e4m3fn, D's scales float32 [M, ceil(N/128)])."""
    return _function("normal", _format(out_dtype, scale_format), 0)(a, a_scale, b, b_scale)


def m_grouped_matmul_contiguous(a, a_scale, b, b_scale, m_indices, *, out_dtype: str = "bfloat16",
                                scale_format: str = "float32") -> _Result:
    """``cugemm8.m_grouped_matmul_contiguous`` on JAX arrays (m_indices int32 [sum M])."""
    return _function("contiguous", _format(out_dtype, scale_format), 0)(a, a_scale, b, b_scale, m_indices)


def m_grouped_matmul_masked(a, a_scale, b, b_scale, masked_m, expected_m: int, *, out_dtype: str = "bfloat16",
                            scale_format: str = "float32") -> _Result:
    """``cugemm8.m_grouped_matmul_masked`` on JAX arrays (masked_m int32 [G]; expected_m a Python int, static).
    Rows at or past masked_m[g] of D are unspecified: XLA's output buffer is not initialized there."""
    expected_m = check_expected_m(expected_m)
    return _function("masked", _format(out_dtype, scale_format), expected_m)(a, a_scale, b, b_scale, masked_m)


def _format(out_dtype, scale_format) -> str:
    return check_out_format(out_dtype, scale_format)


_NAMES = {"normal": ("a", "a_scale", "b", "b_scale"), "contiguous": ("a", "a_scale", "b", "b_scale", "m_indices"),
          "masked": ("a", "a_scale", "b", "b_scale", "masked_m")}


def _info(x, name: str, strides: tuple | None = None) -> ArrayInfo:
    """An abstract (traced) JAX array described as the checks expect: C-contiguous unless `strides` is given,
    an aligned address, device 0; float8_e4m3fn is its uint8 bits."""
    shape = tuple(int(d) for d in x.shape)
    dtype = np.dtype(x.dtype)
    if dtype == _E4M3:
        dtype = UINT8
    if strides is None:
        strides, step = [], 1
        for extent in reversed(shape):
            strides.append(step)
            step *= extent
        strides = tuple(reversed(strides))
    return ArrayInfo(shape, strides, dtype, 0, 0)


@functools.lru_cache(maxsize=None)
def _function(layout: str, fmt: str, expected_m: int):
    """The jitted JAX function of one layout, output format and expected_m."""
    import jax
    import jax.numpy as jnp

    fp8 = fmt != "bfloat16"
    names = _NAMES[layout]

    def run(*operands):
        infos = [_info(x, name) for name, x in zip(names, operands)]
        a_scale = operands[1]
        if infos[1].dtype == FLOAT32 and len(infos[1].shape) == len(infos[0].shape):
            # The checks see a_scale in the layout it will have: M-major, padded (the pad below).
            infos[1] = infos[1]._replace(strides=aligned_strides(infos[1].shape))
        if layout == "normal":
            m, n, k, _ = check_dense(*infos, None, 0)
            rows, lead = m, ()
        elif layout == "contiguous":
            m, n, k, _, _ = check_contiguous(*infos, None, 0)
            rows, lead = m, ()
        else:
            rows, n, k, groups, _ = check_masked(*infos, expected_m, None, 0)
            lead = (groups,)
        if fp8:
            check_fp8_out(None, None, lead + (rows, n), "[..., N]", n, 0)
        groups = lead[0] if lead else (infos[2].shape[0] if layout == "contiguous" else 1)
        problem = api.Problem(layout, 0, rows, (min(expected_m, rows) or 1) if layout == "masked" else rows, n, k,
                              groups, "aligned", lead + (rows, n), k, k, n, 0, fmt)
        # a_scale [..., M, KB] -> storage [..., KB, aligned M] (row-major), the kernel's layout.
        pad = get_tma_aligned_size(rows, 4) - rows
        storage = jnp.swapaxes(a_scale, -1, -2)
        storage = jnp.pad(storage, [(0, 0)] * (storage.ndim - 1) + [(0, pad)])
        args = (operands[0], storage, *operands[2:])   # e4m3 arrays pass as they are (DLPack: uint8 bits)
        d = jax.ShapeDtypeStruct(lead + (rows, n), jnp.float8_e4m3fn if fp8 else jnp.bfloat16)
        if fp8:
            nb = (n + 127) >> 7
            shapes = (d, jax.ShapeDtypeStruct(lead + (nb, rows + pad), jnp.float32))
        else:
            shapes = d
        call = jax.experimental.buffer_callback.buffer_callback(
            functools.partial(_launch, problem, expected_m), shapes)
        result = call(*args)
        if not fp8:
            return result
        d, scale_storage = result
        return d, jnp.swapaxes(scale_storage[..., :rows], -1, -2)

    import jax.experimental.buffer_callback  # noqa: F401  (the submodule is not imported by `import jax`)

    return jax.jit(run)


def _launch(problem: api.Problem, expected_m: int, ctx, out, *buffers) -> None:
    """The buffer callback: launch cugemm8's kernel on XLA's stream. The buffers' shapes were checked when the
    function was traced and XLA's buffers are compact, so a launch needs only their addresses (NOTES.md, v21:
    building array views cost ~10 µs per buffer). The launcher is prepared once per device."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    a_ptr, device = data_pointer(buffers[0])
    prep = _prepared.get((problem, device))
    if prep is None:
        prep = _prepare(problem, device, a_ptr)
    launcher = prep.launcher
    if launcher is None:   # nothing to compute, or K = 0: the general path fills the result
        _launch_general(problem, expected_m, ctx.stream, outs, buffers)
        return
    ptrs = [data_pointer(x)[0] for x in buffers[1:]]
    d_scale = data_pointer(outs[1])[0] if len(outs) > 1 else 0
    launcher.launch(a_ptr, ptrs[1], ptrs[0], data_pointer(outs[0])[0], ptrs[2], ptrs[3] if len(ptrs) > 3 else 0,
                    ctx.stream, d_scale)


_prepared: dict = {}


def _prepare(problem: api.Problem, device: int, a_ptr: int):
    with cupy.cuda.Device(device):
        prep = api._prepare(("jax", problem, device), problem._replace(device=device, base_ptr=a_ptr))
    _prepared[(problem, device)] = prep
    return prep


def _launch_general(problem: api.Problem, expected_m: int, stream: int, outs, buffers) -> None:
    """The API call on cupy views of the buffers, for the cases with no kernel to launch (M, N or K zero)."""
    names = _NAMES[problem.layout]
    arrays = [from_dlpack(x, name, None) for name, x in zip(names, buffers)]
    fp8 = problem.out_format != "bfloat16"
    rows = problem.rows
    d = from_dlpack(outs[0], "out", None)
    d_scale = _m_major(from_dlpack(outs[1], "out_scale", None), rows) if fp8 else None
    a, a_scale, b, b_scale = arrays[0], _m_major(arrays[1], rows), arrays[2], arrays[3]
    out_dtype, scale_format = ("float8_e4m3", "ue8m0" if problem.out_format.endswith("ue8m0") else "float32") \
        if fp8 else ("bfloat16", "float32")
    kwargs = dict(out=d, out_dtype=out_dtype, scale_format=scale_format, out_scale=d_scale, stream=stream)
    with cupy.cuda.Device(a.data.device_id):
        if problem.layout == "normal":
            api.matmul(a, a_scale, b, b_scale, **kwargs)
        elif problem.layout == "contiguous":
            api.m_grouped_matmul_contiguous(a, a_scale, b, b_scale, arrays[4], **kwargs)
        else:
            api.m_grouped_matmul_masked(a, a_scale, b, b_scale, arrays[4], expected_m, **kwargs)


def _m_major(storage, rows: int):
    """The [..., M, KB] view of M-major scale storage [..., KB, aligned M]."""
    return storage.swapaxes(-1, -2)[..., :rows, :]


__all__ = ["matmul", "m_grouped_matmul_contiguous", "m_grouped_matmul_masked"]

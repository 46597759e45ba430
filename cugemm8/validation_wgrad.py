"""Argument checks for the weight-gradient GEMMs (``wgrad_matmul``, ``k_grouped_wgrad_matmul``), in the style of
``cugemm8.validation``: pure functions over ``ArrayInfo`` descriptions that return the problem sizes or raise
``TypeError``/``ValueError`` naming the argument, the rule and the value, before anything is launched.

Both operands carry 1x128 scales along K (the token dimension): ``a_scale`` [M, ceil(K/128)] and ``b_scale``
[N, ceil(K/128)], each row-major or in the M-major TMA-aligned layout (taken without a copy). ``out`` is
float32 and is added into; ``c``, if given and not ``out`` itself, is the addend instead.
"""
from __future__ import annotations

from .arrays import FLOAT32, INT32, ArrayInfo
from .layout import is_tma_aligned
from .validation import FP8_DTYPES, _FP8, _a_scale_kind, _array, _contiguous, _devices, _k_and_n, _shape, _tma_operand

K_GROUP_ALIGNMENT = 128   # each group's K in the k-grouped layout: a whole number of scale blocks
MAX_K_GROUPS = 1024       # the kernel keeps 16 bytes per group in shared memory


def _scale_kind(x: ArrayInfo, name: str) -> str:
    return "aligned" if is_tma_aligned(x) else _a_scale_kind(x, name)


def _f32_out(x: ArrayInfo, name: str, expected: tuple, dims: str) -> None:
    """`out` or `c`: float32 of the expected shape, TMA rows (stride 1 along N, a row stride that is a multiple of
    16 bytes, groups one after another), base 16-byte aligned."""
    _array(x, name, (FLOAT32,), "float32", len(expected), dims)
    _shape(x, name, expected, dims)
    _tma_operand(x, name, 4)


def check_addend(out: ArrayInfo, c: ArrayInfo) -> None:
    """A separate `c` (not out itself) must not overlap `out`: out is written before c is read through."""
    if 0 in out.shape or 0 in c.shape:
        return
    (o0, o1), (c0, c1) = _extent(out), _extent(c)
    if o0 <= c1 and c0 <= o1:
        raise ValueError(f"c must be out itself or not overlap it; got c at 0x{c.ptr:x} (strides {c.strides}) "
                         f"and out at 0x{out.ptr:x} (strides {out.strides})")


def _extent(x: ArrayInfo) -> tuple:
    """The first and last byte addresses of a float32 array."""
    return x.ptr, x.ptr + sum((n - 1) * s for n, s in zip(x.shape, x.strides)) * 4 + 3


def _addend(out: ArrayInfo, c: ArrayInfo | None, expected: tuple, dims: str) -> bool:
    """Whether `c` is a separate addend (out = c + A·Bᵀ) rather than absent or out itself (out += A·Bᵀ)."""
    if c is None:
        return False
    _f32_out(c, "c", expected, dims)
    if c.ptr == out.ptr and c.strides == out.strides:
        return False
    check_addend(out, c)
    return True


def _operands(a, a_scale, b, b_scale, k_dims: str) -> tuple:
    """The two FP8 operands and their 1x128 scales; returns (m, n, k, a_scale_kind, b_scale_kind)."""
    _array(a, "a", FP8_DTYPES, _FP8, 2, f"[M, {k_dims}]")
    _array(a_scale, "a_scale", (FLOAT32,), "float32", 2, "[M, ceil(K/128)]")
    _array(b, "b", FP8_DTYPES, _FP8, 2, f"[N, {k_dims}]")
    _array(b_scale, "b_scale", (FLOAT32,), "float32", 2, "[N, ceil(K/128)]")
    m = a.shape[0]
    k, n = _k_and_n(a.shape, b.shape)
    kb = -(-k // 128)
    _shape(a_scale, "a_scale", (m, kb), "[M, ceil(K/128)]")
    _shape(b_scale, "b_scale", (n, kb), "[N, ceil(K/128)]")
    if m and k:
        _tma_operand(a, "a", 1)
    if n and k:
        _tma_operand(b, "b", 1)
    return m, n, k, _scale_kind(a_scale, "a_scale"), _scale_kind(b_scale, "b_scale")


def check_wgrad(a, a_scale, b, b_scale, out, c, device: int) -> tuple:
    """``wgrad_matmul``: returns (m, n, k, a_scale_kind, b_scale_kind, separate_c)."""
    m, n, k, a_kind, b_kind = _operands(a, a_scale, b, b_scale, "K")
    _f32_out(out, "out", (m, n), "[M, N]")
    separate = _addend(out, c, (m, n), "[M, N]")
    _devices(device, a=a, a_scale=a_scale, b=b, b_scale=b_scale, out=out, c=c)
    return m, n, k, a_kind, b_kind, separate


def check_k_grouped_wgrad(a, a_scale, b, b_scale, k_sizes, out, c, device: int) -> tuple:
    """``k_grouped_wgrad_matmul``: returns (m, n, k, groups, a_scale_kind, b_scale_kind, separate_c); k is the
    columns of A and B (every group's). The sizes in k_sizes are read on the GPU only (CUDA-graph safe): that
    each is a multiple of 128 and that they sum to at most k is the caller's to keep (see the docstring)."""
    m, n, k, a_kind, b_kind = _operands(a, a_scale, b, b_scale, "sum K")
    _array(k_sizes, "k_sizes", (INT32,), "int32", 1, "[G]")
    groups = k_sizes.shape[0]
    if groups < 1:
        raise ValueError(f"k_sizes must hold at least 1 group; got shape {k_sizes.shape}")
    if groups > MAX_K_GROUPS:
        raise ValueError(f"k_sizes may hold at most {MAX_K_GROUPS} groups (the kernel keeps them in shared memory); "
                         f"got {groups}")
    _contiguous(k_sizes, "k_sizes", 4)
    _f32_out(out, "out", (groups, m, n), "[G, M, N]")
    separate = _addend(out, c, (groups, m, n), "[G, M, N]")
    _devices(device, a=a, a_scale=a_scale, b=b, b_scale=b_scale, k_sizes=k_sizes, out=out, c=c)
    return m, n, k, groups, a_kind, b_kind, separate

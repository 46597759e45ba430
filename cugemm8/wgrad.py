"""The weight-gradient GEMMs of FP8 training (DeepSeek-V3's recipe): both operands quantized 1x128 along K, the
token dimension, and the FP32 result added into the gradient in place.

    wgrad_matmul(a, a_scale, b, b_scale, out)                    # out += A·Bᵀ          [M, N]
    k_grouped_wgrad_matmul(a, a_scale, b, b_scale, k_sizes, out)  # out[g] += A_g·B_gᵀ   [G, M, N]

One kernel family with the forward GEMMs (cuda_src/fp8_wgrad.cu: 1x128 scales on B, K at run time, FP32 tiles
added into D by TMA reduce-add, each element once per call, so results are bitwise repeatable). Nothing here
synchronizes the host: with `out` given and the scales in the M-major layout, a call can be captured in a CUDA
graph once its kernel is compiled (the k-grouped sizes are read on the GPU).
"""
from __future__ import annotations

import logging
from typing import NamedTuple

import cupy

from . import fp8_gemm, heuristics_wgrad, runtime
from .api import Array, Stream, _key, _refuse_capture
from .arrays import StreamRef, as_device_arrays, describe, stream_handle
from .layout import get_col_major_tma_aligned_tensor
from .validation_wgrad import K_GROUP_ALIGNMENT, check_addend, check_k_grouped_wgrad, check_wgrad

log = logging.getLogger(__name__)


class _Prepared(NamedTuple):
    launcher: fp8_gemm.WgradLauncher | None  # None: nothing to compute (M, N or K is 0)
    convert: tuple                             # (a_scale, b_scale): row-major, converted on every call
    separate_c: bool                           # c is not out: out = c first, then out += A·Bᵀ


_prepared: dict[tuple, _Prepared] = {}
_MAX_PREPARED = 1024


def _prepare(key: tuple, layout: str, device: int, m: int, n: int, k: int, groups: int, kinds: tuple,
             separate_c: bool, infos: list) -> _Prepared:
    runtime.require_hopper(device)
    launcher = None
    if m and n and k:
        plan = heuristics_wgrad.choose(layout, m, n, groups, runtime.get_num_sms(device))
        a, b, out = infos[0], infos[2], infos[-2]
        d_gld = out.strides[0] if layout == "k_grouped" else m * out.strides[0]
        base = a.ptr   # each launch sets the real addresses
        launcher = fp8_gemm.get_wgrad_launcher(plan.config, device, plan.grid, m, n, k, groups, a.strides[0],
                                               b.strides[0], out.strides[-2], d_gld, (base,) * 5)
        log.info("configuration: wgrad %s M=%d N=%d K=%d G=%d on device %d: %s, grid %d", layout, m, n, k, groups,
                 device, fp8_gemm.cfg_str(plan.config), plan.grid)
    prep = _Prepared(launcher, (kinds[0] == "rowmajor", kinds[1] == "rowmajor"), separate_c)
    if len(_prepared) >= _MAX_PREPARED:
        _prepared.clear()
    _prepared[key] = prep
    return prep


def _same_c(out, c):
    """Part of the call's key: whether c is absent (None), out itself (True) or another array (False)."""
    return None if c is None else c.data.ptr == out.data.ptr


def _run(prep: _Prepared, a, a_scale, b, b_scale, k_sizes, out, c, stream_ptr: int) -> None:
    if prep.separate_c:  # the key holds shapes and strides, not addresses: check this call's c against out
        check_addend(describe(out, "out"), describe(c, "c"))
    if prep.separate_c or any(prep.convert):
        if any(prep.convert):  # a new array: not inside a CUDA-graph capture (the copy of c allocates nothing)
            _refuse_capture(stream_ptr, "convert a row-major a_scale or b_scale into a new array")
        with cupy.cuda.Stream.from_external(StreamRef(stream_ptr)):
            if prep.separate_c:
                cupy.copyto(out, c)
            if prep.convert[0]:
                a_scale = get_col_major_tma_aligned_tensor(a_scale)
            if prep.convert[1]:
                b_scale = get_col_major_tma_aligned_tensor(b_scale)
    if prep.launcher is not None:
        prep.launcher.launch(a.data.ptr, b.data.ptr, a_scale.data.ptr, b_scale.data.ptr, out.data.ptr,
                             0 if k_sizes is None else k_sizes.data.ptr, stream_ptr)


_WGRAD_NAMES = ("a", "a_scale", "b", "b_scale", "out", "c")


def wgrad_matmul(a: Array, a_scale: Array, b: Array, b_scale: Array, out: Array, *, c: Array | None = None,
                 stream: Stream = None) -> Array:
    """The weight gradient: out += (A * a_scale) @ (B * b_scale)^T in FP32, or out = c + ... with `c`.

    a: uint8 [M, K] (e4m3 bits; float8_e4m3fn from torch or JAX is taken as is); a_scale: float32
    [M, ceil(K/128)], one scale per row and 128 of K; b: uint8 [N, K]; b_scale: float32 [N, ceil(K/128)], also
    1x128 (not 128x128 blocks). Each scale array is row-major or in the M-major TMA-aligned layout
    (get_col_major_tma_aligned_tensor; taken without a copy). K is the token dimension: a multiple of 16 (0
    leaves out as it is, or out = c). out: float32 [M, N], rows 16-byte aligned; c: float32 [M, N], out itself
    (the same as None) or an array not overlapping it, which costs one copy into out. Partial sums are promoted
    to FP32 every 128 of K and added into out once, by the memory system (subnormal sums may flush to zero).
    Returns out."""
    return _call("normal", _WGRAD_NAMES, (a, a_scale, b, b_scale, out, c), stream)


_K_GROUPED_NAMES = ("a", "a_scale", "b", "b_scale", "k_sizes", "out", "c")


def k_grouped_wgrad_matmul(a: Array, a_scale: Array, b: Array, b_scale: Array, k_sizes: Array, out: Array, *,
                           c: Array | None = None, stream: Stream = None) -> Array:
    """The MoE weight gradient in one launch: out[g] += A_g @ B_g^T for each group g (or out = c + ...).

    The groups share M and N and each has its own K, the tokens routed to its expert: a: uint8 [M, sum K] and
    b: uint8 [N, sum K] hold the groups' columns one after another (group g from column k_sizes[0] + ... +
    k_sizes[g-1]), with 1x128 scales a_scale [M, ceil(sum K/128)] and b_scale [N, ceil(sum K/128)] as in
    wgrad_matmul (quantizing the whole [M, sum K] gives each group its own blocks). k_sizes: int32 [G] on the GPU,
    read only by the kernel (CUDA-graph safe); each must be a multiple of 128 (pad a group's tokens with zeros)
    and together at most A's columns: the kernel reads whole 128-column blocks and clamps the sizes to A's
    columns, so other values give wrong sums but never read outside the arrays. A group with K = 0 costs
    nothing and its out[g] is not touched. out, c: float32 [G, M, N], the groups one after another. Returns out."""
    return _call("k_grouped", _K_GROUPED_NAMES, (a, a_scale, b, b_scale, k_sizes, out, c), stream)


def _call(layout: str, names: tuple, given: tuple, stream: Stream) -> Array:
    """Both entry points: take the arrays, check a first-seen call and prepare its launch, then run. `given` is
    (a, a_scale, b, b_scale, [k_sizes,] out, c) in the order of `names`."""
    arrays = as_device_arrays(names, given, stream)
    out, c = arrays[-2], arrays[-1]
    stream_ptr = stream_handle(stream)
    device = runtime.current_device()
    key = _key(layout + "_wgrad", device, arrays, _same_c(out, c))
    prep = _prepared.get(key)
    if prep is None:
        infos = [None if x is None else describe(x, name) for name, x in zip(names, arrays)]
        if layout == "k_grouped":
            m, n, k, groups, a_kind, b_kind, separate = check_k_grouped_wgrad(*infos, device)
        else:
            (m, n, k, a_kind, b_kind, separate), groups = check_wgrad(*infos, device), 1
        prep = _prepare(key, layout, device, m, n, k, groups, (a_kind, b_kind), separate, infos)
    _run(prep, *arrays[:4], arrays[4] if layout == "k_grouped" else None, out, c, stream_ptr)
    return given[-2]


def get_k_alignment_for_k_grouped_layout() -> int:
    """Each group's K in k_grouped_wgrad_matmul is a multiple of this many columns (one 1x128 scale block)."""
    return K_GROUP_ALIGNMENT

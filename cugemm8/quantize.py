"""FP8 (e4m3) quantizers, DeepSeek-V3 recipe.

* per token: one scale per 1x128 tile along K (activations, the A operand);
* per block: one scale per 128x128 tile (weights, the B operand).

For each tile: amax = max |x| in float32, clamped to >= 1e-4; q = e4m3(x * (448 / amax)) rounded to
nearest even and saturated to +-448 (finite input never gives NaN); scale = amax / 448, so x ~ q * scale.
With ``scale_format="ue8m0"`` the scale is amax / 448 rounded up to a power of two (UE8M0, as recent
DeepSeek checkpoints store them) and q = e4m3(x * (1 / scale)), the reciprocal exact. Partial tiles (K or N
not a multiple of 128) use only their real elements. The GEMMs' e4m3 output follows the same rule.

The GPU versions (CuPy, kernels in ``cuda_src/quantize.cu``) are bitwise equal to the NumPy ones,
which serve as the reference.
"""
from __future__ import annotations

import functools
import threading

import cupy
import ml_dtypes
import numpy as np

from . import jit
from .arrays import as_device_array

FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
TILE = 128

_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
_IN_KIND = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(ml_dtypes.bfloat16): 2}
SCALE_FORMATS = ("float32", "ue8m0")
# Keep every float operation IEEE-rounded and in the order written, like NumPy.
NVRTC_OPTIONS = ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")

_kernel_cache: dict = {}
_kernel_lock = threading.Lock()


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def kernel_source(file: str = "quantize.cu") -> str:
    """A CUDA file of cuda_src/, self-contained (inline_includes)."""
    return inline_includes((jit.source_dir() / file).read_text())


def inline_includes(text: str) -> str:
    """CUDA source text with its include of ptx/convert.cuh written in: CuPy's compile cache keys on the source
    text, so the text must hold everything the kernels are built from."""
    include = '#include "ptx/convert.cuh"'
    return text.replace(include, (jit.source_dir() / "ptx" / "convert.cuh").read_text())


def raw_kernel(name: str, file: str):
    """The RawKernel ``name`` from cuda_src/``file`` (CuPy compiles and loads it per device)."""
    kernel = _kernel_cache.get((file, name))
    if kernel is None:
        with _kernel_lock:
            kernel = _kernel_cache.get((file, name))
            if kernel is None:
                kernel = _kernel_cache[(file, name)] = cupy.RawKernel(kernel_source(file), name,
                                                                      options=NVRTC_OPTIONS)
    return kernel


def _kernel(name: str):
    return raw_kernel(name, "quantize.cu")


def _input(x, name: str):
    """x as a cupy array, its input-kind code and its device id."""
    x = as_device_array(x, name)
    kind = _IN_KIND.get(x.dtype)
    if kind is None:
        raise TypeError(f"{name} must have dtype float32, float16 or bfloat16; got {x.dtype}")
    if x.ndim not in (2, 3):
        raise ValueError(f"{name} must be 2-D or 3-D [G, ...]; got shape {x.shape}")
    return x, kind, x.data.device_id


def _ue8m0(scale_format) -> int:
    if not isinstance(scale_format, str):
        raise TypeError(f"scale_format must be a str, one of {SCALE_FORMATS}; got {type(scale_format).__name__}")
    if scale_format not in SCALE_FORMATS:
        raise ValueError(f"scale_format must be one of {SCALE_FORMATS}; got {scale_format!r}")
    return int(scale_format == "ue8m0")


# --------------------------------------------------------------------------- GPU (CuPy)
def per_token_cast_to_fp8(x, scale_format: str = "float32") -> "tuple[cupy.ndarray, cupy.ndarray]":
    """x: float32/float16/bfloat16 [M, K] (or [G, M, K]) on the GPU ->
    (q uint8 [M, K] e4m3 bits, scale float32 [M, ceil(K/128)] row-major), same leading dims.
    scale_format: "float32" (amax / 448) or "ue8m0" (rounded up to a power of two).
    A transposed view of a row-major array (``y.T``, or ``y.transpose(0, 2, 1)`` of a 3-D one) is quantized in
    one pass that reads ``y`` as it lies (``_per_token_transposed``); any other strided input is copied first."""
    ue8m0 = _ue8m0(scale_format)
    x, kind, device = _input(x, "x")
    with cupy.cuda.Device(device):
        if _fused_transpose_ok(x):
            return _per_token_transposed(x, kind, ue8m0)
        x = cupy.ascontiguousarray(x)
        k = x.shape[-1]
        kb = _ceil_div(k, TILE)
        rows = x.size // k if k else 0
        q = cupy.empty(x.shape, dtype=cupy.uint8)
        scale = cupy.empty(x.shape[:-1] + (kb,), dtype=cupy.float32)
        tiles = rows * kb
        if tiles:
            if k % 8 == 0 and tiles < 2**31:  # 16-byte loads, 32-bit tile indices: a tile per quad of lanes
                grid = min(_ceil_div(tiles, 64), 4 * _sm_count(device))  # one resident wave at most
                _kernel(f"per_token_cast_to_fp8_vec{kind}")((grid,), (256,), (
                    x, np.int32(kind), q, scale, np.uint32(rows), np.int32(k), np.int32(kb), np.int32(ue8m0)))
            else:
                warps_per_block = 8
                grid = min(_ceil_div(tiles, warps_per_block), 1 << 16)
                _kernel("per_token_cast_to_fp8")((grid,), (32 * warps_per_block,), (
                    x, np.int32(kind), q, scale, np.int64(rows), np.int32(k), np.int32(kb), np.int32(ue8m0)))
    return q, scale


def _fused_transpose_ok(x) -> bool:
    """x ([..., C, T]) is the transpose of a row-major [..., T, C] array whose rows and the output's start on
    16-byte boundaries (C % 8 == 0, T % 16 == 0, an aligned base), within the kernel's 32-bit sizes and the grid's
    limits."""
    if x.ndim not in (2, 3) or x.flags.c_contiguous or x.size == 0:
        return False
    c, t = x.shape[-2:]
    groups = x.shape[0] if x.ndim == 3 else 1
    return (x.swapaxes(-1, -2).flags.c_contiguous and c % 8 == 0 and t % 16 == 0 and x.data.ptr % 16 == 0
            and max(c, t) < 2**31 and _ceil_div(c, 64) <= 65535 and groups <= 65535)


def _per_token_transposed(x, kind: int, ue8m0: int):
    """per_token_cast_to_fp8 of x = yᵀ, reading the row-major y [G, T, C] once (cuda_src/quantize.cu,
    per_token_cast_to_fp8_t_vec*): a copy of the transpose first would move 2.3x the bytes of bf16 input."""
    c, t = x.shape[-2:]
    groups = x.shape[0] if x.ndim == 3 else 1
    q = cupy.empty(x.shape, dtype=cupy.uint8)
    scale = cupy.empty(x.shape[:-1] + (_ceil_div(t, TILE),), dtype=cupy.float32)
    block_cols = 64 if kind == 0 else 128  # 256 bytes of a row of y a CTA
    _kernel(f"per_token_cast_to_fp8_t_vec{kind}")((_ceil_div(t, TILE), _ceil_div(c, block_cols), groups), (256,), (
        x, q, scale, np.int32(t), np.int32(c), np.int32(ue8m0)))
    return q, scale


@functools.lru_cache(maxsize=None)
def _sm_count(device: int) -> int:
    # cached: the properties query takes about a millisecond
    return cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, device)


def per_block_cast_to_fp8(w, scale_format: str = "float32") -> "tuple[cupy.ndarray, cupy.ndarray]":
    """w: float32/float16/bfloat16 [N, K] (or [G, N, K]) on the GPU ->
    (q uint8 [N, K] e4m3 bits, scale float32 [ceil(N/128), ceil(K/128)]), same leading dims.
    scale_format: "float32" (amax / 448) or "ue8m0" (rounded up to a power of two)."""
    ue8m0 = _ue8m0(scale_format)
    w, kind, device = _input(w, "w")
    with cupy.cuda.Device(device):
        w = cupy.ascontiguousarray(w)
        groups = w.shape[0] if w.ndim == 3 else 1
        n, k = w.shape[-2:]
        nb, kb = _ceil_div(n, TILE), _ceil_div(k, TILE)
        if nb > 65535 or groups > 65535:  # grid y and z limits
            raise ValueError(f"w has shape {w.shape}; at most 65535 groups and ceil(N/128) <= 65535 are supported")
        q = cupy.empty(w.shape, dtype=cupy.uint8)
        scale = cupy.empty(w.shape[:-2] + (nb, kb), dtype=cupy.float32)
        if groups and nb and kb:
            # one pass with 16-byte loads (a kernel per input kind), or the general two-pass kernel
            name = f"per_block_cast_to_fp8_vec{kind}" if k % 8 == 0 else "per_block_cast_to_fp8"
            _kernel(name)((kb, nb, groups), (256,), (w, np.int32(kind), q, scale, np.int32(n), np.int32(k),
                                                     np.int32(ue8m0)))
    return q, scale


# --------------------------------------------------------------------------- NumPy references
def _host_float32(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype not in _IN_KIND:
        raise TypeError(f"{name} must have dtype float32, float16 or bfloat16; got {x.dtype}")
    return x.astype(np.float32)


def _saturate_to_e4m3(y: np.ndarray) -> np.ndarray:
    # ml_dtypes maps values past the last finite e4m3 (464 and up) to NaN: clip first.
    return np.clip(y, -FP8_MAX, FP8_MAX).astype(_E4M3).view(np.uint8)


def pow2_ceil(x: np.ndarray) -> np.ndarray:
    """The least power of two >= x, elementwise, for positive normal float32 x (UE8M0 scales)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    up = np.where(bits & 0x7FFFFF, (bits & 0x7F800000) + 0x800000, bits).astype(np.uint32)
    return up.view(np.float32)


def quantize_scale(amax: np.ndarray, scale_format: str = "float32") -> tuple:
    """(scale, the factor elements are multiplied by) for floored float32 amax, per the format."""
    if _ue8m0(scale_format):
        scale = pow2_ceil(amax / np.float32(FP8_MAX))
        return scale, (np.float32(1) / scale).astype(np.float32)  # exact: a power of two
    return (amax / np.float32(FP8_MAX)).astype(np.float32), (np.float32(FP8_MAX) / amax).astype(np.float32)


def _quantize_tiles(x: np.ndarray, tile_rows: int, scale_format: str = "float32") -> tuple:
    """x float32 [..., R, C] in tiles of tile_rows x 128 ->
    (q bits [..., R, C], scale [..., ceil(R/tile_rows), ceil(C/128)])."""
    *lead, r, c = x.shape
    rb, cb = _ceil_div(r, tile_rows), _ceil_div(c, TILE)
    padded = np.zeros((*lead, rb * tile_rows, cb * TILE), dtype=np.float32)
    padded[..., :r, :c] = x
    tiles = padded.reshape(*lead, rb, tile_rows, cb, TILE)
    amax = np.abs(tiles).max(axis=(-3, -1), initial=np.float32(0))
    amax = np.maximum(amax, np.float32(AMAX_FLOOR))
    scale, inv = quantize_scale(amax, scale_format)
    y = tiles * inv[..., :, None, :, None]
    q = _saturate_to_e4m3(y).reshape(padded.shape)[..., :r, :c]
    return np.ascontiguousarray(q), scale


def per_token_cast_to_fp8_numpy(x, scale_format: str = "float32") -> tuple:
    """NumPy reference of ``per_token_cast_to_fp8`` (float32/float16/bfloat16 [..., M, K])."""
    x = _host_float32(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x must be at least 2-D [M, K]; got shape {x.shape}")
    return _quantize_tiles(x, 1, scale_format)


def per_block_cast_to_fp8_numpy(w, scale_format: str = "float32") -> tuple:
    """NumPy reference of ``per_block_cast_to_fp8`` (float32/float16/bfloat16 [..., N, K])."""
    w = _host_float32(w, "w")
    if w.ndim < 2:
        raise ValueError(f"w must be at least 2-D [N, K]; got shape {w.shape}")
    return _quantize_tiles(w, TILE, scale_format)


def fp8_e4m3_to_float(q) -> np.ndarray:
    """Decode e4m3 bits (uint8 or int8, host) to float32."""
    q = np.asarray(q)
    if q.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)):
        raise TypeError(f"q must have dtype uint8 or int8 (e4m3 bits); got {q.dtype}")
    return np.ascontiguousarray(q).view(np.uint8).view(_E4M3).astype(np.float32)

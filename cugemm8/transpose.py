"""The block transpose of a 128x128 block-scaled FP8 matrix, for the data gradient: dX = dY·W is
``matmul(dy, dy_scale, *transpose_fp8(w, w_scale))``.

Transposing such a matrix is exact: the payload's bytes move (``cuda_src/transpose.cu``) and the scale grid is
transposed with them, block (i, j) of W becoming block (j, i) of Wᵀ with the same scale, partial edge blocks
included; one kernel does both.
"""
from __future__ import annotations

import cupy
import numpy as np

from .arrays import FLOAT32, INT8, UINT8, as_device_array, type_name
from .quantize import raw_kernel

TILE_ROWS, TILE_COLS = 128, 128   # the kernel's tile of the input, in bytes (one scale block)


def check_transpose(b_shape: tuple, b_dtype, b_contiguous: bool, scale_shape: tuple, scale_dtype) -> None:
    """The rules of transpose_fp8, on shapes and dtypes (no GPU): b uint8/int8 [N, K] or [G, N, K], C-contiguous,
    N and K multiples of 16 (so that Wᵀ is itself a GEMM operand); b_scale float32 [..., ceil(N/128), ceil(K/128)]."""
    if b_dtype not in (UINT8, INT8):
        raise TypeError(f"b must have dtype uint8 (e4m3 bits) or int8; got {b_dtype}")
    if len(b_shape) not in (2, 3):
        raise ValueError(f"b must be 2-D [N, K] or 3-D [G, N, K]; got shape {b_shape}")
    n, k = b_shape[-2:]
    if n % 16 or k % 16:
        raise ValueError(f"b must have N and K multiples of 16 (the transpose is a GEMM operand, K-major with "
                         f"16-byte rows); got shape {b_shape}")
    if not b_contiguous:
        raise ValueError(f"b must be C-contiguous; got a strided view of shape {b_shape}")
    expected = tuple(b_shape[:-2]) + (-(-n // 128), -(-k // 128))
    if scale_dtype != FLOAT32:
        raise TypeError(f"b_scale must have dtype float32; got {scale_dtype}")
    if tuple(scale_shape) != expected:
        raise ValueError(f"b_scale must have shape [..., ceil(N/128), ceil(K/128)] = {expected}; got {scale_shape}")


def transpose_fp8(b, b_scale) -> "tuple[cupy.ndarray, cupy.ndarray]":
    """(Wᵀ uint8 [K, N], its scales float32 [ceil(K/128), ceil(N/128)]) of a 128x128 block-scaled W given as
    b uint8 [N, K] (e4m3 bits; or [G, N, K]) and b_scale float32 [ceil(N/128), ceil(K/128)] (or [G, ...]).
    Exact, and the result feeds ``matmul`` as its (b, b_scale)."""
    b = as_device_array(b, "b")
    b_scale = as_device_array(b_scale, "b_scale")
    if not isinstance(b, cupy.ndarray) or not isinstance(b_scale, cupy.ndarray):
        raise TypeError(f"b and b_scale must be CUDA device arrays; got {type_name(b)}, {type_name(b_scale)}")
    check_transpose(b.shape, b.dtype, b.flags.c_contiguous, b_scale.shape, b_scale.dtype)
    if b_scale.data.device_id != b.data.device_id:
        raise ValueError(f"b_scale is on device {b_scale.data.device_id}, b on device {b.data.device_id}; "
                         "both must be on the same device")
    n, k = b.shape[-2:]
    groups = b.shape[0] if b.ndim == 3 else 1
    if groups > 65535 or -(-n // TILE_ROWS) > 65535:   # the grid's y and z limits
        raise ValueError(f"b has shape {b.shape}; at most 65535 groups and N <= {65535 * TILE_ROWS} are supported")
    with cupy.cuda.Device(b.data.device_id):
        out = cupy.empty(b.shape[:-2] + (k, n), dtype=b.dtype)
        out_scale = cupy.empty(b_scale.shape[:-2] + b_scale.shape[:-3:-1], dtype=cupy.float32)
        if b.size:
            b_scale = cupy.ascontiguousarray(b_scale)
            grid = (-(-k // TILE_COLS), -(-n // TILE_ROWS), groups)
            raw_kernel("transpose_u8", "transpose.cu")(grid, (256,), (b, out, b_scale, out_scale, np.int32(n),
                                                                      np.int32(k)))
    return out, out_scale

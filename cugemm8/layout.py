"""Scale layouts.

The kernel loads A's scales with TMA from an M-major buffer: logical shape [M, KB] (KB = ceil(K/128)),
storage [KB, aligned_m] row-major with aligned_m = M rounded up to a multiple of 4, so every row of the
buffer starts on a 16-byte boundary (TMA's stride rule). The masked layout transposes each group on
its own: [G, M, KB] with strides (aligned_m*KB, 1, aligned_m) elements. Rows M..aligned_m-1 are
padding and never read as data.
"""
from __future__ import annotations

import cupy
import numpy as np

from .arrays import FLOAT32, as_device_array, describe


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round ``x`` up so that ``x * element_size`` is a multiple of 16 bytes."""
    for name, v in (("x", x), ("element_size", element_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int; got {type(v).__name__}")
    if x < 0:
        raise ValueError(f"x must be non-negative; got {x}")
    if element_size <= 0 or 16 % element_size:
        raise ValueError(f"element_size must divide 16; got {element_size}")
    align = 16 // element_size
    return -(-x // align) * align


def aligned_strides(shape: tuple) -> tuple:
    """Element strides of the kernel's A-scale layout for a [M, KB] or [G, M, KB] shape."""
    m, kb = shape[-2], shape[-1]
    am = get_tma_aligned_size(m, 4)
    return (am * kb, 1, am) if len(shape) == 3 else (1, am)


def is_tma_aligned(info) -> bool:
    """True if ``info`` (an ArrayInfo) describes a float32 [M, KB] or [G, M, KB] array already in the
    kernel's layout, base 16-byte aligned. Strides of extent-1 dimensions are not looked at (the
    kernel never steps along them), so callers must take the leading dimension from
    ``get_tma_aligned_size(M, 4)``, not from the strides."""
    # Written out per rank: this runs on every GEMM call.
    if info.dtype is not FLOAT32 and info.dtype != FLOAT32:
        return False
    shape, strides = info.shape, info.strides
    if len(shape) == 2:
        m, kb = shape
        if m == 0 or kb == 0:
            return True
        am = (m + 3) & ~3
        return (not info.ptr & 15 and (m == 1 or strides[0] == 1) and (kb == 1 or strides[1] == am))
    if len(shape) == 3:
        g, m, kb = shape
        if g == 0 or m == 0 or kb == 0:
            return True
        am = (m + 3) & ~3
        return (not info.ptr & 15 and (g == 1 or strides[0] == am * kb) and (m == 1 or strides[1] == 1)
                and (kb == 1 or strides[2] == am))
    return False


def get_col_major_tma_aligned_tensor(x) -> cupy.ndarray:
    """Return ``x`` (float32 [M, KB] or [G, M, KB] on the GPU) in the kernel's A-scale layout.

    Already-aligned input comes back unchanged (no copy); anything else is copied, with one kernel
    launch, into fresh storage [KB, aligned_m] (or [G, KB, aligned_m]) and the [M, KB] (or
    [G, M, KB]) view of that storage is returned."""
    x = as_device_array(x, "x")
    if x.dtype != FLOAT32:
        raise TypeError(f"x must have dtype float32; got {x.dtype}")
    if x.ndim not in (2, 3):
        raise ValueError(f"x must be 2-D [M, KB] or 3-D [G, M, KB]; got shape {x.shape}")
    if is_tma_aligned(describe(x)):
        return x
    m, kb = x.shape[-2:]
    am = get_tma_aligned_size(m, 4)
    with cupy.cuda.Device(x.data.device_id):
        if x.ndim == 2:
            storage = cupy.empty((kb, am), dtype=cupy.float32)
            view = storage.T[:m]
        else:
            storage = cupy.empty((x.shape[0], kb, am), dtype=cupy.float32)
            view = storage.transpose(0, 2, 1)[:, :m]
        view[...] = x
    return view

"""ArrayInfo descriptions for the CPU tier: arrays the checks see without any GPU memory behind them."""
import numpy as np

from cugemm8.arrays import ArrayInfo

BASE_PTR = 0x7F00_0000_0000  # a 16-byte aligned address


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def c_strides(shape) -> tuple:
    """Element strides of a C-contiguous array."""
    out, step = [], 1
    for extent in reversed(shape):
        out.append(step)
        step *= extent
    return tuple(reversed(out))


def aligned_strides(shape) -> tuple:
    """The kernel's A-scale layout: [M, KB] -> (1, am); [G, M, KB] -> (am*KB, 1, am)."""
    m, kb = shape[-2:]
    am = ceil_div(m, 4) * 4
    return (1, am) if len(shape) == 2 else (am * kb, 1, am)


def info(shape, dtype, strides=None, ptr=BASE_PTR, device=0) -> ArrayInfo:
    """An ArrayInfo; C-contiguous unless `strides` (elements) are given."""
    shape = tuple(shape)
    return ArrayInfo(shape, tuple(strides) if strides is not None else c_strides(shape), np.dtype(dtype), ptr,
                     device)

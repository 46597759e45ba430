"""ArrayInfo descriptions for the CPU tier: arrays the checks see without any GPU memory behind them."""
import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from cugemm8.arrays import ArrayInfo
from cugemm8.layout import get_tma_aligned_size

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


# ----------------------------------------------------------------------------- the entry points' arguments
BF16 = np.dtype(ml_dtypes.bfloat16)


def kblocks(x):
    return -(-x // 128)


def a_scale_info(m, kb, kind, groups=None):
    shape = (m, kb) if groups is None else (groups, m, kb)
    if kind == "rowmajor":
        return info(shape, np.float32)
    am = get_tma_aligned_size(m, 4)
    strides = (1, am) if groups is None else (am * kb, 1, am)
    return info(shape, np.float32, strides)


def dense_case(m, n, k, kind="aligned", with_out=True, pad_a=0, pad_b=0, pad_out=0, fp8=np.uint8):
    kb = kblocks(k)
    return dict(
        a=info((m, k), fp8, (k + pad_a, 1)),
        a_scale=a_scale_info(m, kb, kind),
        b=info((n, k), fp8, (k + pad_b, 1)),
        b_scale=info((kblocks(n), kb), np.float32),
        out=info((m, n), BF16, (n + pad_out, 1)) if with_out else None,
    )


def contiguous_case(m, n, k, groups, kind="aligned", with_out=True):
    kb = kblocks(k)
    return dict(
        a=info((m, k), np.uint8),
        a_scale=a_scale_info(m, kb, kind),
        b=info((groups, n, k), np.uint8),
        b_scale=info((groups, kblocks(n), kb), np.float32),
        m_indices=info((m,), np.int32),
        out=info((m, n), BF16) if with_out else None,
    )


def masked_case(groups, max_m, n, k, kind="aligned", with_out=True):
    kb = kblocks(k)
    return dict(
        a=info((groups, max_m, k), np.uint8),
        a_scale=a_scale_info(max_m, kb, kind, groups),
        b=info((groups, n, k), np.uint8),
        b_scale=info((groups, kblocks(n), kb), np.float32),
        masked_m=info((groups,), np.int32),
        expected_m=max(1, max_m // 2),
        out=info((groups, max_m, n), BF16) if with_out else None,
    )


ms = st.integers(0, 700)
ns = st.integers(1, 160).map(lambda x: 8 * x)
ks = st.integers(1, 100).map(lambda x: 16 * x)
kinds = st.sampled_from(["aligned", "rowmajor"])

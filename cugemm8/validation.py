"""Argument checks for the public API.

The API turns each argument into a CuPy array and describes it (``cugemm8.arrays``), then hands the
descriptions to one pure ``check_*`` function per entry point. Those functions need no GPU; they return
the problem sizes or raise, before anything is launched:

* ``TypeError``: not an array, wrong dtype, ``expected_m`` not an int;
* ``ValueError``: shape, stride, alignment, device or value.

Every message starts with the argument's name and gives the rule and the value received.

Conventions: strides are in elements; strides of extent-1 dimensions are ignored where an array is
read by index arithmetic (scales, index arrays), while TMA operands (a, b, out) must have a valid
row stride whatever their extent, because the launcher passes it to the TMA descriptor. Arrays with
no elements skip stride and address checks (nothing is read).
"""
from __future__ import annotations

import numpy as np

from .arrays import BFLOAT16, FLOAT32, INT8, INT32, UINT8, ArrayInfo, type_name
from .heuristics import CONTIGUOUS_M_ALIGNMENT
from .layout import aligned_strides, is_tma_aligned

FP8_DTYPES = (UINT8, INT8)
TMA_ALIGNMENT = 16      # bytes: base addresses and row strides of TMA-loaded arrays


# --------------------------------------------------------------------------- rule helpers
def _c_strides(shape: tuple) -> tuple:
    if len(shape) == 1:
        return (1,)
    if len(shape) == 2:
        return (shape[1], 1)
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _strides_match(info: ArrayInfo, expected: tuple) -> bool:
    """Strides equal to ``expected`` except along extent-1 dimensions; any strides if empty."""
    if info.strides == expected or 0 in info.shape:
        return True
    for extent, stride, want in zip(info.shape, info.strides, expected):
        if extent > 1 and stride != want:
            return False
    return True


def _array(x, name: str, dtypes: tuple, what: str, ndim: int, dims: str) -> tuple:
    """Type, dtype and rank of one array argument; returns its shape."""
    if not isinstance(x, ArrayInfo):
        raise TypeError(f"{name} must be a CUDA device array; got {type_name(x)}")
    if x.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {what}; got {x.dtype}")
    if len(x.shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D {dims}; got shape {x.shape}")
    return x.shape


def _shape(x: ArrayInfo, name: str, expected: tuple, dims: str) -> None:
    if x.shape != expected:
        raise ValueError(f"{name} must have shape {dims} = {expected}; got {x.shape}")


def _devices(device: int, **arrays) -> None:
    for name, x in arrays.items():
        if x is not None and x.device != device:
            raise ValueError(f"{name} is on device {x.device}, but the call runs on device {device}; "
                             "all arrays must be on the current device")


def _base_aligned(x: ArrayInfo, name: str, alignment: int) -> None:
    if x.ptr % alignment and 0 not in x.shape:
        raise ValueError(f"{name} base address must be {alignment}-byte aligned; got 0x{x.ptr:x}")


def _tma_operand(x: ArrayInfo, name: str, itemsize: int) -> None:
    """Rows of a TMA-loaded array: stride 1 along the last dim, a row stride that is at least the
    row length and a multiple of 16 bytes, stacked groups without gaps, base 16-byte aligned."""
    shape, strides = x.shape, x.strides
    if 0 in shape:
        return
    if strides[-1] != 1:
        raise ValueError(f"{name} must be contiguous along its last dimension (stride 1); "
                         f"got strides {strides} (elements) for shape {shape}")
    row = strides[-2]
    if row < shape[-1] or (row * itemsize) % TMA_ALIGNMENT:
        raise ValueError(f"{name} row stride must be at least the row length ({shape[-1]}) and a "
                         f"multiple of {TMA_ALIGNMENT} bytes; got {row} elements ({row * itemsize} "
                         f"bytes), strides {strides} for shape {shape}")
    if len(shape) == 3 and shape[0] > 1 and strides[0] != shape[1] * row:
        raise ValueError(f"{name} groups must follow each other without gaps (stride[0] == "
                         f"shape[1] * stride[1] = {shape[1] * row}); got strides {strides} for "
                         f"shape {shape}")
    _base_aligned(x, name, TMA_ALIGNMENT)


def _contiguous(x: ArrayInfo, name: str, itemsize: int) -> None:
    if not _strides_match(x, _c_strides(x.shape)):
        raise ValueError(f"{name} must be C-contiguous (strides {_c_strides(x.shape)}); "
                         f"got strides {x.strides} (elements) for shape {x.shape}")
    _base_aligned(x, name, itemsize)


def _k_and_n(a_shape: tuple, b_shape: tuple) -> tuple:
    k, n = a_shape[-1], b_shape[-2]
    if k % 16:   # K = 0 is allowed: D is zero
        raise ValueError(f"a has K={k} (shape {a_shape}); K must be a multiple of 16 (or 0)")
    if b_shape[-1] != k:
        raise ValueError(f"b must have the same K as a (K={k}, a.shape={a_shape}); got b.shape={b_shape}")
    if n % 8:    # N = 0 is allowed: D is empty
        raise ValueError(f"b has N={n} (shape {b_shape}); N must be a multiple of 8 (or 0)")
    return k, n


def _a_scale_kind(x: ArrayInfo, name: str) -> str:
    if is_tma_aligned(x):
        return "aligned"
    if _strides_match(x, _c_strides(x.shape)):
        return "rowmajor"
    raise ValueError(
        f"{name} must be either M-major with M padded to a multiple of 4 (strides "
        f"{aligned_strides(x.shape)}, base 16-byte aligned: the kernel's layout, see "
        f"get_col_major_tma_aligned_tensor) or row-major "
        f"C-contiguous (strides {_c_strides(x.shape)}); got strides {x.strides} (elements), base "
        f"0x{x.ptr:x}, shape {x.shape}")


def _out(out: ArrayInfo | None, expected: tuple, dims: str) -> None:
    if out is None:
        return
    _array(out, "out", (BFLOAT16,), "bfloat16", len(expected), dims)
    _shape(out, "out", expected, dims)
    _tma_operand(out, "out", 2)


# --------------------------------------------------------------------------- output format
OUT_DTYPES = ("bfloat16", "float8_e4m3")
SCALE_FORMATS = ("float32", "ue8m0")


def check_out_format(out_dtype, scale_format) -> str:
    """The kernel's output format (heuristics.OUT_FORMATS) for ``out_dtype`` and ``scale_format``."""
    for name, value, options in (("out_dtype", out_dtype, OUT_DTYPES), ("scale_format", scale_format, SCALE_FORMATS)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, one of {options}; got {type_name(value)}")
        if value not in options:
            raise ValueError(f"{name} must be one of {options}; got {value!r}")
    if out_dtype == "bfloat16":
        if scale_format != "float32":
            raise ValueError(f"scale_format applies to out_dtype='float8_e4m3' only; got scale_format="
                             f"{scale_format!r} with out_dtype='bfloat16'")
        return "bfloat16"
    return "float8_e4m3" if scale_format == "float32" else "float8_e4m3_ue8m0"


def check_fp8_out(out, out_scale, shape: tuple, dims: str, n: int, device: int) -> None:
    """e4m3 output: N a multiple of 16 (an e4m3 row of D must be a whole number of 16-byte TMA units); `out`
    uint8 with `shape` and TMA rows (masked: C-contiguous); `out_scale` float32 [..., ceil(N/128)] in the
    M-major TMA-aligned layout that a_scale takes without a copy (see get_col_major_tma_aligned_tensor)."""
    if n % 16:
        raise ValueError(f"out_dtype='float8_e4m3' needs N to be a multiple of 16 (each e4m3 row of D is stored in "
                         f"16-byte units); b has N={n}")
    if out is not None:
        _array(out, "out", (UINT8,), "uint8 (e4m3 bits)", len(shape), dims)
        _shape(out, "out", shape, dims)
        _tma_operand(out, "out", 1)
        if len(shape) == 3 and 0 not in out.shape and out.strides[1] != n:
            raise ValueError(f"out must be C-contiguous (strides {_c_strides(out.shape)}); got strides "
                             f"{out.strides} (elements) for shape {out.shape}")
    if out_scale is not None:
        scale_shape = shape[:-1] + ((n + 127) >> 7,)
        scale_dims = dims[:-2] + "ceil(N/128)]"
        _array(out_scale, "out_scale", (FLOAT32,), "float32", len(shape), scale_dims)
        _shape(out_scale, "out_scale", scale_shape, scale_dims)
        if not is_tma_aligned(out_scale):
            raise ValueError(
                f"out_scale must be M-major with M padded to a multiple of 4 (strides {aligned_strides(scale_shape)}, "
                f"base 16-byte aligned), the layout a_scale takes without a copy; got strides {out_scale.strides} "
                f"(elements), base 0x{out_scale.ptr:x}; pass out_scale=None to have one allocated")
    _devices(device, out=out, out_scale=out_scale)


# --------------------------------------------------------------------------- entry points
# These run on every GEMM call, so each rule is a cheap test of the valid case written inline; only
# when it fails does the helper behind it run, which raises with the full explanation (or, for a
# case the quick test is too strict about, such as a stride along an extent-1 dimension, returns).
_FP8 = "uint8 (e4m3 bits) or int8"


def _rows_ok(x: ArrayInfo, row_len: int, align: int) -> bool:
    """The quick test behind _tma_operand for a non-empty 2-D array (align: elements per 16 bytes)."""
    s = x.strides
    return s[1] == 1 and s[0] >= row_len and not s[0] % align and not x.ptr & 15


def _groups_ok(x: ArrayInfo, row_len: int) -> bool:
    """The quick test behind _tma_operand for a non-empty 3-D uint8 array."""
    s = x.strides
    return (s[2] == 1 and s[1] >= row_len and not s[1] & 15 and (x.shape[0] == 1 or s[0] == x.shape[1] * s[1])
            and not x.ptr & 15)


def check_dense(a, a_scale, b, b_scale, out, device: int) -> tuple:
    """``matmul``: returns (m, n, k, a_scale_kind) with a_scale_kind in {"aligned", "rowmajor"}."""
    if not (type(a) is ArrayInfo and a.dtype in FP8_DTYPES and len(a.shape) == 2):
        _array(a, "a", FP8_DTYPES, _FP8, 2, "[M, K]")
    if not (type(a_scale) is ArrayInfo and a_scale.dtype is FLOAT32 and len(a_scale.shape) == 2):
        _array(a_scale, "a_scale", (FLOAT32,), "float32", 2, "[M, ceil(K/128)]")
    if not (type(b) is ArrayInfo and b.dtype in FP8_DTYPES and len(b.shape) == 2):
        _array(b, "b", FP8_DTYPES, _FP8, 2, "[N, K]")
    if not (type(b_scale) is ArrayInfo and b_scale.dtype is FLOAT32 and len(b_scale.shape) == 2):
        _array(b_scale, "b_scale", (FLOAT32,), "float32", 2, "[ceil(N/128), ceil(K/128)]")
    m, k = a.shape
    n = b.shape[0]
    if k < 16 or k & 15 or b.shape[1] != k or n < 8 or n & 7:
        _k_and_n(a.shape, b.shape)
    kb = (k + 127) >> 7
    if a_scale.shape != (m, kb):
        _shape(a_scale, "a_scale", (m, kb), "[M, ceil(K/128)]")
    nb = (n + 127) >> 7
    if b_scale.shape != (nb, kb):
        _shape(b_scale, "b_scale", (nb, kb), "[ceil(N/128), ceil(K/128)]")
    if out is not None:
        if not (type(out) is ArrayInfo and out.dtype is BFLOAT16 and out.shape == (m, n)):
            _out(out, (m, n), "[M, N]")
        if m and not _rows_ok(out, n, 8):
            _tma_operand(out, "out", 2)
    if m and not _rows_ok(a, k, 16):
        _tma_operand(a, "a", 1)
    if not _rows_ok(b, k, 16):
        _tma_operand(b, "b", 1)
    kind = "aligned" if is_tma_aligned(a_scale) else _a_scale_kind(a_scale, "a_scale")
    if not (b_scale.strides == (kb, 1) and not b_scale.ptr & 3):
        _contiguous(b_scale, "b_scale", 4)
    if not (a.device == a_scale.device == b.device == b_scale.device == device
            and (out is None or out.device == device)):
        _devices(device, a=a, a_scale=a_scale, b=b, b_scale=b_scale, out=out)
    return m, n, k, kind


def _grouped_rest(a, a_scale, b, b_scale, index, index_name: str, out, k: int, nb: int, kb: int,
                  device: int) -> str:
    """The checks the two grouped layouts share (after their shapes): b's rows, the scale layouts,
    the int32 index array (m_indices or masked_m) and the devices. Returns a_scale's kind."""
    if not _groups_ok(b, k):
        _tma_operand(b, "b", 1)
    kind = "aligned" if is_tma_aligned(a_scale) else _a_scale_kind(a_scale, "a_scale")
    if not (b_scale.strides == (nb * kb, kb, 1) and not b_scale.ptr & 3):
        _contiguous(b_scale, "b_scale", 4)
    if not (index.strides == (1,) and not index.ptr & 3):
        _contiguous(index, index_name, 4)
    if not (a.device == a_scale.device == b.device == b_scale.device == index.device == device
            and (out is None or out.device == device)):
        _devices(device, **{"a": a, "a_scale": a_scale, "b": b, "b_scale": b_scale, index_name: index, "out": out})
    return kind


def _grouped_weights(b, b_scale) -> None:
    """The grouped layouts' b and b_scale: arrays of the right dtype and rank."""
    if not (type(b) is ArrayInfo and b.dtype in FP8_DTYPES and len(b.shape) == 3):
        _array(b, "b", FP8_DTYPES, _FP8, 3, "[G, N, K]")
    if not (type(b_scale) is ArrayInfo and b_scale.dtype is FLOAT32 and len(b_scale.shape) == 3):
        _array(b_scale, "b_scale", (FLOAT32,), "float32", 3, "[G, ceil(N/128), ceil(K/128)]")


def check_contiguous(a, a_scale, b, b_scale, m_indices, out, device: int) -> tuple:
    """``m_grouped_matmul_contiguous``: returns (m, n, k, num_groups, a_scale_kind); m is sum M."""
    if not (type(a) is ArrayInfo and a.dtype in FP8_DTYPES and len(a.shape) == 2):
        _array(a, "a", FP8_DTYPES, _FP8, 2, "[sum M, K]")
    if not (type(a_scale) is ArrayInfo and a_scale.dtype is FLOAT32 and len(a_scale.shape) == 2):
        _array(a_scale, "a_scale", (FLOAT32,), "float32", 2, "[sum M, ceil(K/128)]")
    _grouped_weights(b, b_scale)
    if not (type(m_indices) is ArrayInfo and m_indices.dtype is INT32 and len(m_indices.shape) == 1):
        _array(m_indices, "m_indices", (INT32,), "int32", 1, "[sum M]")
    m, k = a.shape
    groups, n = b.shape[0], b.shape[1]
    if groups < 1:
        raise ValueError(f"b must hold at least 1 group; got shape {b.shape}")
    if m % CONTIGUOUS_M_ALIGNMENT:
        raise ValueError(f"a has sum M={m} rows (shape {a.shape}); sum M must be a multiple of "
                         f"{CONTIGUOUS_M_ALIGNMENT} (each expert's segment is padded to it)")
    if k < 16 or k & 15 or b.shape[2] != k or n < 8 or n & 7:
        _k_and_n(a.shape, b.shape)
    kb, nb = (k + 127) >> 7, (n + 127) >> 7
    if a_scale.shape != (m, kb):
        _shape(a_scale, "a_scale", (m, kb), "[sum M, ceil(K/128)]")
    if b_scale.shape != (groups, nb, kb):
        _shape(b_scale, "b_scale", (groups, nb, kb), "[G, ceil(N/128), ceil(K/128)]")
    if m_indices.shape != (m,):
        _shape(m_indices, "m_indices", (m,), "[sum M]")
    if out is not None:
        if not (type(out) is ArrayInfo and out.dtype is BFLOAT16 and out.shape == (m, n)):
            _out(out, (m, n), "[sum M, N]")
        if m and not _rows_ok(out, n, 8):
            _tma_operand(out, "out", 2)
    if m and not _rows_ok(a, k, 16):
        _tma_operand(a, "a", 1)
    kind = _grouped_rest(a, a_scale, b, b_scale, m_indices, "m_indices", out, k, nb, kb, device)
    return m, n, k, groups, kind


def _expected_m(expected_m) -> None:
    if not isinstance(expected_m, (int, np.integer)) or isinstance(expected_m, bool):
        raise TypeError(f"expected_m must be a Python int; got {type_name(expected_m)}")
    if expected_m <= 0:
        raise ValueError(f"expected_m must be positive; got {expected_m}")


def check_expected_m(expected_m) -> int:
    """``expected_m`` as a Python int (numpy integers accepted); TypeError/ValueError otherwise."""
    _expected_m(expected_m)
    return int(expected_m)


def _masked_out(out: ArrayInfo, n: int) -> None:
    _tma_operand(out, "out", 2)
    if 0 not in out.shape and out.strides[1] != n:
        raise ValueError(f"out must be C-contiguous (strides {_c_strides(out.shape)}); got strides "
                         f"{out.strides} (elements) for shape {out.shape}")


def check_masked(a, a_scale, b, b_scale, masked_m, expected_m, out, device: int) -> tuple:
    """``m_grouped_matmul_masked``: returns (max_m, n, k, num_groups, a_scale_kind)."""
    if not (type(a) is ArrayInfo and a.dtype in FP8_DTYPES and len(a.shape) == 3):
        _array(a, "a", FP8_DTYPES, _FP8, 3, "[G, max_m, K]")
    if not (type(a_scale) is ArrayInfo and a_scale.dtype is FLOAT32 and len(a_scale.shape) == 3):
        _array(a_scale, "a_scale", (FLOAT32,), "float32", 3, "[G, max_m, ceil(K/128)]")
    _grouped_weights(b, b_scale)
    if not (type(masked_m) is ArrayInfo and masked_m.dtype is INT32 and len(masked_m.shape) == 1):
        _array(masked_m, "masked_m", (INT32,), "int32", 1, "[G]")
    if not (type(expected_m) is int and expected_m > 0):
        _expected_m(expected_m)
    groups, max_m, k = a.shape
    n = b.shape[1]
    if groups < 1:
        raise ValueError(f"a must hold at least 1 group; got shape {a.shape}")
    if b.shape[0] != groups:
        raise ValueError(f"b must have the same number of groups as a (G={groups}); got b.shape={b.shape}")
    if k < 16 or k & 15 or b.shape[2] != k or n < 8 or n & 7:
        _k_and_n(a.shape, b.shape)
    kb, nb = (k + 127) >> 7, (n + 127) >> 7
    if a_scale.shape != (groups, max_m, kb):
        _shape(a_scale, "a_scale", (groups, max_m, kb), "[G, max_m, ceil(K/128)]")
    if b_scale.shape != (groups, nb, kb):
        _shape(b_scale, "b_scale", (groups, nb, kb), "[G, ceil(N/128), ceil(K/128)]")
    if masked_m.shape != (groups,):
        _shape(masked_m, "masked_m", (groups,), "[G]")
    if out is not None:
        if not (type(out) is ArrayInfo and out.dtype is BFLOAT16 and out.shape == (groups, max_m, n)):
            _out(out, (groups, max_m, n), "[G, max_m, N]")
        if max_m and not (out.strides == (max_m * n, n, 1) and not out.ptr & 15):
            _masked_out(out, n)
    if max_m and not _groups_ok(a, k):
        _tma_operand(a, "a", 1)
    kind = _grouped_rest(a, a_scale, b, b_scale, masked_m, "masked_m", out, k, nb, kb, device)
    return max_m, n, k, groups, kind

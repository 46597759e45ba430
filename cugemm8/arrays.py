"""Device-array intake: any CUDA array an entry point receives becomes a cupy.ndarray
(``as_device_array``) and is summarized for the checks (``describe``). Imports no other cugemm8
module, so every layer can use it."""
from __future__ import annotations

from typing import NamedTuple

import cupy
import ml_dtypes
import numpy as np

UINT8 = np.dtype(np.uint8)
INT8 = np.dtype(np.int8)
INT32 = np.dtype(np.int32)
FLOAT32 = np.dtype(np.float32)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


class ArrayInfo(NamedTuple):
    shape: tuple
    strides: tuple      # in elements
    dtype: np.dtype
    ptr: int
    device: int


_ndarray = cupy.ndarray


def type_name(x) -> str:
    """``x``'s type as messages show it: bare for builtins, module-qualified otherwise."""
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def as_device_array(x, name: str):
    """``x`` as a cupy.ndarray, zero-copy. Raises TypeError naming ``name`` for anything that is not
    a CUDA device array."""
    if type(x) is _ndarray or isinstance(x, _ndarray):
        return x
    if not isinstance(x, (np.ndarray, np.generic)):
        try:
            if hasattr(x, "__cuda_array_interface__"):
                return cupy.asarray(x)
            if hasattr(x, "__dlpack__"):
                return cupy.from_dlpack(x)
        except Exception as exc:  # a malformed foreign array can raise anything (KeyError, RuntimeError, ...)
            raise TypeError(f"{name} could not be taken as a CUDA device array ({exc}); "
                            f"got {type_name(x)}") from exc
    raise TypeError(f"{name} must be a CUDA device array (cupy, or anything with "
                    f"__cuda_array_interface__/__dlpack__); got {type_name(x)}")


def describe(x, name: str = "array") -> ArrayInfo:
    """The facts the checks need about a cupy.ndarray."""
    strides = x.strides
    itemsize = x.itemsize
    if itemsize != 1:
        if len(strides) == 2:  # the common case, written out (this runs on every call)
            s0, s1 = strides
            if s0 % itemsize or s1 % itemsize:
                _odd_strides(name, strides, itemsize)
            strides = (s0 // itemsize, s1 // itemsize)
        else:
            if any(s % itemsize for s in strides):
                _odd_strides(name, strides, itemsize)
            strides = tuple([s // itemsize for s in strides])
    data = x.data
    # tuple.__new__ skips the NamedTuple's Python-level __new__, which costs time on every call.
    return _new_tuple(ArrayInfo, (x.shape, strides, x.dtype, data.ptr, data.device_id))


_new_tuple = tuple.__new__


def _odd_strides(name: str, strides: tuple, itemsize: int) -> None:
    raise ValueError(f"{name} has byte strides {strides} that are not multiples of its item size {itemsize}")

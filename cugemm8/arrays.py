"""Device-array intake: any CUDA array an entry point receives becomes a cupy.ndarray
(``as_device_array``, foreign arrays through ``cugemm8.dlpack``) and is summarized for the checks
(``describe``); a ``stream=`` argument becomes a handle (``stream_handle``). Imports no other cugemm8
module but ``dlpack``, so every layer can use it."""
from __future__ import annotations

from typing import NamedTuple

import cupy
import ml_dtypes
import numpy as np

from .dlpack import from_dlpack

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


def as_device_array(x, name: str, stream=None, handshake: bool = True):
    """``x`` as a cupy.ndarray, zero-copy. Raises TypeError naming ``name`` for anything that is not
    a CUDA device array.

    Foreign arrays are taken through DLPack first (``cugemm8.dlpack``: e4m3 as uint8 bits; with
    ``handshake`` the producer orders its pending work before ``stream``, see ``stream_handle``), then
    through ``__cuda_array_interface__`` (CuPy synchronizes on the interface's stream, if it names one)."""
    if type(x) is _ndarray or isinstance(x, _ndarray):
        return x
    if not isinstance(x, (np.ndarray, np.generic)):
        try:
            if hasattr(x, "__dlpack__"):
                return from_dlpack(x, name, stream_handle(stream) if handshake else None)
            if hasattr(x, "__cuda_array_interface__"):
                return cupy.asarray(x)
        except TypeError as exc:
            if str(exc).startswith(name):
                raise
            raise TypeError(f"{name} could not be taken as a CUDA device array ({exc}); "
                            f"got {type_name(x)}") from exc
        except Exception as exc:  # a malformed foreign array can raise anything (KeyError, RuntimeError, ...)
            raise TypeError(f"{name} could not be taken as a CUDA device array ({exc}); "
                            f"got {type_name(x)}") from exc
    raise TypeError(f"{name} must be a CUDA device array (cupy, or anything with "
                    f"__dlpack__/__cuda_array_interface__); got {type_name(x)}")


# Producers whose DLPack handshake orders the framework's current stream, whichever tensor it is called on
# (torch: `current_stream` is per thread and device, not per tensor). One handshake per call covers all of
# their arrays, which saves ~20 µs per further tensor (NOTES.md, v21). JAX's handshake is per array.
_CURRENT_STREAM_PRODUCERS = ("torch",)


def as_device_arrays(names: tuple, arrays: tuple, stream) -> tuple:
    """``as_device_array`` over one call's arguments (None stays None), with one handshake per call for the
    producers in _CURRENT_STREAM_PRODUCERS."""
    done = set()
    taken = []
    for name, x in zip(names, arrays):
        if x is None or type(x) is _ndarray:
            taken.append(x)
            continue
        root = type(x).__module__.partition(".")[0]
        taken.append(as_device_array(x, name, stream, root not in done))
        if root in _CURRENT_STREAM_PRODUCERS:
            done.add(root)
    return tuple(taken)


_current_stream = cupy.cuda.get_current_stream


def stream_handle(stream) -> int:
    """The CUDA stream handle (an int) of a ``stream=`` argument: None (CuPy's current stream), a raw handle
    int, a CuPy stream (``.ptr``), anything with the CUDA stream protocol (``__cuda_stream__``, e.g. a
    torch.cuda.Stream or a cuda.core Stream) or a ``cuda_stream`` attribute."""
    if stream is None:
        return _current_stream().ptr
    ptr = getattr(stream, "ptr", None)
    if type(ptr) is int:
        return ptr
    if isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0:
            raise ValueError(f"stream must be a non-negative CUDA stream handle; got {stream}")
        return stream
    if isinstance(stream, type):
        _bad_stream(stream)
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        try:
            version, handle = protocol()
        except Exception as exc:
            raise TypeError(f"stream must return (version, handle) from __cuda_stream__(); it raised {exc!r}") from exc
        if isinstance(handle, int) and not isinstance(handle, bool):
            return handle
        raise TypeError(f"stream must return (version, handle int) from __cuda_stream__(); got handle {handle!r}")
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int) and not isinstance(handle, bool):
        return handle
    _bad_stream(stream)


def _bad_stream(stream):
    raise TypeError(f"stream must be None, a CUDA stream handle int, a cupy.cuda.Stream, a torch.cuda.Stream or "
                    f"anything with __cuda_stream__ or an int cuda_stream; got {type_name(stream)}")


class StreamRef:
    """A raw stream handle behind the CUDA stream protocol, for ``cupy.cuda.Stream.from_external``."""
    __slots__ = ("handle",)

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


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

"""A DLPack consumer: any producer's ``__dlpack__`` capsule as a zero-copy cupy.ndarray.

CuPy's own ``from_dlpack`` refuses float8 (DLPack type code 10, which torch and JAX use for
``float8_e4m3fn``) and always hands the producer CuPy's current stream. Reading the capsule here lets
cugemm8 take e4m3 arrays as their uint8 bits and tell the producer which stream the GEMM runs on, so
that the producer orders its pending work before it (DLPack's stream handshake).

Only the structures of the DLPack header are read (v0.x ``DLManagedTensor`` and v1.x
``DLManagedTensorVersioned``). The capsule is not consumed: the cupy view keeps the capsule itself alive,
and the capsule's destructor (which the protocol requires of every producer) frees the tensor when the last
view is gone. That leaves nothing to rename and no deleter to call, which keeps a call cheap (NOTES.md, v21).
"""
from __future__ import annotations

import ctypes
import struct

import cupy
import ml_dtypes
import numpy as np

KDL_CUDA, KDL_CUDA_MANAGED = 2, 13
_DEVICE_NAMES = {1: "CPU", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm"}
FLOAT8_E4M3FN = 10            # DLPack 1.1's kDLFloat8_e4m3fn

# (type code, bits) -> the dtype of the cupy view. e4m3 becomes its raw bits (uint8), the form the
# kernels and the rest of the API take.
_DTYPES = {key: np.dtype(t) for key, t in {
    (0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
    (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
    (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64,
    (4, 16): ml_dtypes.bfloat16, (6, 8): np.bool_, (FLOAT8_E4M3FN, 8): np.uint8}.items()}
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex", 6: "bool",
               7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz", 10: "float8_e4m3fn",
               11: "float8_e4m3fnuz", 12: "float8_e5m2", 13: "float8_e5m2fnuz", 14: "float8_e8m0fnu"}


# The DLPack structures, read with struct (one read per structure; ctypes field access costs more).
_TENSOR = struct.Struct("<QiiiBBHQQQ")  # data, device (type, id), ndim, dtype (code, bits, lanes), shape*, strides*, byte_offset
_TENSOR_OFFSET = {b"dltensor_versioned": 32, b"dltensor": 0}   # after (version, manager_ctx, deleter, flags)

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = _api.PyCapsule_GetName
_capsule_pointer = _api.PyCapsule_GetPointer
_string_at = ctypes.string_at
_unpack = struct.unpack


def _capsule(x, stream_ptr: int | None):
    """Call ``x.__dlpack__``: with the stream handshake (``stream_ptr``), or with none (-1) where the caller has
    ordered the producer's work already; the newest protocol first."""
    stream = -1 if stream_ptr is None else (stream_ptr or 1)
    try:
        return x.__dlpack__(stream=stream, max_version=(1, 1))
    except TypeError:   # a producer older than DLPack 1.0's keywords
        pass
    try:
        return x.__dlpack__(stream=stream)
    except (TypeError, ValueError):
        return x.__dlpack__()


def from_dlpack(x, name: str, stream_ptr: int | None) -> cupy.ndarray:
    """``x`` (a DLPack producer on a CUDA device) as a cupy.ndarray viewing its memory; float8_e4m3fn comes as
    uint8. ``stream_ptr``: the stream the caller will use ``x`` on (the producer orders its work before it), or
    None for no handshake. Raises TypeError naming ``name`` for host memory, an unsupported dtype or a
    malformed capsule."""
    capsule = _capsule(x, stream_ptr)
    try:
        key = _capsule_name(capsule)
    except (ValueError, ctypes.ArgumentError):
        key = None
    tensor_at = _TENSOR_OFFSET.get(key)
    if tensor_at is None:
        raise TypeError(f"{name}.__dlpack__() did not return an unused DLPack capsule; got "
                        f"{type(capsule).__name__} named {key!r}")
    address = _capsule_pointer(capsule, key)
    (data, device, device_id, ndim, code, bits, lanes, shape_at, strides_at,
     byte_offset) = _TENSOR.unpack(_string_at(address + tensor_at, 48))
    if device != KDL_CUDA and device != KDL_CUDA_MANAGED:
        where = _DEVICE_NAMES.get(device, f"DLPack device type {device}")
        raise TypeError(f"{name} is in {where} memory; cugemm8 needs a CUDA device array")
    dtype = _DTYPES.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        kind = _CODE_NAMES.get(code, f"type code {code}")
        raise TypeError(f"{name} has a DLPack dtype cugemm8 does not take ({kind}, {bits} bits, {lanes} lanes)")
    itemsize = dtype.itemsize
    if ndim == 2 and strides_at:   # the common case, one read for shape and one for strides
        shape = _unpack("<2q", _string_at(shape_at, 16))
        s0, s1 = _unpack("<2q", _string_at(strides_at, 16))
        strides = (s0 * itemsize, s1 * itemsize)
    else:
        shape = _unpack(f"<{ndim}q", _string_at(shape_at, 8 * ndim)) if ndim else ()
        if strides_at and ndim:
            strides = tuple([v * itemsize for v in _unpack(f"<{ndim}q", _string_at(strides_at, 8 * ndim))])
        else:  # NULL strides: compact row-major
            strides, step = [], itemsize
            for extent in reversed(shape):
                strides.append(step)
                step *= max(extent, 1)
            strides = tuple(reversed(strides))
    if 0 in shape:
        extent = 0
    else:
        extent = itemsize
        for n, st in zip(shape, strides):
            if st < 0:
                raise TypeError(f"{name} has negative strides {strides} (bytes); cugemm8 takes arrays with "
                                "non-negative strides")
            extent += (n - 1) * st
    memory = cupy.cuda.UnownedMemory(data + byte_offset, extent, capsule, device_id)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


def data_pointer(x) -> tuple[int, int]:
    """(address of the first element, device id) of a CUDA DLPack producer, with no handshake and no view: for
    buffers whose shape, dtype and order the caller already knows (XLA's, inside a buffer callback)."""
    capsule = x.__dlpack__(stream=-1)
    key = _capsule_name(capsule)
    tensor_at = _TENSOR_OFFSET[key]
    data, device, device_id, _, _, _, _, _, _, byte_offset = _TENSOR.unpack(
        _string_at(_capsule_pointer(capsule, key) + tensor_at, 48))
    if device != KDL_CUDA and device != KDL_CUDA_MANAGED:
        raise TypeError(f"a buffer in DLPack device type {device} memory; cugemm8 needs CUDA device memory")
    return data + byte_offset, device_id

"""A DLPack consumer: any producer's ``__dlpack__`` capsule as a zero-copy cupy.ndarray.

CuPy's own ``from_dlpack`` refuses float8 (DLPack type code 10, which torch and JAX use for
``float8_e4m3fn``) and always hands the producer CuPy's current stream. Reading the capsule here lets
cugemm8 take e4m3 arrays as their uint8 bits and tell the producer which stream the GEMM runs on, so
that the producer orders its pending work before it (DLPack's stream handshake).

Only the structures of the DLPack header are used (v0.x ``DLManagedTensor`` and v1.x
``DLManagedTensorVersioned``); the consumer renames the capsule to ``used_*`` and calls the producer's
deleter once the array (and every view of it) is gone.
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
_POINTER = struct.Struct("<Q")
# (offset of the DLTensor, offset of the deleter) in DLManagedTensorVersioned (version, manager_ctx, deleter,
# flags, dl_tensor) and in DLManagedTensor (dl_tensor, manager_ctx, deleter).
_LAYOUT = {b"dltensor_versioned": (32, 16), b"dltensor": (0, 56)}

_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)   # called with the GIL held
_deleters: dict[int, object] = {}                     # deleter address -> its ctypes callable

_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_string_at = ctypes.string_at

# Names the capsule is renamed to once consumed. They must outlive the capsule (PyCapsule keeps the pointer).
_USED = {b"dltensor": ctypes.c_char_p(b"used_dltensor"),
         b"dltensor_versioned": ctypes.c_char_p(b"used_dltensor_versioned")}


class _Owner:
    """Holds a consumed capsule's tensor; calls the producer's deleter when the last view is gone."""
    __slots__ = ("address", "deleter")

    def __init__(self, address: int, deleter: int):
        self.address, self.deleter = address, deleter

    def __del__(self):
        if self.deleter:
            call = _deleters.get(self.deleter)
            if call is None:
                call = _deleters[self.deleter] = _DELETER(self.deleter)
            self.deleter = 0
            call(self.address)


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
    for key in (b"dltensor_versioned", b"dltensor"):
        if _api.PyCapsule_IsValid(capsule, key):
            break
    else:
        raise TypeError(f"{name}.__dlpack__() did not return a DLPack capsule; got {type(capsule).__name__}")
    address = _api.PyCapsule_GetPointer(capsule, key)
    tensor_at, deleter_at = _LAYOUT[key]
    (data, device, device_id, ndim, code, bits, lanes, shape_at, strides_at,
     byte_offset) = _TENSOR.unpack(_string_at(address + tensor_at, _TENSOR.size))
    # Read everything before taking ownership: an error below leaves the capsule to free itself.
    if device != KDL_CUDA and device != KDL_CUDA_MANAGED:
        where = _DEVICE_NAMES.get(device, f"DLPack device type {device}")
        raise TypeError(f"{name} is in {where} memory; cugemm8 needs a CUDA device array")
    dtype = _DTYPES.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        kind = _CODE_NAMES.get(code, f"type code {code}")
        raise TypeError(f"{name} has a DLPack dtype cugemm8 does not take ({kind}, {bits} bits, {lanes} lanes)")
    itemsize = dtype.itemsize
    shape = struct.unpack(f"<{ndim}q", _string_at(shape_at, 8 * ndim)) if ndim else ()
    if strides_at and ndim:
        strides = tuple([s * itemsize for s in struct.unpack(f"<{ndim}q", _string_at(strides_at, 8 * ndim))])
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
    deleter = _POINTER.unpack(_string_at(address + deleter_at, 8))[0]
    if _api.PyCapsule_SetName(capsule, _USED[key]) != 0:
        raise TypeError(f"{name}: could not take ownership of its DLPack capsule")
    memory = cupy.cuda.UnownedMemory(data + byte_offset, extent, _Owner(address, deleter), device_id)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)

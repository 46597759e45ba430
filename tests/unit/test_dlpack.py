"""CPU tier: the DLPack consumer (cugemm8.dlpack) on capsules built here, as torch and JAX build them:
e4m3 (type code 10) taken as uint8 bits, shapes and strides, the stream handshake, lifetime (the view keeps
the capsule, whose destructor frees the tensor), and what it refuses."""
import ctypes
import gc

import ml_dtypes
import numpy as np
import pytest

from cugemm8 import dlpack

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


# The DLPack header's structures, written out independently of the consumer's struct formats.
class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_DESTRUCTOR = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)   # PyCapsule_Destructor, given the capsule's address


class Producer:
    """A fake CUDA producer: one DLPack tensor at a made-up device address (nothing dereferences it)."""

    def __init__(self, shape, code=1, bits=8, strides=None, device_type=dlpack.KDL_CUDA, versioned=True,
                 data=0x7F0000000000, byte_offset=0):
        self.streams, self.deleted = [], 0
        self.versioned = versioned
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        managed = _ManagedVersioned() if versioned else _Managed()
        t = managed.dl_tensor
        t.data, t.byte_offset, t.ndim = data, byte_offset, len(shape)
        t.device.device_type, t.device.device_id = device_type, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        if self.strides is not None:
            t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        if versioned:
            managed.major, managed.minor = 1, 1
        self.managed = managed
        self._destructor = _DESTRUCTOR(self._destroyed)

    def _destroyed(self, capsule_address):
        """What a producer's capsule destructor does for an unconsumed capsule: free the tensor."""
        self.deleted += 1

    def __dlpack__(self, stream=None, max_version=None):
        self.streams.append(stream)
        name = b"dltensor_versioned" if self.versioned else b"dltensor"
        self._name = ctypes.c_char_p(name)
        destructor = ctypes.cast(self._destructor, ctypes.c_void_p)
        return _api.PyCapsule_New(ctypes.addressof(self.managed), self._name, destructor)


@pytest.mark.parametrize("versioned", [True, False])
def test_float8_e4m3fn_comes_as_uint8(versioned):
    p = Producer((4, 32), code=dlpack.FLOAT8_E4M3FN, versioned=versioned)
    x = dlpack.from_dlpack(p, "a", 0)
    assert x.dtype == np.uint8 and x.shape == (4, 32) and x.strides == (32, 1)
    assert x.data.ptr == 0x7F0000000000 and x.data.device_id == 0
    assert p.streams == [1]   # the legacy default stream is 1 in DLPack's handshake, never 0
    dlpack.from_dlpack(p, "a", None)
    assert p.streams == [1, -1]   # no handshake

def test_strides_offset_and_dtypes():
    p = Producer((3, 5), code=2, bits=32, strides=(1, 4), byte_offset=64)   # an M-major float32 view
    x = dlpack.from_dlpack(p, "a_scale", 0x1234)
    assert x.dtype == np.float32 and x.strides == (4, 16) and x.data.ptr == 0x7F0000000000 + 64
    assert p.streams == [0x1234]
    assert dlpack.from_dlpack(Producer((2, 2), code=4, bits=16), "out", 9).dtype == ml_dtypes.bfloat16
    assert dlpack.from_dlpack(Producer((7,), code=0, bits=32), "m_indices", 9).dtype == np.int32
    assert dlpack.from_dlpack(Producer((4, 0)), "b", 9).shape == (4, 0)


def test_tensor_freed_once_when_the_last_view_dies():
    p = Producer((8, 16), code=dlpack.FLOAT8_E4M3FN)
    x = dlpack.from_dlpack(p, "a", 0)
    view = x[2:]
    del x
    gc.collect()
    assert p.deleted == 0
    del view
    gc.collect()
    assert p.deleted == 1


@pytest.mark.parametrize("producer, shown", [
    (Producer((4, 4), device_type=1), "a is in CPU memory"),
    (Producer((4, 4), code=12, bits=8), "float8_e5m2"),
    (Producer((4, 4), code=5, bits=64), "complex"),
    (Producer((4, 4), strides=(-4, 1)), "negative strides"),
])
def test_refused(producer, shown):
    with pytest.raises(TypeError) as caught:
        dlpack.from_dlpack(producer, "a", 0)
    assert str(caught.value).startswith("a ") and shown in str(caught.value)
    del caught
    gc.collect()
    assert producer.deleted == 1   # a refused array holds nothing


def test_not_a_capsule():
    class Odd:
        def __dlpack__(self, **kwargs):
            return object()

    with pytest.raises(TypeError, match="did not return an unused DLPack capsule"):
        dlpack.from_dlpack(Odd(), "b", 0)


def test_one_handshake_per_call_for_current_stream_producers():
    """torch orders its current stream, whichever tensor the handshake is called on: one per call suffices.
    Other producers (JAX: readiness per array) get one per array."""
    from cugemm8 import arrays

    class TorchLike(Producer):
        pass

    TorchLike.__module__ = "torch"
    t1, t2, other = TorchLike((4, 16)), TorchLike((4, 16)), Producer((4, 16))
    other2 = Producer((4, 16))
    taken = arrays.as_device_arrays(("a", "b", "c", "d", "e"), (t1, None, other, t2, other2), 5)
    assert taken[1] is None and [x.shape for x in taken if x is not None] == [(4, 16)] * 4
    assert (t1.streams, t2.streams, other.streams, other2.streams) == ([5], [-1], [5], [5])

"""CPU tier: device-array intake (cugemm8.arrays): what as_device_array refuses and how it takes
foreign arrays."""
import numpy as np
import pytest

from cugemm8 import arrays
from cugemm8.arrays import as_device_array


@pytest.mark.parametrize("bad, shown", [
    (np.zeros((2, 16), np.uint8), "numpy.ndarray"), (True, "bool"), (1.5, "float"), (None, "NoneType"),
    ([1, 2], "list"), (np.float32(1), "numpy.float32"),
])
def test_as_device_array_rejects(bad, shown):
    with pytest.raises(TypeError) as caught:
        as_device_array(bad, "a")
    msg = str(caught.value)
    assert msg.startswith("a must be a CUDA device array") and msg.endswith(shown), msg


def test_as_device_array_host_dlpack_rejected():
    class HostDLPack:  # a foreign host array: DLPack only, CPU device
        def __init__(self):
            self._x = np.zeros(4, np.float32)

        def __dlpack__(self, *args, **kwargs):
            return self._x.__dlpack__(*args, **kwargs)

        def __dlpack_device__(self):
            return self._x.__dlpack_device__()

    with pytest.raises(TypeError) as caught:
        as_device_array(HostDLPack(), "b_scale")
    assert str(caught.value).startswith("b_scale ")


def test_as_device_array_dispatch(monkeypatch):
    """DLPack comes first (with the caller's stream), __cuda_array_interface__ second."""
    calls = []
    monkeypatch.setattr(arrays.cupy, "asarray", lambda x: calls.append(("cai", x)) or "from-cai")
    monkeypatch.setattr(arrays, "from_dlpack", lambda x, name, stream: calls.append(("dlpack", x, stream)) or "from-dlpack")

    class CAI:
        __cuda_array_interface__ = {}

    class Both:
        __cuda_array_interface__ = {}

        def __dlpack__(self):
            pass

    cai, both = CAI(), Both()
    assert as_device_array(cai, "a", 7) == "from-cai"
    assert as_device_array(both, "a", 7) == "from-dlpack"   # a raw stream handle int
    assert calls == [("cai", cai), ("dlpack", both, 7)]


@pytest.mark.parametrize("stream, handle", [(0, 0), (5, 5)])
def test_stream_handle_ints(stream, handle):
    assert arrays.stream_handle(stream) == handle


def test_stream_handle_protocols():
    class CupyLike:
        ptr = 11

    class Protocol:           # the CUDA stream protocol (torch.cuda.Stream, cuda.core)
        def __cuda_stream__(self):
            return (0, 12)

    class TorchLike:          # an older torch.cuda.Stream: only .cuda_stream
        cuda_stream = 13

    assert [arrays.stream_handle(s) for s in (CupyLike(), Protocol(), TorchLike())] == [11, 12, 13]
    assert arrays.StreamRef(14).__cuda_stream__() == (0, 14)


@pytest.mark.parametrize("bad, error, shown", [
    (True, TypeError, "bool"), (1.5, TypeError, "float"), ("s", TypeError, "str"), (-1, ValueError, "-1"),
])
def test_stream_handle_rejects(bad, error, shown):
    with pytest.raises(error) as caught:
        arrays.stream_handle(bad)
    assert str(caught.value).startswith("stream must") and shown in str(caught.value)

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
    calls = []
    monkeypatch.setattr(arrays.cupy, "asarray", lambda x: calls.append(("cai", x)) or "from-cai")
    monkeypatch.setattr(arrays.cupy, "from_dlpack", lambda x: calls.append(("dlpack", x)) or "from-dlpack")

    class CAI:
        __cuda_array_interface__ = {}

        def __dlpack__(self):
            raise AssertionError("CAI comes first")

    class DLPack:
        def __dlpack__(self):
            pass

    cai, dl = CAI(), DLPack()
    assert as_device_array(cai, "a") == "from-cai"
    assert as_device_array(dl, "a") == "from-dlpack"
    assert calls == [("cai", cai), ("dlpack", dl)]

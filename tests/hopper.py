"""Shared GPU-test helpers: ``requires_hopper`` skips a test unless an sm_90 GPU is usable."""
import functools

import pytest


@functools.lru_cache(maxsize=None)
def has_hopper() -> bool:
    """True if CuPy sees a working driver and device 0 is compute capability 9.x (Hopper)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False
        return cupy.cuda.runtime.getDeviceProperties(0)["major"] == 9
    except Exception:  # no CuPy, no driver, no device: anything means "no"
        return False


requires_hopper = pytest.mark.skipif(not has_hopper(), reason="needs an NVIDIA Hopper (sm_90) GPU and driver")

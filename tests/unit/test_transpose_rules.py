"""CPU tier: the block transpose's rules (cugemm8.transpose.check_transpose) and its CUDA source, which must
compile for sm_90 with the quantizers' options and keep its shared-memory tile without local memory."""
import numpy as np
import pytest

from cugemm8 import jit, quantize, sass
from cugemm8.transpose import check_transpose

U8, F32 = np.dtype(np.uint8), np.dtype(np.float32)


@pytest.mark.parametrize("shape, scale", [((16, 16), (1, 1)), ((2112, 7168), (17, 56)), ((4, 4096, 7168), (4, 32, 56)),
                                          ((144, 4112), (2, 33))])
def test_valid(shape, scale):
    check_transpose(shape, U8, True, scale, F32)
    check_transpose(shape, np.dtype(np.int8), True, scale, F32)


@pytest.mark.parametrize("args, error, shown", [
    (((64, 64), F32, True, (1, 1), F32), TypeError, "b must have dtype uint8"),
    (((64,), U8, True, (1,), F32), ValueError, "b must be 2-D"),
    (((64, 72), U8, True, (1, 1), F32), ValueError, "b must have N and K multiples of 16"),
    (((72, 64), U8, True, (1, 1), F32), ValueError, "b must have N and K multiples of 16"),
    (((64, 64), U8, False, (1, 1), F32), ValueError, "b must be C-contiguous"),
    (((64, 64), U8, True, (1, 1), np.dtype(np.float16)), TypeError, "b_scale must have dtype float32"),
    (((256, 64), U8, True, (1, 1), F32), ValueError, "b_scale must have shape"),
    (((2, 64, 64), U8, True, (1, 1), F32), ValueError, "(2, 1, 1)"),
])
def test_refused(args, error, shown):
    with pytest.raises(error) as caught:
        check_transpose(*args)
    assert shown in str(caught.value)


def test_source_compiles_without_local_memory():
    source = quantize.kernel_source("transpose.cu")
    assert "#include" not in source
    cubin = jit.compile_cubin(source, name="transpose.cu", options=("-arch=sm_90",) + quantize.NVRTC_OPTIONS)
    usage = sass.resource_usage(cubin)["transpose_u8"]
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0 and usage["SHARED"] >= 64 * 33 * 4   # + the reserved 1 KB

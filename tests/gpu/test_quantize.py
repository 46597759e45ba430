"""GPU tier: the CuPy quantizers equal the NumPy references bit for bit; the A-scale layout helper."""
import numpy as np
import pytest

from hopper import requires_hopper

pytestmark = [pytest.mark.gpu, requires_hopper]

cupy = pytest.importorskip("cupy")
ml_dtypes = pytest.importorskip("ml_dtypes")

from cugemm8 import get_col_major_tma_aligned_tensor, per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402
from cugemm8.layout import get_tma_aligned_size  # noqa: E402
from cugemm8.quantize import per_block_cast_to_fp8_numpy, per_token_cast_to_fp8_numpy  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16]
SHAPES_2D = [(1, 1), (1, 128), (3, 130), (127, 255), (128, 128), (129, 7168 + 16), (300, 1000), (2, 64)]
SHAPES_3D = [(2, 33, 300), (3, 128, 256), (1, 200, 129)]


def random_input(seed, shape, dtype):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    x *= 10.0 ** rng.integers(-4, 4, size=shape[:-1] + (1,))   # tiles of very different sizes
    x.reshape(-1, shape[-1])[::5] = 0.0                        # and all-zero rows
    flat = x.reshape(-1)
    flat[::97] = 65000.0                                        # near float16's max
    flat[1::89] = 3e-7                                          # float16 subnormals
    return x.astype(dtype)


def assert_same(gpu, ref):
    q, s = (cupy.asnumpy(t) for t in gpu)
    q_ref, s_ref = ref
    assert q.dtype == np.uint8 and s.dtype == np.float32
    assert q.shape == q_ref.shape and s.shape == s_ref.shape
    assert np.array_equal(q, q_ref), f"{np.count_nonzero(q != q_ref)} codes differ"
    assert np.array_equal(s.view(np.uint32), s_ref.view(np.uint32)), "scales differ"


@pytest.mark.parametrize("scale_format", ["float32", "ue8m0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES_2D + SHAPES_3D, ids=str)
def test_per_token_bitwise(shape, dtype, scale_format):
    # K % 8 == 0 takes the vectorized kernel, the others the scalar one.
    x = random_input(sum(shape), shape, dtype)
    assert_same(per_token_cast_to_fp8(cupy.asarray(x), scale_format),
                per_token_cast_to_fp8_numpy(x, scale_format))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_token_many_batches(dtype):
    # More tiles than the resident half-warps hold in one batch (132 SMs: 8448 half-warps, up to 6 tiles each),
    # a partial last tile and rows of all-zero tiles: every batch, live or not, on the vectorized kernel.
    x = random_input(7, (1030, 8200), dtype)
    assert_same(per_token_cast_to_fp8(cupy.asarray(x)), per_token_cast_to_fp8_numpy(x))


# [.., T, C] row-major inputs quantized as their transposes [.., C, T]: the one-pass kernel where C % 8 == 0 and
# T % 16 == 0 (partial tiles along T, partial 64-column blocks along C, several groups), the copy otherwise.
TRANSPOSED = [(16, 8), (128, 64), (144, 72), (1040, 520), (3, 272, 136), (2, 16, 8)]
TRANSPOSED_COPIED = [(130, 64), (128, 60), (2, 40, 12)]


@pytest.mark.parametrize("scale_format", ["float32", "ue8m0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", TRANSPOSED + TRANSPOSED_COPIED, ids=str)
def test_per_token_of_a_transpose_bitwise(shape, dtype, scale_format):
    from cugemm8 import quantize

    y = random_input(sum(shape) + 2, shape, dtype)
    y[..., ::7] = 0   # all-zero output rows
    view = cupy.asarray(y).swapaxes(-1, -2)
    assert quantize._fused_transpose_ok(view) == (shape in TRANSPOSED)
    assert_same(per_token_cast_to_fp8(view, scale_format),
                per_token_cast_to_fp8_numpy(np.ascontiguousarray(y.swapaxes(-1, -2)), scale_format))


@pytest.mark.parametrize("scale_format", ["float32", "ue8m0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES_2D + SHAPES_3D, ids=str)
def test_per_block_bitwise(shape, dtype, scale_format):
    x = random_input(sum(shape) + 1, shape, dtype)
    assert_same(per_block_cast_to_fp8(cupy.asarray(x), scale_format),
                per_block_cast_to_fp8_numpy(x, scale_format))


def test_ue8m0_scales_are_powers_of_two_rounded_up():
    x = random_input(3, (64, 1024), np.float32)
    q, s = per_token_cast_to_fp8(cupy.asarray(x), "ue8m0")
    s = cupy.asnumpy(s)
    _, s_float = per_token_cast_to_fp8_numpy(x)
    assert np.all(s.view(np.uint32) & 0x7FFFFF == 0), "a UE8M0 scale with mantissa bits"
    assert np.all(s >= s_float) and np.all(s < 2 * s_float)


def test_non_contiguous_input():
    x = random_input(7, (64, 512), np.float32)
    view = cupy.asarray(x)[:, ::2]
    assert_same(per_token_cast_to_fp8(view), per_token_cast_to_fp8_numpy(x[:, ::2]))
    assert_same(per_block_cast_to_fp8(view.T), per_block_cast_to_fp8_numpy(x[:, ::2].T))


def test_extreme_values_bitwise():
    x = np.zeros((4, 256), np.float32)
    x[0, :5] = [3.4e38, -3.4e38, 1e-38, 1.4e-45, 448.0]
    x[1, :3] = [np.float32(np.nextafter(np.float32(448), np.float32(0))), 465.0, -1e-5]
    x[2] = np.float32(1e-30)
    for gpu, ref in ((per_token_cast_to_fp8, per_token_cast_to_fp8_numpy),
                     (per_block_cast_to_fp8, per_block_cast_to_fp8_numpy)):
        assert_same(gpu(cupy.asarray(x)), ref(x))


def test_extreme_values_ue8m0_bitwise():
    x = np.zeros((3, 256), np.float32)
    x[0, :3] = [3.4e38, -1e-38, 448.0]
    x[1, :2] = [1e-30, 2.0 ** -20]
    for gpu, ref in ((per_token_cast_to_fp8, per_token_cast_to_fp8_numpy),
                     (per_block_cast_to_fp8, per_block_cast_to_fp8_numpy)):
        assert_same(gpu(cupy.asarray(x), "ue8m0"), ref(x, "ue8m0"))


def test_quantizer_input_errors():
    with pytest.raises(TypeError, match="^x "):
        per_token_cast_to_fp8(np.zeros((4, 4), np.float32))
    with pytest.raises(TypeError, match="^w "):
        per_block_cast_to_fp8(cupy.zeros((4, 4), cupy.float64))
    with pytest.raises(ValueError, match="^x "):
        per_token_cast_to_fp8(cupy.zeros(4, cupy.float32))
    with pytest.raises(ValueError, match="^scale_format "):
        per_token_cast_to_fp8(cupy.zeros((4, 4), cupy.float32), "e8m0")
    with pytest.raises(TypeError, match="^scale_format "):
        per_block_cast_to_fp8(cupy.zeros((4, 4), cupy.float32), None)


# --------------------------------------------------------------------------- A-scale layout
@pytest.mark.parametrize("m, kb", [(1, 1), (5, 3), (64, 56), (130, 1), (4097, 2)])
def test_col_major_tma_aligned_2d(m, kb):
    host = np.random.default_rng(m * kb).standard_normal((m, kb)).astype(np.float32)
    x = cupy.asarray(host)
    y = get_col_major_tma_aligned_tensor(x)
    am = get_tma_aligned_size(m, 4)
    assert y.shape == (m, kb) and y.dtype == np.float32
    if kb > 1:
        assert y.strides == (4, 4 * am)
    assert y.data.ptr % 16 == 0
    assert np.array_equal(cupy.asnumpy(y), host)
    # zero-copy on aligned input
    again = get_col_major_tma_aligned_tensor(y)
    assert again is y


@pytest.mark.parametrize("g, m, kb", [(1, 7, 3), (4, 64, 16), (3, 130, 1), (2, 1, 5)])
def test_col_major_tma_aligned_3d(g, m, kb):
    host = np.random.default_rng(g + m + kb).standard_normal((g, m, kb)).astype(np.float32)
    y = get_col_major_tma_aligned_tensor(cupy.asarray(host))
    am = get_tma_aligned_size(m, 4)
    assert y.shape == (g, m, kb)
    assert y.strides[0] == 4 * am * kb and (m == 1 or y.strides[1] == 4) and (kb == 1 or y.strides[2] == 4 * am)
    assert np.array_equal(cupy.asnumpy(y), host)
    assert get_col_major_tma_aligned_tensor(y) is y


def test_col_major_tma_aligned_from_user_storage():
    # A user-built aligned view (storage [KB, aligned_m] transposed) is taken as is.
    m, kb = 10, 4
    storage = cupy.zeros((kb, get_tma_aligned_size(m, 4)), cupy.float32)
    view = storage.T[:m]
    assert get_col_major_tma_aligned_tensor(view) is view
    with pytest.raises(TypeError):
        get_col_major_tma_aligned_tensor(cupy.zeros((4, 4), cupy.float16))

"""GPU tier: transpose_fp8 is an exact transpose of the payload and the scale grid (batched too), and the data
gradient dX = dY·W runs on matmul with it."""
import cupy
import pytest

from hopper import requires_hopper
from problems import check_against_reference, make_dense

import cugemm8

pytestmark = [pytest.mark.gpu, requires_hopper]


@pytest.mark.parametrize("shape", [(16, 16), (48, 80), (144, 4112), (2112, 7168), (7168, 2112), (3, 64, 208),
                                   (2, 4096, 512), (0, 32)])
def test_exact(shape):
    rng = cupy.random.default_rng(sum(shape))
    b = rng.integers(0, 256, size=shape, dtype=cupy.uint8)
    n, k = shape[-2:]
    s = rng.random(shape[:-2] + (-(-n // 128), -(-k // 128)), dtype=cupy.float32)
    bt, st = cugemm8.transpose_fp8(b, s)
    assert bt.shape == shape[:-2] + (k, n) and bt.flags.c_contiguous and st.flags.c_contiguous
    assert bool((bt == b.swapaxes(-1, -2)).all()) and bool((st == s.swapaxes(-1, -2)).all())


def test_data_gradient_through_matmul():
    """dX [M, K] = dY [M, N] · W [N, K]: W's transpose is matmul's B operand, unchanged kernels."""
    m, n, k = 256, 2112, 1024
    dy, wt_float, dy_q, dy_s, _, _ = make_dense(m, k, n, seed=3)       # dY [M, N]; a float [K, N] to stand for Wᵀ
    w_q, w_s = cugemm8.per_block_cast_to_fp8(cupy.ascontiguousarray(wt_float.T))   # W [N, K], 128x128 blocks
    wt_q, wt_s = cugemm8.transpose_fp8(w_q, w_s)
    direct_q, direct_s = cugemm8.per_block_cast_to_fp8(wt_float)   # a 128x128 block's amax is the same transposed
    assert bool((wt_q == direct_q).all()) and bool((wt_s == direct_s).all())
    dx = cugemm8.matmul(dy_q, dy_s, wt_q, wt_s)
    check_against_reference(dx, dy_q, dy_s, wt_q, wt_s, dy, wt_float)


def test_refuses_before_launch():
    with pytest.raises(ValueError, match="multiples of 16"):
        cugemm8.transpose_fp8(cupy.zeros((64, 72), cupy.uint8), cupy.zeros((1, 1), cupy.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        cugemm8.transpose_fp8(cupy.zeros((64, 128), cupy.uint8)[:, :64], cupy.zeros((1, 1), cupy.float32))


@pytest.mark.parametrize("cast", ["per_token_cast_to_fp8", "per_block_cast_to_fp8"])
def test_quantizers_take_token_dimension_views(cast):
    """The weight gradient quantizes activations and output gradients along the token dimension: the quantizers
    take the transposed (strided) view and give what they give on its contiguous copy."""
    x = cupy.random.default_rng(5).standard_normal((384, 2112), dtype=cupy.float32)
    fn = getattr(cugemm8, cast)
    q, s = fn(x.T)
    q2, s2 = fn(cupy.ascontiguousarray(x.T))
    assert bool((q == q2).all()) and bool((s == s2).all())

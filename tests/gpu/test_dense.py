"""GPU tier, dense layout (matmul): the kernel against a float64 reference (skipped without a Hopper GPU)."""
import cupy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper import requires_hopper
from kernel_configs import SPLIT_K_EXPLICIT, WIDE_BANDS, wide_band_configs
from problems import PROPERTY_SETTINGS, check_against_reference, make_dense, poisoned, quantize

import cugemm8
from cugemm8 import fp8_gemm, heuristics

pytestmark = [pytest.mark.gpu, requires_hopper]


dims_n = st.one_of(st.sampled_from([8, 16, 24, 112, 128, 136, 2112, 4096, 7168]),
                   st.integers(1, 512).map(lambda v: 8 * v))
dims_k = st.one_of(st.sampled_from([16, 112, 128, 144, 512, 1536, 7168]), st.integers(1, 256).map(lambda v: 16 * v))
dims_m = st.one_of(st.integers(1, 300), st.integers(300, 3000), st.sampled_from([64, 128, 256, 4096]))


@PROPERTY_SETTINGS
@given(m=dims_m, n=dims_n, k=dims_k, seed=st.integers(0, 2**31 - 1))
def test_matmul_property(m, n, k, seed):
    x, w, a, sa, b, sb = make_dense(m, n, k, seed)
    out = poisoned((m, n))
    res = cugemm8.matmul(a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out=out)
    assert res is out
    check_against_reference(out, a, sa, b, sb, x, w)
    again = cugemm8.matmul(a, sa, b, sb)  # row-major scales, new output: bitwise the same
    assert bool((again.view(cupy.uint16) == out.view(cupy.uint16)).all()), "results differ between runs"


@pytest.mark.parametrize("m", [64, 128, 4096])
@pytest.mark.parametrize("n,k", [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
                                 (7168, 2048)])
def test_matmul_benchmark_shapes(m, n, k):
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=m + n + k)
    out = cugemm8.matmul(a, sa, b, sb)
    check_against_reference(out, a, sa, b, sb, x, w)


# Tiles whose width does not divide 128 straddle two rows of B's scale grid; the column where the second row
# starts depends on n0 % 128. One-slab loops (64- and 128-row tiles) take it as a compile-time constant, one
# loop copy per value; 256-row tiles at run time. Each width runs over enough n-blocks to start a tile at every
# value, plus a partial last block.
@pytest.mark.parametrize("bm, bn", [(128, 96), (128, 112), (128, 144), (128, 160), (128, 192), (64, 80), (256, 112)])
def test_tiles_straddling_b_scale_rows(bm, bn):
    from math import gcd

    m, k = 300, 640
    n = bn * (128 // gcd(bn, 128)) + 48
    cfg = heuristics.make_config("normal", n, k, 1, bm, bn)
    rng = cupy.random.default_rng(bm + bn)
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    # Each 128-row block of B at its own magnitude (1/4 to 4), so that a scale from the wrong row shows.
    w = rng.standard_normal((n, k), dtype=cupy.float32) * cupy.repeat(4.0 ** (cupy.arange(n // 128 + 1) % 3 - 1), 128)[:n, None]
    a, sa, b, sb = quantize(x, w.astype(cupy.float32))
    out = poisoned((m, n))
    fp8_gemm.bind(cfg, a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out)()
    check_against_reference(out, a, sa, b, sb, x, w)


def test_matmul_stream_and_strided_operands():
    m, n, k = 333, 264, 400
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=7)
    a_wide = cupy.zeros((m, k + 48), dtype=cupy.uint8)
    a_wide[:, :k] = a
    cupy.cuda.Device().synchronize()   # the inputs come from the legacy stream, which `stream` does not wait for
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        out = cugemm8.matmul(a_wide[:, :k], sa, b, sb)
    out2 = cugemm8.matmul(a, sa, b, sb, stream=stream)
    stream.synchronize()
    check_against_reference(out, a, sa, b, sb, x, w)
    assert bool((out.view(cupy.uint16) == out2.view(cupy.uint16)).all())


def test_matmul_m_zero():
    a = cupy.zeros((0, 256), cupy.uint8)
    sa = cupy.zeros((0, 2), cupy.float32)
    b = cupy.zeros((64, 256), cupy.uint8)
    sb = cupy.ones((1, 2), cupy.float32)
    assert cugemm8.matmul(a, sa, b, sb).shape == (0, 64)


# 128x256 tiles in column halves (KernelConfig.col_halves): each math warpgroup computes both 128-column halves of its
# 64-row slab, the second half with B's next scale row. B's 128-row blocks at different magnitudes, so that a half
# scaled by the other's row shows; partial m-, n- (a last tile of 88 columns, past its second half) and k-blocks; a grid
# of two CTAs walks several tiles through the stage ring. The same bits as 128x128 tiles (the same sums in the same
# order).
@pytest.mark.parametrize("m, n, k, grid", [(300, 600, 640, None), (1000, 1024, 1040, 2), (129, 256, 128, None)])
def test_column_halves(m, n, k, grid):
    cfg = heuristics.make_config("normal", n, k, 1, 128, 256)
    assert cfg.col_halves == 2
    rng = cupy.random.default_rng(m + n)
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    w = rng.standard_normal((n, k), dtype=cupy.float32) * cupy.repeat(4.0 ** (cupy.arange(n // 128 + 1) % 3 - 1), 128)[:n, None]
    a, sa, b, sb = quantize(x, w.astype(cupy.float32))
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    out, ref = poisoned((m, n)), poisoned((m, n))
    fp8_gemm.bind(cfg, a, sa, b, sb, out, grid=grid)()
    check_against_reference(out, a, sa, b, sb, x, w)
    fp8_gemm.bind(heuristics.make_config("normal", n, k, 1, 128, 128), a, sa, b, sb, ref)()
    assert bool((out.view(cupy.uint16) == ref.view(cupy.uint16)).all()), "not the bits of 128x128 tiles"


# ----------------------------------------------------------------------------- wide bands
@pytest.mark.parametrize("m, n, k", WIDE_BANDS)
def test_wide_bands(m, n, k):
    """The heuristic's configuration for 16384 rows (bands of WIDE_RASTER_GROUP n-blocks), run on fewer rows: two
    bands, the second narrower (N = 7168: 56 n-blocks; 5192: 41, the last partial), one band of 11 (2112, 128x192
    tiles), partial m- and k-blocks; right, and the bits of RASTER_GROUP's bands."""
    wide, narrow = wide_band_configs(n, k)
    assert wide.raster_group == heuristics.WIDE_RASTER_GROUP
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=m + n + k)
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    out, ref = poisoned((m, n)), poisoned((m, n))
    fp8_gemm.bind(wide, a, sa, b, sb, out)()
    check_against_reference(out, a, sa, b, sb, x, w)
    fp8_gemm.bind(narrow, a, sa, b, sb, ref)()
    assert bool((out.view(cupy.uint16) == ref.view(cupy.uint16)).all()), "not the bits of narrower bands"


# ----------------------------------------------------------------------------- TMA multicast
# The heuristic does not pick clusters of 2 at present: run those configurations explicitly.
@pytest.mark.parametrize("bm, bn", [(256, 128), (128, 96), (64, 64)])
def test_multicast_cluster_of_two_dense(bm, bn):
    from cugemm8.heuristics import make_config

    m, n, k = 1000, 8 * bn, 1040  # an even number of n-blocks; partial m- and k-blocks
    cfg = make_config("normal", n, k, 1, bm, bn, cluster=2)
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=bm + bn)
    out = poisoned((m, n))
    fp8_gemm.bind(cfg, a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out)()
    check_against_reference(out, a, sa, b, sb, x, w)


# ----------------------------------------------------------------------------- split K
@pytest.mark.parametrize("cfg", SPLIT_K_EXPLICIT, ids=lambda c: f"{c.block_m}x{c.block_n}n{c.n}k{c.k}s{c.split_k}")
@pytest.mark.parametrize("m", [1, 77, 300])
def test_split_k(cfg, m):
    """Every cluster size, uneven k-block shares, partial m-, n- and k-blocks, several tiles per cluster
    (M = 300): right, and bitwise the same from run to run (the shares are added in rank order)."""
    x, w, a, sa, b, sb = make_dense(m, cfg.n, cfg.k, seed=cfg.split_k * 1000 + m)
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    out = poisoned((m, cfg.n))
    run = fp8_gemm.bind(cfg, a, sa, b, sb, out)
    assert run.launcher.grid % cfg.split_k == 0
    run()
    check_against_reference(out, a, sa, b, sb, x, w)
    first = out.copy()
    for _ in range(3):
        run()
        assert bool((out.view(cupy.uint16) == first.view(cupy.uint16)).all()), "split results differ between runs"


def test_split_k_with_fewer_ctas_than_tiles():
    """A grid smaller than the tiles x split (each cluster walks several tiles): the exchange barriers' phases."""
    cfg = SPLIT_K_EXPLICIT[2]
    m = 64 * 5
    x, w, a, sa, b, sb = make_dense(m, cfg.n, cfg.k, seed=11)
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    out = poisoned((m, cfg.n))
    fp8_gemm.bind(cfg, a, sa, b, sb, out, grid=2 * cfg.split_k)()
    check_against_reference(out, a, sa, b, sb, x, w)


@pytest.mark.parametrize("m", [1, 2, 8, 32, 128])
@pytest.mark.parametrize("n,k", [(2112, 7168), (7168, 16384), (4096, 7168), (256, 4096), (512, 7168), (1536, 7168)])
def test_matmul_decode_shapes(m, n, k):
    """The heuristic's decode picks (split K where it pays): right, bitwise repeatable."""
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=m * 7 + n + k)
    out = cugemm8.matmul(a, sa, b, sb)
    check_against_reference(out, a, sa, b, sb, x, w)
    again = cugemm8.matmul(a, sa, b, sb)
    assert bool((again.view(cupy.uint16) == out.view(cupy.uint16)).all())


@pytest.mark.parametrize("bm, bn, split", [(64, 64, 1), (128, 32, 2), (64, 96, 4), (256, 128, 1)])
@pytest.mark.parametrize("m", [1, 3, 4, 5, 17, 63, 64, 65, 127, 129, 200, 300])
def test_a_box_of_fewer_rows_than_a_tile(bm, bn, split, m):
    """A tile with fewer rows than a tile (M below a tile, or the last m-block): A's TMA box holds only those rows
    (fp8_gemm.a_boxes, the tail maps), the stage's other rows are stale and never reach the output. Every written
    element right, nothing past M written, same bits twice."""
    n, k = 3 * bn + 8, 1040
    cfg = heuristics.make_config("normal", n, k, 1, bm, bn, split_k=split)
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=m + bm)
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    big = poisoned((m + 3, n))
    out = big[:m]
    run = fp8_gemm.bind(cfg, a, sa, b, sb, out)
    run()
    check_against_reference(out, a, sa, b, sb, x, w)
    assert bool((big[m:].view(cupy.uint16) == poisoned((3, n)).view(cupy.uint16)).all()), "rows past M written"
    first = out.copy()
    run()
    assert bool((out.view(cupy.uint16) == first.view(cupy.uint16)).all())


# ----------------------------------------------------------------------------- programmatic dependent launch
def test_pdl_orders_dependent_kernels():
    """With PDL on, a GEMM still sees what the kernel before it wrote (its scales, doubled in place) and
    its output is not overwritten by the GEMM before it (the same output, written twice)."""
    m, n, k = 64, 2112, 7168
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=5)
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    expected = cugemm8.matmul(a, sa * 2, b, sb)
    out = poisoned((m, n))
    cugemm8.set_pdl(True)
    try:
        for _ in range(20):
            sa2 = sa.copy()
            cugemm8.matmul(a, sa, b, sb, out=out)        # then the same output again, from doubled scales
            sa2 *= 2
            cugemm8.matmul(a, sa2, b, sb, out=out)
            cugemm8.matmul(a, sa2, b, sb, out=out)
            assert bool((out.view(cupy.uint16) == expected.view(cupy.uint16)).all())
    finally:
        cugemm8.set_pdl(False)

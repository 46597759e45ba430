"""GPU tier, the small-M kernel (decode-sized dense GEMMs): every configuration the probes try, against a float64
reference, bitwise the same from run to run (skipped without a Hopper GPU)."""
import cupy
import pytest

from hopper import requires_hopper
from problems import check_against_reference, make_dense, poisoned, quantize

import cugemm8
from cugemm8 import heuristics_small_m, small_m

pytestmark = [pytest.mark.gpu, requires_hopper]


def _run_config(cfg, m, seed, repeats=2):
    n, k = cfg.n, cfg.k
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    # Each 128-row block of B and each 128-column block of both operands at its own magnitude, so that a scale
    # taken from the wrong block shows.
    col = 4.0 ** (cupy.arange(k) // 128 % 3 - 1)
    w = rng.standard_normal((n, k), dtype=cupy.float32) * cupy.repeat(2.0 ** (cupy.arange(n // 128 + 1) % 5 - 2), 128)[:n, None]
    x, w = (x * col).astype(cupy.float32), (w * col[::-1]).astype(cupy.float32)
    a, sa, b, sb = quantize(x, w)
    out = poisoned((m, n))
    run = small_m.bind(cfg, a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out)
    run()
    check_against_reference(out, a, sa, b, sb, x, w)
    first = out.copy()
    for _ in range(repeats):
        run()
        assert bool((out.view(cupy.uint16) == first.view(cupy.uint16)).all()), "results differ between runs"


@pytest.mark.parametrize("m", [1, 5, 8, 13, 16, 27, 32])
@pytest.mark.parametrize("n,k", [(8, 16), (24, 144), (136, 1040), (264, 7168), (1040, 384)])
def test_every_config(m, n, k):
    for cfg in heuristics_small_m.configs_for(m, n, k):
        _run_config(cfg, m, seed=m * 7 + n + k)


@pytest.mark.parametrize("m", [1, 4, 16, 32])
@pytest.mark.parametrize("n,k", [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
                                 (7168, 2048), (256, 7168), (512, 4096), (1024, 7168)])
def test_picks_on_decode_shapes(m, n, k):
    """Through the API on the decode table's shapes: the small-M kernel where the heuristic picks it (narrow N),
    the WGMMA kernel elsewhere."""
    cfg = heuristics_small_m.choose_small_m(m, n, k, cugemm8.get_num_sms())
    assert (cfg is not None) == heuristics_small_m.in_bounds(m, n, k)
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=m + n + k)
    out = cugemm8.matmul(a, sa, b, sb)
    check_against_reference(out, a, sa, b, sb, x, w)
    again = cugemm8.matmul(a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb)
    assert bool((again.view(cupy.uint16) == out.view(cupy.uint16)).all())


def test_strided_operands_and_output():
    m, n, k = 19, 200, 1200
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=3)
    a_wide = cupy.zeros((m, k + 32), dtype=cupy.uint8)
    a_wide[:, :k] = a
    b_wide = cupy.zeros((n, k + 64), dtype=cupy.uint8)
    b_wide[:, :k] = b
    out_wide = poisoned((m, n + 24))
    out = cugemm8.matmul(a_wide[:, :k], sa, b_wide[:, :k], sb, out=out_wide[:, :n])
    check_against_reference(out, a, sa, b, sb, x, w)
    assert bool((out_wide[:, n:].view(cupy.uint16) == 0xFFFF).all()), "wrote past the output's columns"


def test_pdl_chain():
    """Two dependent calls launched with programmatic dependent launch: the second reads the first's output."""
    m, n, k = 8, 512, 512
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=11)
    cugemm8.set_pdl(True)
    try:
        for _ in range(3):
            y = cugemm8.matmul(a, sa, b, sb)
            y2, sy2 = cugemm8.per_token_cast_to_fp8(y)
            z = cugemm8.matmul(y2, sy2, b, sb)   # n == k: y feeds the next GEMM
    finally:
        cugemm8.set_pdl(False)
    check_against_reference(y, a, sa, b, sb, x, w)
    check_against_reference(z, y2, sy2, b, sb, y.astype(cupy.float32), w)

"""GPU tier: the GEMM kernels against a float64 reference (skipped without a Hopper GPU)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu import requires_hopper

pytestmark = [pytest.mark.gpu, requires_hopper]

cupy = pytest.importorskip("cupy")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cugemm8  # noqa: E402
from cugemm8 import fp8_gemm  # noqa: E402
from cugemm8.reference import REL_TOLERANCE  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
GPU_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def _lut():
    return cupy.asarray(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64))


def dequant_a(q, s, k):
    """[..., M, K] e4m3 bits with one scale per 1x128 tile -> float64."""
    return _lut()[q] * cupy.repeat(s.astype(cupy.float64), 128, axis=-1)[..., :k]


def dequant_b(q, s, n, k):
    s = cupy.repeat(cupy.repeat(s.astype(cupy.float64), 128, axis=-2), 128, axis=-1)
    return _lut()[q] * s[..., :n, :k]


def normalized_error(out, ref):
    """max |out - ref| / (|ref| + 0.01 rms(ref)): see cugemm8.reference for the bound."""
    out = out.astype(cupy.float64)
    rms = float(cupy.sqrt(cupy.mean(ref * ref)))
    return float(cupy.max(cupy.abs(out - ref) / (cupy.abs(ref) + 0.01 * rms + 1e-30)))


def calc_diff(x, y):
    x, y = x.astype(cupy.float64), y.astype(cupy.float64)
    denom = float(cupy.sum(x * x + y * y))
    return 1.0 - 2.0 * float(cupy.sum(x * y)) / denom if denom else 0.0


def poisoned(shape):
    return cupy.full(shape, 0xFFFF, dtype=cupy.uint16).view(BF16)  # NaN everywhere


def make_dense(m, n, k, seed):
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    w = rng.standard_normal((n, k), dtype=cupy.float32)
    a, sa = cugemm8.per_token_cast_to_fp8(x)
    b, sb = cugemm8.per_block_cast_to_fp8(w)
    return x, w, a, sa, b, sb


def check_against_reference(out, a, sa, b, sb, x, w):
    m, k = a.shape[-2:]
    n = b.shape[-2]
    assert not bool(cupy.isnan(out.astype(cupy.float32)).any()), "some outputs were not written"
    ref = dequant_a(a, sa, k) @ dequant_b(b, sb, n, k).swapaxes(-1, -2)
    err = normalized_error(out, ref)
    assert err <= REL_TOLERANCE, f"normalized error {err:.4f} > {REL_TOLERANCE} (M={m}, N={n}, K={k})"
    if k >= 128 and out.size >= 1024:
        # Against the unquantized product, calc_diff measures the e4m3 quantization itself (not the
        # kernel): below one 128-wide block of K, or over a handful of outputs, it is too noisy for
        # the 1e-3 bound (seen: 1.02e-3 at M=1, N=8, K=16).
        diff = calc_diff(out, x.astype(cupy.float64) @ w.astype(cupy.float64).swapaxes(-1, -2))
        assert diff < 1e-3, f"calc_diff {diff:.2e} against the unquantized product"


dims_n = st.one_of(st.sampled_from([8, 16, 24, 112, 128, 136, 2112, 4096, 7168]),
                   st.integers(1, 512).map(lambda v: 8 * v))
dims_k = st.one_of(st.sampled_from([16, 112, 128, 144, 512, 1536, 7168]), st.integers(1, 256).map(lambda v: 16 * v))
dims_m = st.one_of(st.integers(1, 300), st.integers(300, 3000), st.sampled_from([64, 128, 256, 4096]))


@GPU_SETTINGS
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


def test_matmul_stream_and_strided_operands():
    m, n, k = 333, 264, 400
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=7)
    a_wide = cupy.zeros((m, k + 48), dtype=cupy.uint8)
    a_wide[:, :k] = a
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


# ----------------------------------------------------------------------------- grouped layouts
def make_contiguous(rows_per_group, n, k, seed):
    align = cugemm8.get_m_alignment_for_contiguous_layout()
    padded = [-(-r // align) * align for r in rows_per_group]
    total = sum(padded)
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((total, k), dtype=cupy.float32)
    w = rng.standard_normal((len(rows_per_group), n, k), dtype=cupy.float32)
    idx = np.full(total, -1, dtype=np.int32)
    start = 0
    for g, (r, p) in enumerate(zip(rows_per_group, padded)):
        idx[start:start + r] = g
        start += p
    a, sa = cugemm8.per_token_cast_to_fp8(x)
    b, sb = cugemm8.per_block_cast_to_fp8(w)
    return x, w, a, sa, b, sb, cupy.asarray(idx)


@GPU_SETTINGS
@given(groups=st.integers(1, 12), data=st.data(), n=st.sampled_from([64, 136, 512, 2048]),
       k=st.sampled_from([128, 400, 1024, 2048]), seed=st.integers(0, 2**31 - 1))
def test_contiguous_property(groups, data, n, k, seed):
    rows = data.draw(st.lists(st.integers(0, 700), min_size=groups, max_size=groups))
    if sum(rows) == 0:
        rows[0] = 1
    x, w, a, sa, b, sb, idx = make_contiguous(rows, n, k, seed)
    out = poisoned((a.shape[0], n))
    cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, idx, out=out)
    idx_h = cupy.asnumpy(idx)
    assert bool((out[cupy.asarray(idx_h < 0)].view(cupy.uint16) == 0).all()), "padding rows must be zero"
    for g in range(groups):
        sel = np.nonzero(idx_h == g)[0]
        if len(sel) == 0:
            continue
        rs = slice(int(sel[0]), int(sel[-1]) + 1)
        check_against_reference(out[rs], a[rs], sa[rs], b[g], sb[g], x[rs], w[g])


def make_masked(groups, max_m, n, k, seed):
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((groups, max_m, k), dtype=cupy.float32)
    w = rng.standard_normal((groups, n, k), dtype=cupy.float32)
    a, sa = cugemm8.per_token_cast_to_fp8(x)
    b, sb = cugemm8.per_block_cast_to_fp8(w)
    return x, w, a, sa, b, sb


@GPU_SETTINGS
@given(groups=st.integers(1, 40), max_m=st.sampled_from([1, 40, 64, 100, 128, 256, 384, 1000]),
       n=st.sampled_from([24, 128, 1024, 4096]), k=st.sampled_from([128, 512, 7168]), data=st.data(),
       seed=st.integers(0, 2**31 - 1), expected=st.integers(1, 1024))
def test_masked_property(groups, max_m, n, k, data, seed, expected):
    masked = data.draw(st.lists(st.integers(0, max_m), min_size=groups, max_size=groups))
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed)
    out = poisoned((groups, max_m, n))
    mm = cupy.asarray(np.array(masked, dtype=np.int32))
    cugemm8.m_grouped_matmul_masked(a, sa, b, sb, mm, expected, out=out)
    for g, r in enumerate(masked):
        rest = out[g, r:].view(cupy.uint16)
        assert bool((rest == 0xFFFF).all()), f"group {g}: rows at or past masked_m={r} were written"
        if r:
            check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])


def test_masked_cuda_graph_replay_reads_masked_m_on_device():
    groups, max_m, n, k = 4, 256, 512, 1024
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=3)
    sa_aligned = cugemm8.get_col_major_tma_aligned_tensor(sa)
    mm = cupy.asarray(np.array([10, 0, 200, 64], dtype=np.int32))
    out = cupy.zeros((groups, max_m, n), dtype=BF16)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        cugemm8.m_grouped_matmul_masked(a, sa_aligned, b, sb, mm, 128, out=out)  # compile + load first
        stream.begin_capture()
        cugemm8.m_grouped_matmul_masked(a, sa_aligned, b, sb, mm, 128, out=out)
        graph = stream.end_capture()
    for masked in ([10, 0, 200, 64], [256, 5, 0, 129]):
        mm[...] = cupy.asarray(np.array(masked, dtype=np.int32))
        out.fill(0)
        graph.launch(stream)
        stream.synchronize()
        for g, r in enumerate(masked):
            if r:
                check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])
            assert bool((out[g, r:].view(cupy.uint16) == 0).all())


# ----------------------------------------------------------------------------- masked: split last wave
# A last wave that would leave at least half of the CTAs idle is split in k over the two CTAs of a
# cluster (each pushes the partial sums of the peer's column half into the peer's shared memory and
# stores its own half). Run it
# on small grids, with tile counts that give every case: all tiles split, full waves then a split
# tail, a tail too large to split, and no tail. Odd k-block counts split unevenly.
def _split_case(total, grid):
    tail = total % grid
    if tail == 0:
        return "no tail"
    if 2 * tail > grid:
        return "tail too large"
    return "all split" if total < grid else "split tail"


@pytest.mark.parametrize("bm, bn, k", [(128, 128, 1024), (256, 128, 384), (64, 64, 256), (128, 144, 640)])
def test_masked_split_last_wave(bm, bn, k):
    from cugemm8.heuristics import can_split_tail, make_config

    groups, grid, n = 3, 8, bn
    assert can_split_tail(bn, k)
    cfg = make_config("masked", n, k, groups, bm, bn, tail_split=True)
    max_m = 8 * bm
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=bm + bn + k)
    sa_aligned = cugemm8.get_col_major_tma_aligned_tensor(sa)
    draws = [[2 * bm - 3, 0, 1], [5 * bm - 3, 0, 5 * bm], [7 * bm - 3, 0, 7 * bm], [8 * bm, 0, 8 * bm - 1],
             [bm, 1, 0]]
    cases = set()
    for masked in draws:
        total = sum(-(-r // bm) for r in masked)  # tiles: one n-block
        cases.add(_split_case(total, grid))
        out = poisoned((groups, max_m, n))
        mm = cupy.asarray(np.array(masked, dtype=np.int32))
        run = fp8_gemm.bind(cfg, a, sa_aligned, b, sb, out, layout=mm, grid=grid)
        run()
        again = poisoned((groups, max_m, n))
        run(out=again)
        assert bool((again.view(cupy.uint16) == out.view(cupy.uint16)).all()), "same inputs, other bits"
        for g, r in enumerate(masked):
            assert bool((out[g, r:].view(cupy.uint16) == 0xFFFF).all()), (masked, g)
            if r:
                check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])
    assert cases == {"all split", "split tail", "tail too large", "no tail"}


def test_masked_light_last_blocks_go_last():
    # A last m-block of at most 64 valid rows is about half a tile's work. When the last wave is no larger
    # than one m-block's tiles and the last group holding tiles ends in such a block, the kernel runs
    # that block's tiles last (split, when the last wave is small enough). Every tile must still be
    # computed once, reordered or not.
    from cugemm8.heuristics import make_config

    groups, grid, bm, bn, k = 3, 8, 128, 128, 1024
    n_blocks = 5
    n = n_blocks * bn
    cfg = make_config("masked", n, k, groups, bm, bn, tail_split=True)
    max_m = 3 * bm
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=77)
    sa_aligned = cugemm8.get_col_major_tma_aligned_tensor(sa)
    draws = [[300, 0, 20], [192, 0, 0], [64, 0, 0], [384, 384, 260], [0, 0, 276], [129, 65, 0], [1, 1, 1]]
    cases = set()
    for masked in draws:
        total = sum(-(-r // bm) for r in masked) * n_blocks
        last_rows = [r for r in masked if r][-1]
        reordered = 0 < last_rows % bm <= 64 and 0 < total % grid <= n_blocks
        cases.add((reordered, _split_case(total, grid)))
        out = poisoned((groups, max_m, n))
        fp8_gemm.bind(cfg, a, sa_aligned, b, sb, out, layout=cupy.asarray(np.array(masked, dtype=np.int32)),
                     grid=grid)()
        for g, r in enumerate(masked):
            assert bool((out[g, r:].view(cupy.uint16) == 0xFFFF).all()), (masked, g)
            if r:
                check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])
    assert {(True, "split tail"), (True, "tail too large"), (False, "tail too large")} <= cases, cases


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


def test_multicast_cluster_of_two_masked():
    from cugemm8.heuristics import make_config

    groups, max_m, n, k = 3, 300, 512, 1024
    cfg = make_config("masked", n, k, groups, 256, 128, cluster=2)
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=11)
    masked = [300, 17, 0]
    out = poisoned((groups, max_m, n))
    mm = cupy.asarray(np.array(masked, dtype=np.int32))
    fp8_gemm.bind(cfg, a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out, layout=mm)()
    for g, r in enumerate(masked):
        assert bool((out[g, r:].view(cupy.uint16) == 0xFFFF).all())
        if r:
            check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])


# ------------------------------------------------------------------ contiguous tiles over 64-row segments
# Expert segments start at multiples of 64, so a tile of 128 or 256 rows may hold several experts:
# the kernel runs one pass per run of 64-row slabs with the same expert. Run every tile height
# explicitly (the heuristic keeps 256-row tiles for large experts) over segments that split tiles into
# two, three and four passes, with empty experts, padding slabs and ids past the last expert.
def _check_contiguous_segments(bm, bn, n, k, grid=None, more=()):
    from cugemm8.heuristics import make_config

    groups = 5
    cfg = make_config("contiguous", n, k, groups, bm, bn)
    # (expert, rows) in order; every segment padded to 64 with -1. Expert 9 is past the last (padding).
    segments = [(0, 50), (1, 64), (2, 1), (3, 64), (9, 64), (4, 200), (1, 0), (0, 130), (3, 7), (2, 64), *more]
    idx = []
    for g, r in segments:
        idx += [g] * r + [-1] * (-(-r // 64) * 64 - r)
    idx = np.array(idx, dtype=np.int32)
    idx[idx.size - 64 + 5] = 7  # a row inside a valid slab with an id past the last expert: zeros
    m = idx.size
    rng = cupy.random.default_rng(bm + n + k)
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    w = rng.standard_normal((groups, n, k), dtype=cupy.float32)
    a, sa = cugemm8.per_token_cast_to_fp8(x)
    b, sb = cugemm8.per_block_cast_to_fp8(w)
    out = poisoned((m, n))
    fp8_gemm.bind(cfg, a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out, layout=cupy.asarray(idx),
                 grid=grid)()
    expert_rows = (idx >= 0) & (idx < groups)
    assert bool((out[cupy.asarray(~expert_rows)].view(cupy.uint16) == 0).all()), "non-expert rows must be zero"
    for g in range(groups):
        rows = cupy.asarray(np.nonzero(idx == g)[0])
        check_against_reference(out[rows], a[rows], sa[rows], b[g], sb[g], x[rows], w[g])


@pytest.mark.parametrize("bm, bn, n", [(256, 128, 256), (128, 128, 256), (64, 64, 256), (128, 160, 320)])
def test_contiguous_tiles_spanning_experts(bm, bn, n):
    _check_contiguous_segments(bm, bn, n, 384)


# 256x128 contiguous tiles walk the stage ring in rounds from wherever the previous tile left it (rolled
# k-blocks up to stage 0, rounds, rolled k-blocks). With k-blocks not a multiple of the 3 stages and two
# CTAs for 18 tiles, tiles start at every stage: tiles of several experts, and whole tiles (the extra
# segments at the end).
@pytest.mark.parametrize("k", [640, 2048])
def test_contiguous_ring_rounds_from_every_stage(k):
    _check_contiguous_segments(256, 128, 256, k, grid=2, more=[(1, 1024), (4, 256)])

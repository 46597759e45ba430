"""GPU tier, the weight gradient (wgrad_matmul, k_grouped_wgrad_matmul): the kernel against a float64 reference,
accumulation exactly once, c and out the same or different arrays, bitwise repeats, empty groups, CUDA graphs, D
loaded and stored (load_d) against the reduce-add."""
import cupy
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper import requires_hopper
from problems import PROPERTY_SETTINGS, calc_diff, dequant_a, finish, normalized_error

import cugemm8
from cugemm8 import fp8_gemm, heuristics_wgrad
from cugemm8.reference import REL_TOLERANCE
from kernel_configs import LOAD_D_TILES, TRANSPOSED_TILES

pytestmark = [pytest.mark.gpu, requires_hopper]


def make_wgrad(m, n, k, seed, row_major=False):
    """(x, w, a, a_scale, b, b_scale): float32 inputs [M, K] and [N, K], both quantized 1x128 along K."""
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    w = rng.standard_normal((n, k), dtype=cupy.float32)
    a, sa = cugemm8.per_token_cast_to_fp8(x)
    b, sb = cugemm8.per_token_cast_to_fp8(w)
    if not row_major:
        sa, sb = cugemm8.get_col_major_tma_aligned_tensor(sa), cugemm8.get_col_major_tma_aligned_tensor(sb)
    return x, w, a, sa, b, sb


def product(a, sa, b, sb):
    k = a.shape[-1]
    return dequant_a(a, sa, k) @ dequant_a(b, sb, k).T


def check_product(p, a, sa, b, sb, x=None, w=None):
    """`p` (what one call added) is within REL_TOLERANCE of the float64 product of the dequantized operands."""
    assert not bool(cupy.isnan(p).any()), "NaN in the result"
    ref = product(a, sa, b, sb)
    err = normalized_error(p, ref)
    assert err <= REL_TOLERANCE, f"normalized error {err:.4f} > {REL_TOLERANCE} (shape {p.shape}, K={a.shape[1]})"
    if x is not None and a.shape[1] >= 128 and p.size >= 1024:
        diff = calc_diff(p, x.astype(cupy.float64) @ w.astype(cupy.float64).T)
        assert diff < 1e-3, f"calc_diff {diff:.2e} against the unquantized product"


def same_bits(x, y) -> bool:
    return bool((x.view(cupy.uint32) == y.view(cupy.uint32)).all())


dims_m = st.one_of(st.integers(1, 300), st.sampled_from([64, 128, 512, 1536, 2048]))
dims_n = st.one_of(st.integers(1, 300).map(lambda v: 8 * v), st.sampled_from([8, 16, 136, 2112]))
dims_k = st.one_of(st.integers(1, 96).map(lambda v: 16 * v), st.sampled_from([16, 128, 4096]))


@PROPERTY_SETTINGS
@given(m=dims_m, n=dims_n, k=dims_k, seed=st.integers(0, 2**31 - 1), row_major=st.booleans())
def test_wgrad_property(m, n, k, seed, row_major):
    x, w, a, sa, b, sb = make_wgrad(m, n, k, seed, row_major)
    out = cupy.zeros((m, n), cupy.float32)
    assert cugemm8.wgrad_matmul(a, sa, b, sb, out) is out
    check_product(out, a, sa, b, sb, x, w)
    again = cugemm8.wgrad_matmul(a, sa, b, sb, cupy.zeros((m, n), cupy.float32))
    assert same_bits(again, out), "results differ between runs"


@pytest.mark.parametrize("m,n", [(7168, 2112), (1536, 24576), (512, 32768), (2048, 7168), (7168, 4096)])
def test_wgrad_benchmark_shapes(m, n):   # 7168x4096: the heuristic computes D^T
    x, w, a, sa, b, sb = make_wgrad(m, n, 1024, seed=m + n)
    out = cugemm8.wgrad_matmul(a, sa, b, sb, cupy.zeros((m, n), cupy.float32))
    check_product(out, a, sa, b, sb)


def operands_and_product(m, n, k, seed):
    """(a, a_scale, b, b_scale, P): quantized operands and what one call adds (P, computed into zeros)."""
    _, _, a, sa, b, sb = make_wgrad(m, n, k, seed)
    return a, sa, b, sb, cugemm8.wgrad_matmul(a, sa, b, sb, cupy.zeros((m, n), cupy.float32))


def test_wgrad_accumulates_exactly_once():
    m, n, k = 520, 1000, 1040
    a, sa, b, sb, p = operands_and_product(m, n, k, seed=5)
    out0 = cupy.random.default_rng(6).standard_normal((m, n), dtype=cupy.float32)
    out = out0.copy()
    cugemm8.wgrad_matmul(a, sa, b, sb, out)
    assert same_bits(out, out0 + p), "one call must add the product once, in FP32"
    cugemm8.wgrad_matmul(a, sa, b, sb, out, c=out)   # c is out: the same as c=None
    assert same_bits(out, (out0 + p) + p)


def test_wgrad_c_separate_and_overlap():
    m, n, k = 300, 264, 640
    a, sa, b, sb, p = operands_and_product(m, n, k, seed=8)
    c = cupy.random.default_rng(9).standard_normal((m, n), dtype=cupy.float32)
    c_before = c.copy()
    out = cupy.full((m, n), np.nan, cupy.float32)
    cugemm8.wgrad_matmul(a, sa, b, sb, out, c=c)
    assert same_bits(out, c_before + p) and same_bits(c, c_before), "out = c + A·Bᵀ, c untouched"
    big = cupy.zeros((m + 1, n), cupy.float32)
    with pytest.raises(ValueError, match="c must be out itself or not overlap it"):
        cugemm8.wgrad_matmul(a, sa, b, sb, big[:m], c=big[1:])


def test_wgrad_strided_out_and_stream():
    m, n, k = 200, 136, 1008
    _, _, a, sa, b, sb = make_wgrad(m, n, k, seed=10)
    wide = cupy.zeros((m, n + 24), cupy.float32)
    cupy.cuda.Device().synchronize()   # the inputs come from the legacy stream, which `stream` does not wait for
    stream = cupy.cuda.Stream(non_blocking=True)
    cugemm8.wgrad_matmul(a, sa, b, sb, wide[:, :n], stream=stream)
    stream.synchronize()
    check_product(wide[:, :n], a, sa, b, sb)
    assert not bool(wide[:, n:].any()), "columns past N were written"


def test_wgrad_empty_sizes():
    a, sa = cupy.zeros((64, 0), cupy.uint8), cupy.zeros((64, 0), cupy.float32)
    b, sb = cupy.zeros((32, 0), cupy.uint8), cupy.zeros((32, 0), cupy.float32)
    out = cupy.ones((64, 32), cupy.float32)
    cugemm8.wgrad_matmul(a, sa, b, sb, out)          # K = 0: out stays
    assert bool((out == 1).all())
    c = cupy.full((64, 32), 2, cupy.float32)
    cugemm8.wgrad_matmul(a, sa, b, sb, out, c=c)     # K = 0 with c: out = c
    assert bool((out == 2).all())
    empty = cupy.zeros((0, 32), cupy.float32)
    cugemm8.wgrad_matmul(cupy.zeros((0, 256), cupy.uint8), cupy.zeros((0, 2), cupy.float32),
                         cupy.zeros((32, 256), cupy.uint8), cupy.ones((32, 2), cupy.float32), empty)


@pytest.mark.parametrize("bm,bn,d_atoms", [(64, 16, 0), (64, 160, 0), (128, 48, 0), (128, 144, 0), (128, 160, 5),
                                           (128, 160, 4), (128, 160, 2), (128, 144, 3), (64, 160, 3), (128, 152, 0),
                                           (128, 152, 9)])
def test_wgrad_every_tile_height(bm, bn, d_atoms):
    """Explicit configurations: both tile heights, each output swizzle (32-, 64- and 128-byte atoms), the FP32
    tile held in shared memory whole or in part (2 to 9 of its atoms), partial tiles."""
    m, n, k = 333, 3 * bn + 8, 1040
    cfg = heuristics_wgrad.make_config("normal", n, 1, bm, bn, d_atoms=d_atoms)
    _, _, a, sa, b, sb = make_wgrad(m, n, k, seed=bm + bn)
    out = cupy.zeros((m, n), cupy.float32)
    fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out)()
    check_product(out, a, sa, b, sb)


@pytest.mark.parametrize("bm,bn,d_atoms", TRANSPOSED_TILES)
def test_wgrad_transposed(bm, bn, d_atoms):
    """D computed as D^T = B·Aᵀ, each tile stored transposed, whole or in two rounds of atoms: partial tiles both ways
    (D's last rows past a tile's columns; its last columns past a tile's rows, the kernel's A loaded through its tail
    map), K not a multiple of 128, a strided out whose columns past N stay zero, bits repeated."""
    m, n, k = 2 * bn + 24, 328, 1040
    cfg = heuristics_wgrad.make_config("normal", m, 1, bm, bn, d_atoms=d_atoms, transpose_d=True)
    _, _, a, sa, b, sb = make_wgrad(m, n, k, seed=bm + bn + d_atoms)
    wide = cupy.zeros((m, n + 24), cupy.float32)
    fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, wide[:, :n])()
    check_product(wide[:, :n], a, sa, b, sb)
    assert not bool(wide[:, n:].any()), "columns past N were written"
    again = cupy.zeros((m, n), cupy.float32)
    fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, again)()
    assert same_bits(again, wide[:, :n]), "results differ between runs"


@pytest.mark.parametrize("bm,bn,transpose_d", LOAD_D_TILES)
def test_wgrad_load_d_matches_the_reduce_add(bm, bn, transpose_d):
    """D loaded into shared memory, added to there and stored (load_d) gives the bits the TMA reduce-add gives, on
    partial tiles both ways, K not a multiple of 128, several tiles a CTA (a small grid: the store warp's and the
    producer's barriers cycle), a strided out whose columns past N stay untouched, repeated."""
    m, n, k = 2 * bm + 40, 3 * bn + 8, 1040
    rows, cols = (n, m) if transpose_d else (m, n)
    added = heuristics_wgrad.make_config("normal", cols, 1, bm, bn, transpose_d=transpose_d)
    loaded = heuristics_wgrad.make_config("normal", cols, 1, bm, bn, transpose_d=transpose_d, load_d=True)
    assert loaded.load_d and loaded.d_atoms == 0 and not added.load_d
    _, _, a, sa, b, sb = make_wgrad(m, n, k, seed=bm + bn)
    out0 = cupy.random.default_rng(bn).standard_normal((m, n + 8), dtype=cupy.float32)
    want = out0.copy()
    fp8_gemm.bind_wgrad(added, a, sa, b, sb, want[:, :n], grid=3)()
    got = out0.copy()
    fp8_gemm.bind_wgrad(loaded, a, sa, b, sb, got[:, :n], grid=3)()
    check_product(got[:, :n] - out0[:, :n].astype(cupy.float64), a, sa, b, sb)
    assert same_bits(got, want), "load_d and the reduce-add differ"
    again = out0.copy()
    fp8_gemm.bind_wgrad(loaded, a, sa, b, sb, again[:, :n])()
    assert same_bits(again, got), "results differ between runs (or with the grid)"


def test_wgrad_load_d_picked_where_measured():
    """The heuristic's load_d picks (2 to 4 m-blocks in 128-row tiles computing D) run through the public call, with
    c separate from out and c as out."""
    m, n, k = 256, 16392, 2000
    assert heuristics_wgrad.choose("normal", m, n, 1, cugemm8.runtime.get_num_sms()).config.load_d
    _, _, a, sa, b, sb = make_wgrad(m, n, k, seed=5)
    c = cupy.random.default_rng(6).standard_normal((m, n), dtype=cupy.float32)
    out = cupy.empty_like(c)
    cugemm8.wgrad_matmul(a, sa, b, sb, out, c=c)
    check_product(out - c.astype(cupy.float64), a, sa, b, sb)
    inplace = c.copy()
    cugemm8.wgrad_matmul(a, sa, b, sb, inplace, c=inplace)
    assert same_bits(inplace, out)


def test_k_grouped_load_d_matches_the_reduce_add():
    """The k-grouped form with load_d: empty groups' D untouched (no tile of theirs is loaded or stored), the bits
    of the reduce-add elsewhere."""
    sizes = [256, 0, 384, 128, 0, 1152]
    m, n = 300, 440
    a, sa, b, sb, k_sizes = make_k_grouped(m, n, sizes, seed=21)
    out0 = cupy.random.default_rng(22).standard_normal((len(sizes), m, n), dtype=cupy.float32)
    outs = []
    for load_d in (False, True):
        cfg = heuristics_wgrad.make_config("k_grouped", n, len(sizes), 128, 144, load_d=load_d)
        out = out0.copy()
        fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out, k_sizes=k_sizes, grid=5)()
        outs.append(out)
    check_k_grouped(outs[1], out0, a, sa, b, sb, sizes)
    assert same_bits(outs[1], outs[0]), "load_d and the reduce-add differ"


# ----------------------------------------------------------------------------- k-grouped
def make_k_grouped(m, n, sizes, seed):
    """Operands of a k-grouped problem: the groups' columns one after another, quantized over the whole width."""
    x, w, a, sa, b, sb = make_wgrad(m, n, max(sum(sizes), 128), seed)
    return a, sa, b, sb, cupy.asarray(np.array(sizes, dtype=np.int32))


def check_k_grouped(out, out0, a, sa, b, sb, sizes):
    begin = 0
    for g, size in enumerate(sizes):
        if size == 0:
            assert same_bits(out[g], out0[g]), f"group {g} has K = 0: its out must stay untouched"
        else:
            sl = slice(begin, begin + size)
            ref = product(a[:, sl], sa[:, begin // 128:(begin + size) // 128], b[:, sl],
                          sb[:, begin // 128:(begin + size) // 128])
            err = normalized_error(out[g] - out0[g].astype(cupy.float64), ref)
            assert err <= REL_TOLERANCE, f"group {g}: normalized error {err:.4f}"
        begin += size


group_sizes = st.lists(st.integers(0, 12).map(lambda v: 128 * v), min_size=1, max_size=9)


@PROPERTY_SETTINGS
@given(m=st.one_of(st.integers(1, 400), st.sampled_from([128, 2048])), n=st.integers(1, 80).map(lambda v: 8 * v),
       sizes=group_sizes, seed=st.integers(0, 2**31 - 1))
def test_k_grouped_property(m, n, sizes, seed):
    a, sa, b, sb, k_sizes = make_k_grouped(m, n, sizes, seed)
    out0 = cupy.random.default_rng(seed).standard_normal((len(sizes), m, n), dtype=cupy.float32)
    out = out0.copy()
    assert cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, out) is out
    check_k_grouped(out, out0, a, sa, b, sb, sizes)
    again = out0.copy()
    cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, again)
    assert same_bits(again, out), "results differ between runs"


def test_k_grouped_benchmark_like():
    sizes = [4096 - 128, 4096 + 128, 0, 4096]
    m, n = 2048, 1024
    a, sa, b, sb, k_sizes = make_k_grouped(m, n, sizes, seed=11)
    out0 = cupy.zeros((len(sizes), m, n), cupy.float32)
    out = cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, out0.copy())
    check_k_grouped(out, out0, a, sa, b, sb, sizes)


def test_k_grouped_transposed():
    """The k-grouped form computing each group's D^T (explicit configuration): empty groups stay untouched."""
    sizes = [0, 256, 128, 0, 384]
    m, n = 200, 136
    cfg = heuristics_wgrad.make_config("k_grouped", m, len(sizes), 128, 160, transpose_d=True)
    a, sa, b, sb, k_sizes = make_k_grouped(m, n, sizes, seed=17)
    out0 = cupy.random.default_rng(18).standard_normal((len(sizes), m, n), dtype=cupy.float32)
    out = out0.copy()
    fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out, k_sizes=k_sizes)()
    check_k_grouped(out, out0, a, sa, b, sb, sizes)


def test_k_grouped_all_empty_and_c():
    m, n = 100, 64
    a, sa, b, sb, k_sizes = make_k_grouped(m, n, [0, 0, 0], seed=12)
    out = cupy.full((3, m, n), 3, cupy.float32)
    cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, out)
    finish()
    assert bool((out == 3).all()), "no group has k-blocks: out stays"
    c = cupy.full((3, m, n), 5, cupy.float32)
    cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, out, c=c)
    assert bool((out == 5).all())


def test_k_grouped_sizes_past_the_columns_are_clamped():
    """Sizes summing past A's columns read nothing beyond them (compute-sanitizer runs this too)."""
    m, n = 128, 128
    a, sa, b, sb, _ = make_k_grouped(m, n, [256], seed=13)
    k_sizes = cupy.asarray(np.array([128, 1 << 20, 1 << 30], dtype=np.int32))
    out = cupy.zeros((3, m, n), cupy.float32)
    cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, out)
    finish()
    check_k_grouped(out[:2], cupy.zeros((2, m, n), cupy.float32), a, sa, b, sb, [128, 128])
    assert not bool(out[2].any()), "a group past A's columns has no k-blocks: its out stays"


def test_k_grouped_cuda_graph_reads_sizes_on_the_gpu():
    """Captured once, replayed with other sizes written into k_sizes: each replay computes the new split."""
    m, n = 256, 256
    a, sa, b, sb, k_sizes = make_k_grouped(m, n, [512, 512], seed=14)
    out = cupy.zeros((2, m, n), cupy.float32)
    cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, out)   # compile and prepare outside the capture
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, out, stream=stream)
        graph = stream.end_capture()
    for sizes in ([256, 768], [1024, 0]):
        k_sizes.set(np.array(sizes, dtype=np.int32))
        out[...] = 0
        cupy.cuda.Device().synchronize()
        graph.launch(stream)
        stream.synchronize()
        check_k_grouped(out, cupy.zeros_like(out), a, sa, b, sb, sizes)


def test_wgrad_capture_refuses_a_conversion_and_takes_a_separate_c():
    """During a CUDA-graph capture a row-major scale (a new array each call) raises CaptureError before launch;
    with M-major scales a separate c is copied into out on the stream, and the replay computes c + A·Bᵀ."""
    m, n, k = 256, 256, 512
    a, sa, b, sb, p = operands_and_product(m, n, k, seed=15)
    _, _, _, sa_rows, _, _ = make_wgrad(m, n, k, seed=15, row_major=True)
    c = cupy.random.default_rng(16).standard_normal((m, n), dtype=cupy.float32)
    out = cupy.zeros((m, n), cupy.float32)
    cugemm8.wgrad_matmul(a, sa_rows, b, sb, out)          # warm-up: compile, prepare both signatures
    cugemm8.wgrad_matmul(a, sa, b, sb, out, c=c)
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            with pytest.raises(cugemm8.CaptureError):
                cugemm8.wgrad_matmul(a, sa_rows, b, sb, out, stream=stream)
            cugemm8.wgrad_matmul(a, sa, b, sb, out, c=c, stream=stream)
        finally:
            graph = stream.end_capture()
    out[...] = float("nan")
    cupy.cuda.Device().synchronize()
    graph.launch(stream)
    stream.synchronize()
    assert same_bits(out, c + p)

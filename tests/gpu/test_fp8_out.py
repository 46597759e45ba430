"""GPU tier, e4m3 output (out_dtype="float8_e4m3"): payload and scales against the library's quantizer
applied to the float64 product, in all three layouts; chains; repeats (skipped without a Hopper GPU)."""
import cupy
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper import requires_hopper
from problems import PROPERTY_SETTINGS, calc_diff, dequant_a, dequant_b, make_contiguous, make_dense, make_masked

import cugemm8
from cugemm8 import fp8_gemm, heuristics
from cugemm8.quantize import (AMAX_FLOOR, FP8_MAX, fp8_e4m3_to_float, per_token_cast_to_fp8_numpy, pow2_ceil,
                               quantize_scale)
from cugemm8.reference import BF16_UNIT, REL_TOLERANCE, RMS_FLOOR

pytestmark = [pytest.mark.gpu, requires_hopper]

FORMATS = ["float32", "ue8m0"]
FLOOR_SCALE = {f: float(quantize_scale(np.float32([AMAX_FLOOR]), f)[0][0]) for f in FORMATS}


def reference_product(a, sa, b, sb):
    k, n = a.shape[-1], b.shape[-2]
    return cupy.asnumpy(dequant_a(a, sa, k) @ dequant_b(b, sb, n, k).swapaxes(-1, -2))


def check_fp8(q, s, ref, scale_format, rows=None):
    """q (e4m3 bits) and s (scales [..., M, ceil(N/128)]) against the float64 product `ref`, rows [:rows].

    The kernel quantizes its FP32 sums, which differ from `ref` by the tensor cores' accumulation (at most
    `acc` per element: the bf16 tests' bound near zero, cugemm8.reference, plus 2^-10 relative). So:
    - scales: amax / 448 of some values within `acc` of ref's (UE8M0: that rounded up to a power of two);
    - payload: within half an e4m3 step (relative 2^-4; 2^-10 scales in the subnormal range) of a value
      within `acc` of ref;
    - codes: where the scale is ref's quantizer's (all float32 scales are close to it), at most one step
      from the quantizer's code on ref."""
    q, s = cupy.asnumpy(q), cupy.asnumpy(s)
    if rows is not None:
        q, s, ref = q[:rows], s[:rows], ref[:rows]
    n = q.shape[-1]
    groups = lambda x: np.repeat(x, 128, axis=-1)[..., :n]  # noqa: E731 - per group -> per element
    acc = ((REL_TOLERANCE - BF16_UNIT) * RMS_FLOOR * np.sqrt(np.mean(ref * ref))  # the bf16 tests' floor term
           + 2.0 ** -10 * np.abs(ref))                                               # and 14-bit accumulation
    acc_g = _group_max(acc)
    amax_ref = np.maximum(_group_max(np.abs(ref)), AMAX_FLOOR)
    assert np.all(np.isfinite(s)) and np.all(s > 0), "scales not written or not positive"
    lo, hi = np.maximum(amax_ref - acc_g, AMAX_FLOOR) / FP8_MAX, (amax_ref + acc_g) / FP8_MAX
    if scale_format == "float32":
        ok = (s >= lo * (1 - 1e-6)) & (s <= hi * (1 + 1e-6))
    else:
        ok = (s.view(np.uint32) & 0x7FFFFF == 0) & (s >= pow2_ceil(np.float32(lo))) & (s <= pow2_ceil(np.float32(hi)))
    assert np.all(ok), f"{np.count_nonzero(~ok)} of {ok.size} scales off"
    deq = fp8_e4m3_to_float(q).reshape(q.shape) * groups(s)
    bound = (np.maximum((np.abs(ref) + acc) * 2.0 ** -4, groups(s) * 2.0 ** -10) + acc) * (1 + 1e-6)
    err = np.abs(deq - ref)
    assert np.all(err <= bound), f"payload off: worst {np.max(err / bound):.3f} of the bound"
    q_ref, s_ref = per_token_cast_to_fp8_numpy(ref.astype(np.float32), scale_format)
    # Where the accumulation's error is well below an e4m3 step (2^-4 of the value at least), and the scale is
    # the quantizer's (within 1%): the same code or the next one.
    comparable = groups(np.abs(s / s_ref - 1) < 0.01) & (acc <= 2.0 ** -6 * np.abs(ref))
    steps = np.abs((q & 0x7F).astype(int) - (q_ref & 0x7F).astype(int))
    assert np.all(steps[comparable] <= 1), "a code more than one step from the quantizer's on the product"


def _group_max(x):
    """max of x (non-negative) per row and 128-column group."""
    n = x.shape[-1]
    pad = np.zeros(x.shape[:-1] + (-(-n // 128) * 128,))
    pad[..., :n] = x
    return pad.reshape(*x.shape[:-1], -1, 128).max(axis=-1)


@pytest.mark.parametrize("scale_format", FORMATS)
@pytest.mark.parametrize("m,n,k", [(1, 128, 128), (64, 2112, 7168), (200, 1000 - 8, 1040), (4096, 7168, 2048),
                                   (129, 4096, 512), (3000, 256, 7168), (7, 16, 112), (1, 256, 7168),
                                   (128, 2112, 7168), (3, 1024, 4096), (64, 7168, 2048), (128, 7168, 2048),
                                   (128, 1536, 7168), (130, 320, 1024), (64, 192, 640)])
def test_matmul_fp8_out(m, n, k, scale_format):
    _, _, a, sa, b, sb = make_dense(m, n, k, seed=m + n + k)
    q, s = cugemm8.matmul(a, sa, b, sb, out_dtype="float8_e4m3", scale_format=scale_format)
    assert q.dtype == cupy.uint8 and q.shape == (m, n) and s.dtype == cupy.float32 and s.shape == (m, -(-n // 128))
    check_fp8(q, s, reference_product(a, sa, b, sb), scale_format)
    # Repeats are bitwise equal, and writing in place gives the same bytes.
    q2, s2 = cupy.full((m, n), 0x7F, dtype=cupy.uint8), cugemm8.empty_scale((m, -(-n // 128)))
    out = cugemm8.matmul(a, sa, b, sb, out=q2, out_scale=s2, out_dtype="float8_e4m3", scale_format=scale_format)
    assert out[0] is q2 and out[1] is s2
    assert bool((q2 == q).all()) and bool((s2.view(cupy.uint32) == s.view(cupy.uint32)).all())


@PROPERTY_SETTINGS
@given(m=st.integers(1, 700), n=st.integers(1, 160).map(lambda v: 16 * v), k=st.integers(1, 80).map(lambda v: 16 * v),
       scale_format=st.sampled_from(FORMATS), seed=st.integers(0, 2**31 - 1))
def test_matmul_fp8_out_property(m, n, k, scale_format, seed):
    _, _, a, sa, b, sb = make_dense(m, n, k, seed)
    q, s = cugemm8.matmul(a, sa, b, sb, out_dtype="float8_e4m3", scale_format=scale_format)
    check_fp8(q, s, reference_product(a, sa, b, sb), scale_format)


@pytest.mark.parametrize("scale_format", FORMATS)
@pytest.mark.parametrize("bm,split,m,n,k", [(64, 2, 3, 208, 1040), (64, 4, 64, 520 - 8, 1808), (64, 8, 1, 1008, 7168),
                                            (128, 2, 100, 384, 3008), (128, 4, 129, 256, 1040), (64, 3, 77, 400, 1040),
                                            (64, 5, 1, 2112, 2048), (128, 6, 129, 272, 1808), (64, 7, 33, 512, 7168)])
def test_split_k_fp8_out(bm, split, m, n, k, scale_format):
    """Split K with e4m3 output: the tile's CTAs share their chunks' row amax (uneven k-block shares and, over 3,
    5, 6 and 7 CTAs, uneven column chunks; partial tiles); bitwise the same on a repeat."""
    fmt = "float8_e4m3" if scale_format == "float32" else "float8_e4m3_ue8m0"
    cfg = heuristics.make_config("normal", n, k, 1, bm, 128, split_k=split, stream_b=True, out_format=fmt)
    check_config(cfg, m, scale_format, seed=bm + split + m)


def check_config(cfg, m, scale_format, seed):
    """`cfg` (a normal-layout e4m3 configuration) on an M x cfg.n x cfg.k problem: against the reference, and
    bitwise the same on a repeat."""
    n, k = cfg.n, cfg.k
    _, _, a, sa, b, sb = make_dense(m, n, k, seed=seed)
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    q, s = cupy.full((m, n), 0x7F, dtype=cupy.uint8), cugemm8.empty_scale((m, -(-n // 128)))
    run = fp8_gemm.bind(cfg, a, sa, b, sb, q, out_scale=s)
    run()
    check_fp8(q, s, reference_product(a, sa, b, sb), scale_format)
    q1, s1 = q.copy(), s.copy()
    run()
    assert bool((q1 == q).all()) and bool((s1.view(cupy.uint32) == s.view(cupy.uint32)).all()), "not repeatable"


@pytest.mark.parametrize("scale_format", FORMATS)
@pytest.mark.parametrize("bm,bn,m,n,k", [(64, 64, 3, 2112, 1040), (64, 64, 64, 1008, 2048), (128, 64, 100, 384, 256),
                                         (64, 32, 1, 208, 512), (128, 32, 129, 96, 1808)])
def test_group_shared_fp8_out(bm, bn, m, n, k, scale_format):
    """e4m3 output in tiles narrower than a scale group: the group's CTAs (a cluster) share each row's amax
    (groups whose last tiles lie past N, partial tiles, partial k-blocks); bitwise the same on a repeat."""
    fmt = "float8_e4m3" if scale_format == "float32" else "float8_e4m3_ue8m0"
    cfg = heuristics.make_config("normal", n, k, 1, bm, bn, stream_b=True, out_format=fmt, group_ctas=128 // bn)
    check_config(cfg, m, scale_format, seed=bm + bn + m)


def test_zero_rows_give_the_floor_scale():
    m, n, k = 70, 256, 256
    _, _, a, sa, b, sb = make_dense(m, n, k, seed=5)
    a[3] = 0
    for fmt in FORMATS:
        q, s = cugemm8.matmul(a, sa, b, sb, out_dtype="float8_e4m3", scale_format=fmt)
        assert bool((q[3] == 0).all())
        assert np.all(cupy.asnumpy(s[3]) == np.float32(FLOOR_SCALE[fmt]))


def test_chain_fp8_output_feeds_the_next_gemm():
    """GEMM 1's (out, out_scale) is GEMM 2's (a, a_scale) with no copy; the chain stays close to float64."""
    m, h, n, k = 256, 1024, 512, 2048
    x, w1, a, sa, b1, sb1 = make_dense(m, h, k, seed=11)
    w2 = cupy.random.default_rng(12).standard_normal((n, h), dtype=cupy.float32)
    b2, sb2 = cugemm8.per_block_cast_to_fp8(w2)
    for fmt in FORMATS:
        q, s = cugemm8.matmul(a, sa, b1, sb1, out_dtype="float8_e4m3", scale_format=fmt)
        assert cugemm8.get_col_major_tma_aligned_tensor(s) is s  # the layout a_scale takes as it is
        d = cugemm8.matmul(q, s, b2, sb2)
        chain = (x.astype(cupy.float64) @ w1.astype(cupy.float64).T) @ w2.astype(cupy.float64).T
        diff = calc_diff(d, chain)
        assert diff < 2e-3, f"calc_diff {diff:.2e} of the FP8 chain against float64"


def test_fused_error_not_above_unfused():
    """Quantizing the FP32 accumulators is at least as accurate as quantizing the bf16 output."""
    m, n, k = 512, 2048, 4096
    _, _, a, sa, b, sb = make_dense(m, n, k, seed=21)
    ref = reference_product(a, sa, b, sb)
    q, s = cugemm8.matmul(a, sa, b, sb, out_dtype="float8_e4m3")
    fused = fp8_e4m3_to_float(cupy.asnumpy(q)).reshape(m, n) * np.repeat(cupy.asnumpy(s), 128, axis=-1)
    q_u, s_u = cugemm8.per_token_cast_to_fp8(cugemm8.matmul(a, sa, b, sb))
    unfused = fp8_e4m3_to_float(cupy.asnumpy(q_u)).reshape(m, n) * np.repeat(cupy.asnumpy(s_u), 128, axis=-1)
    e_fused, e_unfused = np.abs(fused - ref).mean(), np.abs(unfused - ref).mean()
    assert e_fused <= e_unfused, f"fused mean error {e_fused:.3e} > unfused {e_unfused:.3e}"


@pytest.mark.parametrize("scale_format", FORMATS)
def test_masked_fp8_out(scale_format):
    groups, max_m, n, k = 6, 192, 640, 1024
    _, _, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=3)
    masked_m = cupy.asarray(np.array([0, 1, 64, 100, 192, 130], dtype=np.int32))
    q = cupy.full((groups, max_m, n), 0x5A, dtype=cupy.uint8)
    s = cugemm8.empty_scale((groups, max_m, n // 128))
    s[...] = -1.0
    cugemm8.m_grouped_matmul_masked(a, sa, b, sb, masked_m, 64, out=q, out_scale=s, out_dtype="float8_e4m3",
                                    scale_format=scale_format)
    ref = reference_product(a, sa, b, sb)
    for g, rows in enumerate(cupy.asnumpy(masked_m)):
        if rows:
            check_fp8(q[g], s[g], ref[g], scale_format, rows=rows)
        assert bool((q[g, rows:] == 0x5A).all()), f"group {g}: payload past masked_m written"
        assert bool((s[g, rows:] == -1.0).all()), f"group {g}: scales past masked_m written"


@pytest.mark.parametrize("scale_format", FORMATS)
def test_masked_fp8_out_split_tail(scale_format):
    """The masked split last wave (CTA pairs, the row amax shared) on 8 SMs; a light last block too."""
    groups, max_m, n, k = 3, 300, 640, 1024
    fmt = "float8_e4m3" if scale_format == "float32" else "float8_e4m3_ue8m0"
    cfg = heuristics.make_config("masked", n, k, groups, 128, 128, tail_split=True, out_format=fmt)
    _, _, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=8)
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    masked_m = cupy.asarray(np.array([300, 0, 20], dtype=np.int32))
    q = cupy.full((groups, max_m, n), 0x5A, dtype=cupy.uint8)
    s = cugemm8.empty_scale((groups, max_m, n // 128))
    s[...] = -1.0
    fp8_gemm.bind(cfg, a, sa, b, sb, q, layout=masked_m, grid=8, out_scale=s)()
    ref = reference_product(a, sa, b, sb)
    for g, rows in enumerate(cupy.asnumpy(masked_m)):
        if rows:
            check_fp8(q[g], s[g], ref[g], scale_format, rows=rows)
        assert bool((q[g, rows:] == 0x5A).all()) and bool((s[g, rows:] == -1.0).all()), f"group {g}: rows past masked_m"


@pytest.mark.parametrize("scale_format", FORMATS)
def test_contiguous_fp8_out_256_rows(scale_format):
    """256-row tiles over experts padded to 128 rows (tiles split between two experts at their middle, padding slabs):
    each row's payload and scale from its own expert's pass."""
    rows = [300, 200, 0, 130, 512, 100, 90, 256, 383]
    n, k = 384, 512
    fmt = "float8_e4m3" if scale_format == "float32" else "float8_e4m3_ue8m0"
    _, _, a, sa, b, sb, idx = make_contiguous(rows, n, k, seed=5, align=128)
    q, s = cupy.full((a.shape[0], n), 0x7F, dtype=cupy.uint8), cugemm8.empty_scale((a.shape[0], n // 128))
    cfg = heuristics.make_config("contiguous", n, k, len(rows), 256, 128, out_format=fmt)
    fp8_gemm.bind(cfg, a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, q, layout=idx, out_scale=s)()
    idx_h = cupy.asnumpy(idx)
    full, wb = dequant_a(a, sa, k), dequant_b(b, sb, n, k)
    ref = np.zeros((a.shape[0], n))
    for g in range(len(rows)):
        sel = np.nonzero(idx_h == g)[0]
        if sel.size:
            ref[sel] = cupy.asnumpy(full[cupy.asarray(sel)] @ wb[g].T)
    valid = cupy.asarray(np.nonzero(idx_h >= 0)[0])
    check_fp8(q[valid], s[valid], ref[idx_h >= 0], scale_format)
    pad = cupy.asarray(np.nonzero(idx_h < 0)[0])
    assert bool((q[pad] == 0).all()), "padding rows' payload not zero"
    assert np.all(cupy.asnumpy(s[pad]) == np.float32(FLOOR_SCALE[scale_format])), "padding rows' scale"


@pytest.mark.parametrize("scale_format", FORMATS)
def test_contiguous_fp8_out(scale_format):
    rows = [100, 0, 64, 1, 250]
    n, k = 384, 768
    _, _, a, sa, b, sb, idx = make_contiguous(rows, n, k, seed=4)
    q, s = cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, idx, out_dtype="float8_e4m3", scale_format=scale_format)
    idx_h = cupy.asnumpy(idx)
    full, wb = dequant_a(a, sa, k), dequant_b(b, sb, n, k)
    ref = np.zeros((a.shape[0], n))  # each row's product with its expert's weights
    for g in range(len(rows)):
        sel = np.nonzero(idx_h == g)[0]
        if sel.size:
            ref[sel] = cupy.asnumpy(full[cupy.asarray(sel)] @ wb[g].T)
    valid = idx_h >= 0
    check_fp8(q[cupy.asarray(np.nonzero(valid)[0])], s[cupy.asarray(np.nonzero(valid)[0])], ref[valid],
              scale_format)
    pad = cupy.asarray(np.nonzero(~valid)[0])
    assert bool((q[pad] == 0).all()), "padding rows' payload not zero"
    assert np.all(cupy.asnumpy(s[pad]) == np.float32(FLOOR_SCALE[scale_format])), "padding rows' scale"

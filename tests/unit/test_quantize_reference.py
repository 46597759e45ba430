"""CPU tier: the NumPy quantizers, the float64 references and the error metric."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cugemm8 import jit
from cugemm8.quantize import (NVRTC_OPTIONS, fp8_e4m3_to_float, per_block_cast_to_fp8_numpy,
                              per_token_cast_to_fp8_numpy)
from cugemm8.reference import (REL_TOLERANCE, calc_diff, dequantize_per_block, dequantize_per_token,
                               error_bound, max_rel_error, reference_grouped_contiguous,
                               reference_grouped_masked, reference_matmul)

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16]
SETTINGS = settings(max_examples=40, deadline=None)
E4M3_NAN = (0x7F, 0xFF)


def kblocks(x):
    return -(-x // 128)


def random_input(rng, shape, dtype, spread=True):
    x = rng.standard_normal(shape)
    if spread:  # tiles of very different magnitudes, some all-zero rows
        x *= 10.0 ** rng.integers(-4, 4, size=shape[:-1] + (1,))  # float16 stays finite
        x[..., ::7, :] = 0.0
    return x.astype(dtype)


def tile_amax(x, tile_rows, r0, c0):
    tile = np.abs(x[..., r0:r0 + tile_rows, c0:c0 + 128].astype(np.float32))
    return np.maximum(tile.max(axis=(-2, -1), initial=np.float32(0)), np.float32(1e-4))


# --------------------------------------------------------------------------- e4m3 decoding
def test_fp8_decode_table():
    codes = np.arange(256, dtype=np.uint8)
    values = fp8_e4m3_to_float(codes)
    assert values.dtype == np.float32
    assert np.isnan(values[list(E4M3_NAN)]).all()
    finite = np.delete(values, list(E4M3_NAN))
    assert np.isfinite(finite).all() and np.abs(finite).max() == 448.0
    assert values[0x7E] == 448.0 and values[0xFE] == -448.0
    assert values[0x08] == 2.0 ** -6 and values[0x01] == 2.0 ** -9 and values[0x38] == 1.0
    assert np.array_equal(fp8_e4m3_to_float(codes.view(np.int8)), values, equal_nan=True)
    with pytest.raises(TypeError):
        fp8_e4m3_to_float(np.zeros(4, np.float32))


# --------------------------------------------------------------------------- per-token quantizer
@SETTINGS
@given(m=st.integers(0, 40), k=st.integers(1, 700), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**32 - 1))
def test_per_token_properties(m, k, dtype, seed):
    x = random_input(np.random.default_rng(seed), (m, k), dtype)
    q, s = per_token_cast_to_fp8_numpy(x)
    assert q.shape == (m, k) and q.dtype == np.uint8 and q.flags.c_contiguous
    assert s.shape == (m, kblocks(k)) and s.dtype == np.float32
    assert not np.isin(q, E4M3_NAN).any()

    xf = x.astype(np.float32)
    for kb in range(kblocks(k)):
        block = np.abs(xf[:, kb * 128:(kb + 1) * 128])
        amax = np.maximum(block.max(axis=1, initial=np.float32(0)), np.float32(1e-4))
        assert np.array_equal(s[:, kb], amax / np.float32(448))
        # The largest element of each tile (above the amax floor) lands on +-448.
        big = block.max(axis=1, initial=0) >= np.float32(1e-4)
        assert (np.abs(fp8_e4m3_to_float(q[:, kb * 128:(kb + 1) * 128][big])).max(axis=1, initial=448) == 448).all()

    # Round trip: e4m3 keeps 4 significant bits (relative step 2^-4 with round-to-nearest); below
    # 2^-6 its steps are 2^-9, so the absolute floor is half of that, in units of the scale.
    deq = dequantize_per_token(q, s)
    tile_scale = np.repeat(s.astype(np.float64), 128, axis=1)[:, :k]
    bound = 2.0 ** -4 * np.abs(xf) * (1 + 1e-6) + 2.0 ** -10 * tile_scale
    assert (np.abs(deq - xf) <= bound).all()


def test_per_token_partial_tile_uses_real_elements():
    x = np.zeros((2, 130), np.float32)
    x[:, :128] = 1000.0
    x[0, 128:] = [0.5, -3.0]
    q, s = per_token_cast_to_fp8_numpy(x)
    assert s[0, 1] == np.float32(3.0) / np.float32(448)
    assert s[1, 1] == np.float32(1e-4) / np.float32(448)     # all-zero tile: the amax floor
    assert fp8_e4m3_to_float(q[0, 128:]).tolist() == [72.0, -448.0]   # 0.5 * 448/3 = 74.7 -> 72
    assert (q[1, 128:] == 0).all()


@SETTINGS
@given(x=hnp.arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(1, 300)),
                    elements=st.floats(width=32, allow_nan=False, allow_infinity=False)))
def test_saturation_never_nan(x):
    for quantize in (per_token_cast_to_fp8_numpy, per_block_cast_to_fp8_numpy):
        q, s = quantize(x)
        assert not np.isin(q, E4M3_NAN).any()
        assert np.isfinite(s).all() and (s > 0).all()
        assert np.abs(fp8_e4m3_to_float(q)).max() <= 448


def test_saturation_near_fp8_max():
    # x * (448 / amax) can round just past 448; it must clamp to 448, never become NaN.
    x = np.array([[np.float32(np.nextafter(np.float32(448), np.float32(0))), 448.0, 465.0, -1e38, 1e-30]],
                 dtype=np.float32)
    q, _ = per_token_cast_to_fp8_numpy(x)
    assert not np.isin(q, E4M3_NAN).any()
    assert fp8_e4m3_to_float(q)[0, 3] == -448.0


def test_per_token_3d_matches_2d():
    x = random_input(np.random.default_rng(0), (3, 17, 300), BF16)
    q, s = per_token_cast_to_fp8_numpy(x)
    q2, s2 = per_token_cast_to_fp8_numpy(x.reshape(51, 300))
    assert q.shape == (3, 17, 300) and s.shape == (3, 17, 3)
    assert np.array_equal(q.reshape(51, 300), q2) and np.array_equal(s.reshape(51, 3), s2)


@pytest.mark.parametrize("quantize", [per_token_cast_to_fp8_numpy, per_block_cast_to_fp8_numpy])
def test_quantizer_input_rules(quantize):
    with pytest.raises(TypeError):
        quantize(np.zeros((4, 4), np.float64))
    with pytest.raises(ValueError):
        quantize(np.zeros(4, np.float32))


def test_16bit_inputs_quantize_like_their_float32_values():
    x = random_input(np.random.default_rng(1), (9, 260), np.float32)
    for dtype in (np.float16, BF16):
        low = x.astype(dtype)
        for quantize in (per_token_cast_to_fp8_numpy, per_block_cast_to_fp8_numpy):
            a, b = quantize(low), quantize(low.astype(np.float32))
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


# --------------------------------------------------------------------------- per-block quantizer
@SETTINGS
@given(n=st.integers(1, 400), k=st.integers(1, 400), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**32 - 1))
def test_per_block_properties(n, k, dtype, seed):
    w = random_input(np.random.default_rng(seed), (n, k), dtype)
    q, s = per_block_cast_to_fp8_numpy(w)
    assert q.shape == (n, k) and q.dtype == np.uint8
    assert s.shape == (kblocks(n), kblocks(k)) and s.dtype == np.float32
    assert not np.isin(q, E4M3_NAN).any()
    wf = w.astype(np.float32)
    for nb in range(kblocks(n)):
        for kb in range(kblocks(k)):
            assert s[nb, kb] == tile_amax(wf, 128, nb * 128, kb * 128) / np.float32(448)
    deq = dequantize_per_block(q, s)
    scale = np.repeat(np.repeat(s.astype(np.float64), 128, 0), 128, 1)[:n, :k]
    assert (np.abs(deq - wf) <= 2.0 ** -4 * np.abs(wf) * (1 + 1e-6) + 2.0 ** -10 * scale).all()


def test_per_block_3d_matches_per_group():
    w = random_input(np.random.default_rng(2), (3, 200, 136), np.float16)
    q, s = per_block_cast_to_fp8_numpy(w)
    assert q.shape == (3, 200, 136) and s.shape == (3, 2, 2)
    for g in range(3):
        qg, sg = per_block_cast_to_fp8_numpy(w[g])
        assert np.array_equal(q[g], qg) and np.array_equal(s[g], sg)


# --------------------------------------------------------------------------- references
def direct_dequant(q, s, rows_per_scale):
    """Independent of the library: index each element's scale directly."""
    vals = q.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    r = np.arange(q.shape[0]) // rows_per_scale
    c = np.arange(q.shape[1]) // 128
    return vals * s.astype(np.float64)[r[:, None], c[None, :]]


@SETTINGS
@given(m=st.integers(1, 70), n=st.integers(1, 40).map(lambda x: 8 * x), k=st.integers(1, 40).map(lambda x: 16 * x),
       seed=st.integers(0, 2**32 - 1))
def test_reference_matmul_matches_einsum(m, n, k, seed):
    rng = np.random.default_rng(seed)
    aq, sa = per_token_cast_to_fp8_numpy(rng.standard_normal((m, k)).astype(np.float32))
    bq, sb = per_block_cast_to_fp8_numpy(rng.standard_normal((n, k)).astype(np.float32))
    want = np.einsum("mk,nk->mn", direct_dequant(aq, sa, 1), direct_dequant(bq, sb, 128))
    got = reference_matmul(aq, sa, bq, sb)
    assert got.dtype == np.float64 and got.shape == (m, n)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())

    # a_scale in the kernel's M-major layout (a strided view) gives the same answer.
    am = -(-m // 4) * 4
    storage = np.full((sa.shape[1], am), np.nan, np.float32)
    storage[:, :m] = sa.T
    assert np.array_equal(reference_matmul(aq, storage.T[:m], bq, sb), got)


def test_grouped_references_match_dense():
    rng = np.random.default_rng(3)
    groups, n, k = 3, 64, 384
    bq, sb = per_block_cast_to_fp8_numpy(rng.standard_normal((groups, n, k)).astype(np.float32))

    # contiguous: segments padded to 128 rows with -1
    counts = [100, 0, 130]
    idx = np.concatenate([np.r_[np.full(c, g), np.full(-c % 128, -1)] for g, c in enumerate(counts)]).astype(np.int32)
    aq, sa = per_token_cast_to_fp8_numpy(rng.standard_normal((idx.size, k)).astype(np.float32))
    out = reference_grouped_contiguous(aq, sa, bq, sb, idx)
    assert out.shape == (idx.size, n)
    for g in range(groups):
        rows = idx == g
        assert np.array_equal(out[rows], reference_matmul(aq[rows], sa[rows], bq[g], sb[g]))
    assert (out[idx < 0] == 0).all()

    # masked
    max_m = 96
    aq, sa = per_token_cast_to_fp8_numpy(rng.standard_normal((groups, max_m, k)).astype(np.float32))
    masked_m = np.array([96, 5, 0], np.int32)
    out = reference_grouped_masked(aq, sa, bq, sb, masked_m)
    assert out.shape == (groups, max_m, n)
    for g, c in enumerate(masked_m):
        assert np.array_equal(out[g, :c], reference_matmul(aq[g, :c], sa[g, :c], bq[g], sb[g]))
        assert (out[g, c:] == 0).all()


def test_calc_diff():
    x = np.random.default_rng(4).standard_normal((33, 65))
    assert calc_diff(x, x) == 0.0
    assert calc_diff(x.astype(BF16), x.astype(BF16)) == 0.0
    assert calc_diff(np.zeros(5), np.zeros(5)) == 0.0
    assert calc_diff(x, -x) == pytest.approx(2.0)
    assert calc_diff(x, 2 * x) == pytest.approx(0.2)


def test_max_rel_error():
    ref = np.array([[1.0, -1.0], [0.0, 7.0]])
    rms = np.sqrt(np.mean(ref ** 2))
    assert max_rel_error(ref, ref) == 0.0
    out = ref.copy()
    out[1, 0] = 0.5
    assert max_rel_error(out, ref) == pytest.approx(0.5 / (0.01 * rms))
    assert max_rel_error(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0
    assert max_rel_error(np.ones(3), np.zeros(3)) == np.inf
    assert error_bound(ref).shape == ref.shape
    assert error_bound(ref)[1, 0] == pytest.approx(REL_TOLERANCE * 0.01 * rms)
    with pytest.raises(ValueError):
        max_rel_error(np.zeros(3), np.zeros(4))


def test_rel_tolerance_value():
    # 4 k32 steps x 3 sigma x 2^-13 per 128-wide block, over the 0.01 rms floor, plus bf16 rounding.
    assert REL_TOLERANCE == pytest.approx(4 * 3 * 2.0 ** -13 / 0.01 + 2.0 ** -8)
    assert 0.06 < REL_TOLERANCE < 0.2   # above the measured 0.02-0.06, far below a real defect (>= 1)


def emulate_fp8_gemm(aq, sa, bq, sb, bits=14):
    """The accumulation the tolerance models: per 128-wide K block, four k32 steps, each aligning the
    running sum and 32 exact products to the largest of them and truncating to `bits` significant
    bits; then FP32 promotion with the scales and one rounding to bfloat16."""
    a = fp8_e4m3_to_float(aq).astype(np.float64)
    b = fp8_e4m3_to_float(bq).astype(np.float64)
    (m, k), n = a.shape, b.shape[0]
    out = np.zeros((m, n), np.float32)
    for kb in range(kblocks(k)):
        acc = np.zeros((m, n))
        for s in range(kb * 128, min(k, kb * 128 + 128), 32):
            terms = np.concatenate([acc[..., None], a[:, None, s:s + 32] * b[None, :, s:s + 32]], axis=-1)
            peak = np.abs(terms).max(axis=-1, keepdims=True)
            quantum = 2.0 ** (np.floor(np.log2(np.where(peak > 0, peak, 1.0))) - (bits - 1))
            acc = (np.trunc(terms / quantum) * quantum).sum(axis=-1)
        scale = sa[:, kb, None] * sb[np.arange(n) // 128, kb][None, :]
        out += acc.astype(np.float32) * scale
    return out.astype(BF16)


@pytest.mark.parametrize("m, n, k", [(64, 128, 512), (40, 136, 1040)])
def test_tolerance_covers_emulated_accumulator(m, n, k):
    rng = np.random.default_rng(m + n + k)
    aq, sa = per_token_cast_to_fp8_numpy(rng.standard_normal((m, k)).astype(np.float32))
    bq, sb = per_block_cast_to_fp8_numpy(rng.standard_normal((n, k)).astype(np.float32))
    ref = reference_matmul(aq, sa, bq, sb)
    err = max_rel_error(emulate_fp8_gemm(aq, sa, bq, sb), ref)
    assert max_rel_error(ref.astype(np.float32).astype(BF16), ref) < err < REL_TOLERANCE
    # and a real defect (one K block's scale off by 2x in one row) is far outside it
    bad_sa = sa.copy()
    bad_sa[3, 1] *= 2
    assert max_rel_error(reference_matmul(aq, bad_sa, bq, sb), ref) > 10 * REL_TOLERANCE


# --------------------------------------------------------------------------- the CUDA source compiles
def test_quantize_cu_compiles_for_sm90():
    try:
        jit.nvrtc_version()
    except Exception as exc:  # no NVRTC here
        pytest.skip(f"NVRTC unavailable: {exc}")
    from cugemm8.quantize import kernel_source

    source = kernel_source()
    assert "#include" not in source   # CuPy keys its cache on this text: it must be self-contained
    cubin = jit.compile_cubin(source, name="quantize.cu", options=("-arch=sm_90",) + NVRTC_OPTIONS)
    assert cubin[:4] == b"\x7fELF"

"""CPU tier: the argument checks (pure functions over ArrayInfo): valid descriptions pass, and each rule
refuses with a message naming the argument (test_validation_fast_paths.py: the inline fast paths agree
with the rules' helpers)."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cugemm8
from array_infos import (BASE_PTR, a_scale_info, c_strides, contiguous_case, dense_case, info, kblocks, kinds, ks,
                         masked_case, ms, ns)
from cugemm8.layout import get_tma_aligned_size
from cugemm8.validation import check_contiguous, check_dense, check_masked

BF16 = np.dtype(ml_dtypes.bfloat16)
SETTINGS = settings(max_examples=60, deadline=None)


def run_dense(case):
    return check_dense(case["a"], case["a_scale"], case["b"], case["b_scale"], case["out"], 0)


def run_contiguous(case):
    return check_contiguous(case["a"], case["a_scale"], case["b"], case["b_scale"], case["m_indices"],
                            case["out"], 0)


def run_masked(case):
    return check_masked(case["a"], case["a_scale"], case["b"], case["b_scale"], case["masked_m"],
                        case["expected_m"], case["out"], 0)


def expect(exc, name, fn, case, *fragments):
    with pytest.raises(exc) as caught:
        fn(case)
    msg = str(caught.value)
    assert msg.startswith(name + " "), msg
    for fragment in fragments:
        assert fragment in msg, msg
    return msg


def expected_kind(kind, m, kb, groups=None):
    """A row-major array can also be in the kernel's layout (KB == 1, empty, ...): then it is "aligned"."""
    if kind == "aligned":
        return kind
    shape = (m, kb) if groups is None else (groups, m, kb)
    am = get_tma_aligned_size(m, 4)
    aligned = (1, am) if groups is None else (am * kb, 1, am)
    same = all(e <= 1 or s == t for e, s, t in zip(shape, c_strides(shape), aligned))
    return "aligned" if same or 0 in shape else kind


# --------------------------------------------------------------------------- valid descriptions
@SETTINGS
@given(m=ms, n=ns, k=ks, kind=kinds, with_out=st.booleans(), pad_a=st.integers(0, 4), pad_b=st.integers(0, 4),
       pad_out=st.integers(0, 4), fp8=st.sampled_from([np.uint8, np.int8]))
def test_dense_valid(m, n, k, kind, with_out, pad_a, pad_b, pad_out, fp8):
    case = dense_case(m, n, k, kind, with_out, 16 * pad_a, 16 * pad_b, 8 * pad_out, fp8)
    assert run_dense(case) == (m, n, k, expected_kind(kind, m, kblocks(k)))


@SETTINGS
@given(blocks=st.integers(0, 8), n=ns, k=ks, groups=st.integers(1, 9), kind=kinds, with_out=st.booleans())
def test_contiguous_valid(blocks, n, k, groups, kind, with_out):
    m = 128 * blocks
    case = contiguous_case(m, n, k, groups, kind, with_out)
    assert run_contiguous(case) == (m, n, k, groups, expected_kind(kind, m, kblocks(k)))


@SETTINGS
@given(groups=st.integers(1, 9), max_m=ms, n=ns, k=ks, kind=kinds, with_out=st.booleans())
def test_masked_valid(groups, max_m, n, k, kind, with_out):
    case = masked_case(groups, max_m, n, k, kind, with_out)
    assert run_masked(case) == (max_m, n, k, groups, expected_kind(kind, max_m, kblocks(k), groups))


def test_a_scale_kb1_any_outer_stride():
    case = dense_case(10, 64, 128)
    case["a_scale"] = info((10, 1), np.float32, (1, 3))
    assert run_dense(case)[3] == "aligned"


def test_masked_expected_m_numpy_int():
    case = masked_case(2, 64, 64, 128)
    case["expected_m"] = np.int64(7)
    assert run_masked(case)[0] == 64


# --------------------------------------------------------------------------- TypeError
@pytest.mark.parametrize("bad", [None, True, 1.5, 3, "a", np.zeros((4, 16), np.uint8)])
@pytest.mark.parametrize("name", ["a", "a_scale", "b", "b_scale"])
def test_dense_not_an_array(name, bad):
    case = dense_case(64, 64, 128)
    case[name] = bad
    expect(TypeError, name, run_dense, case, type(bad).__name__)


@pytest.mark.parametrize("name, dtype", [
    ("a", np.float16), ("a", np.float32), ("a", ml_dtypes.float8_e4m3fn), ("a_scale", np.float64),
    ("a_scale", BF16), ("b", np.int16), ("b_scale", np.float16), ("out", np.float32), ("out", np.float16),
])
def test_dense_wrong_dtype(name, dtype):
    case = dense_case(64, 64, 128)
    old = case[name]
    case[name] = old._replace(dtype=np.dtype(dtype))
    expect(TypeError, name, run_dense, case, str(np.dtype(dtype)))


@pytest.mark.parametrize("name, dtype", [("m_indices", np.int64), ("m_indices", np.uint32), ("b", np.float32)])
def test_contiguous_wrong_dtype(name, dtype):
    case = contiguous_case(128, 64, 128, 2)
    case[name] = case[name]._replace(dtype=np.dtype(dtype))
    expect(TypeError, name, run_contiguous, case, str(np.dtype(dtype)))


@pytest.mark.parametrize("name, dtype", [("masked_m", np.int64), ("a", np.float16), ("out", np.float32)])
def test_masked_wrong_dtype(name, dtype):
    case = masked_case(2, 64, 64, 128)
    case[name] = case[name]._replace(dtype=np.dtype(dtype))
    expect(TypeError, name, run_masked, case, str(np.dtype(dtype)))


@pytest.mark.parametrize("bad", [True, False, 1.0, None, "8", np.float32(8)])
def test_masked_expected_m_type(bad):
    case = masked_case(2, 64, 64, 128)
    case["expected_m"] = bad
    expect(TypeError, "expected_m", run_masked, case, type(bad).__name__)


@pytest.mark.parametrize("bad", [0, -1, -128])
def test_masked_expected_m_value(bad):
    case = masked_case(2, 64, 64, 128)
    case["expected_m"] = bad
    expect(ValueError, "expected_m", run_masked, case, str(bad))


@pytest.mark.parametrize("name", ["m_indices"])
def test_contiguous_not_an_array(name):
    case = contiguous_case(128, 64, 128, 2)
    case[name] = [0] * 128
    expect(TypeError, name, run_contiguous, case, "list")


def test_masked_masked_m_not_an_array():
    case = masked_case(2, 64, 64, 128)
    case["masked_m"] = None
    expect(TypeError, "masked_m", run_masked, case, "NoneType")


# --------------------------------------------------------------------------- shapes and sizes (dense)
@SETTINGS
@given(m=st.integers(1, 300), n=ns, k=ks)
def test_dense_shape_rules(m, n, k):
    kb, nb = kblocks(k), kblocks(n)

    case = dense_case(m, n, k)
    case["a"] = info((m, k, 1), np.uint8)
    expect(ValueError, "a", run_dense, case, "2-D", str((m, k, 1)))

    case = dense_case(m, n, k)
    case["b"] = info((n * k,), np.uint8)
    expect(ValueError, "b", run_dense, case, "2-D")

    case = dense_case(m, n, k)
    case["b"] = info((n, k + 16), np.uint8)
    expect(ValueError, "b", run_dense, case, "same K", str((n, k + 16)))

    case = dense_case(m, n, k)
    case["a_scale"] = a_scale_info(m + 1, kb, "rowmajor")
    expect(ValueError, "a_scale", run_dense, case, str((m + 1, kb)))

    case = dense_case(m, n, k)
    case["a_scale"] = info((m, kb + 1), np.float32)
    expect(ValueError, "a_scale", run_dense, case, str((m, kb + 1)))

    case = dense_case(m, n, k)
    case["b_scale"] = info((nb, kb, 1), np.float32)
    expect(ValueError, "b_scale", run_dense, case, "2-D")

    case = dense_case(m, n, k)
    case["b_scale"] = info((nb + 1, kb), np.float32)
    expect(ValueError, "b_scale", run_dense, case, str((nb + 1, kb)))

    case = dense_case(m, n, k)
    case["out"] = info((m, n + 8), BF16)
    expect(ValueError, "out", run_dense, case, str((m, n + 8)))

    case = dense_case(m, n, k)
    case["out"] = info((m, n, 1), BF16)
    expect(ValueError, "out", run_dense, case, "2-D")


@pytest.mark.parametrize("n", [4, 12, 100, 1001])
def test_dense_n_rule(n):
    case = dense_case(64, 8, 128)
    case["b"] = info((n, 128), np.uint8)
    case["b_scale"] = info((kblocks(n), 1), np.float32)
    case["out"] = info((64, n), BF16)
    expect(ValueError, "b", run_dense, case, "N must be a multiple of 8", f"N={n}")


@pytest.mark.parametrize("k", [8, 24, 130, 7170])
def test_dense_k_rule(k):
    case = dense_case(64, 64, 128)
    kb = kblocks(k)
    case["a"] = info((64, k), np.uint8, (max(k, 16) // 16 * 16 + 16, 1))
    case["b"] = info((64, k), np.uint8, (max(k, 16) // 16 * 16 + 16, 1))
    case["a_scale"] = info((64, kb), np.float32)
    case["b_scale"] = info((1, kb), np.float32)
    expect(ValueError, "a", run_dense, case, "K must be a multiple of 16", f"K={k}")


@pytest.mark.parametrize("m, n, k", [(64, 0, 128), (64, 64, 0), (0, 0, 0), (1, 0, 0)])
def test_dense_empty_sizes_pass(m, n, k):
    """N = 0 gives an empty D and K = 0 a zero D (the API fills it): both are valid shapes."""
    assert run_dense(dense_case(m, n, k)) == (m, n, k, "aligned")


# --------------------------------------------------------------------------- strides and alignment
@SETTINGS
@given(m=st.integers(1, 300), n=ns, k=ks, name=st.sampled_from(["a", "b"]))
def test_fp8_operand_stride_rules(m, n, k, name):
    rows = m if name == "a" else n

    case = dense_case(m, n, k)
    case[name] = info((rows, k), np.uint8, (k, 2))
    expect(ValueError, name, run_dense, case, "stride 1", str((k, 2)))

    case = dense_case(m, n, k)
    case[name] = info((rows, k), np.uint8, (k + 8, 1))
    expect(ValueError, name, run_dense, case, "multiple of 16 bytes", str(k + 8))

    case = dense_case(m, n, k)
    case[name] = info((rows, k), np.uint8, (k - 16, 1))
    expect(ValueError, name, run_dense, case, "at least the row length", str(k - 16))

    case = dense_case(m, n, k)
    case[name] = info((rows, k), np.uint8, (-k, 1))
    expect(ValueError, name, run_dense, case, "row stride", str(-k))

    case = dense_case(m, n, k)
    case[name] = case[name]._replace(ptr=BASE_PTR + 8)
    expect(ValueError, name, run_dense, case, "16-byte aligned", hex(BASE_PTR + 8))


@SETTINGS
@given(m=st.integers(1, 300), n=ns, k=ks)
def test_out_stride_rules(m, n, k):
    case = dense_case(m, n, k)
    case["out"] = info((m, n), BF16, (n + 4, 1))
    expect(ValueError, "out", run_dense, case, "multiple of 16 bytes", str(2 * (n + 4)))

    case = dense_case(m, n, k)
    case["out"] = info((m, n), BF16, (n, 2))
    expect(ValueError, "out", run_dense, case, "stride 1")

    case = dense_case(m, n, k)
    case["out"] = case["out"]._replace(ptr=BASE_PTR + 2)
    expect(ValueError, "out", run_dense, case, "16-byte aligned")


@SETTINGS
@given(m=st.integers(2, 300), n=ns, k=st.integers(9, 60).map(lambda x: 16 * x))
def test_a_scale_layout_rules(m, n, k):
    kb = kblocks(k)
    am = get_tma_aligned_size(m, 4)

    case = dense_case(m, n, k)
    case["a_scale"] = info((m, kb), np.float32, (2, 2 * am))     # neither layout
    msg = expect(ValueError, "a_scale", run_dense, case, "row-major", "M-major", str((2, 2 * am)))
    assert str((1, am)) in msg

    case = dense_case(m, n, k)
    case["a_scale"] = info((m, kb), np.float32, (1, am + 4))     # M padded too far
    expect(ValueError, "a_scale", run_dense, case, str((1, am + 4)))

    case = dense_case(m, n, k)
    case["a_scale"] = info((m, kb), np.float32, (1, am), ptr=BASE_PTR + 4)  # aligned strides, bad base
    expect(ValueError, "a_scale", run_dense, case, hex(BASE_PTR + 4))

    case = dense_case(m, n, k, kind="rowmajor")
    case["a_scale"] = case["a_scale"]._replace(ptr=BASE_PTR + 4)     # row-major needs no 16-byte base
    assert run_dense(case)[3] == "rowmajor"


@SETTINGS
@given(m=st.integers(1, 300), n=st.integers(129, 1000).map(lambda x: 8 * x), k=st.integers(9, 60).map(lambda x: 16 * x))
def test_b_scale_layout_rules(m, n, k):
    nb, kb = kblocks(n), kblocks(k)
    case = dense_case(m, n, k)
    case["b_scale"] = info((nb, kb), np.float32, (1, nb))
    expect(ValueError, "b_scale", run_dense, case, "C-contiguous", str((1, nb)))

    case = dense_case(m, n, k)
    case["b_scale"] = case["b_scale"]._replace(ptr=BASE_PTR + 2)
    expect(ValueError, "b_scale", run_dense, case, "4-byte aligned")


@pytest.mark.parametrize("name", ["a", "a_scale", "b", "b_scale", "out"])
def test_dense_device(name):
    case = dense_case(64, 64, 256)
    case[name] = case[name]._replace(device=3)
    expect(ValueError, name, run_dense, case, "device 3", "device 0")


def test_zero_m_skips_address_checks():
    case = dense_case(0, 64, 256)
    for name in ("a", "a_scale", "out"):
        case[name] = case[name]._replace(ptr=1)
    assert run_dense(case) == (0, 64, 256, "aligned")


# --------------------------------------------------------------------------- contiguous layout
@SETTINGS
@given(m=st.integers(1, 2000).filter(lambda x: x % 64), n=ns, k=ks, groups=st.integers(1, 8))
def test_contiguous_m_alignment(m, n, k, groups):
    case = contiguous_case(m, n, k, groups)
    expect(ValueError, "a", run_contiguous, case, "multiple of 64", f"M={m}")


def test_contiguous_alignment_is_64():
    assert cugemm8.get_m_alignment_for_contiguous_layout() == 64
    run_contiguous(contiguous_case(64 * 3, 64, 256, 2))  # 3 slabs of 64 rows: valid


def test_contiguous_rules():
    case = contiguous_case(256, 64, 256, 4)
    case["b"] = info((64, 256), np.uint8)
    expect(ValueError, "b", run_contiguous, case, "3-D")

    case = contiguous_case(256, 64, 256, 4)
    case["b"] = info((0, 64, 256), np.uint8)
    case["b_scale"] = info((0, 1, 2), np.float32)
    expect(ValueError, "b", run_contiguous, case, "at least 1 group")

    case = contiguous_case(256, 64, 256, 4)
    case["b"] = info((4, 64, 256), np.uint8, (64 * 256 + 256, 256, 1))
    expect(ValueError, "b", run_contiguous, case, "without gaps", str(64 * 256))

    case = contiguous_case(256, 64, 256, 4)
    case["b_scale"] = info((3, 1, 2), np.float32)
    expect(ValueError, "b_scale", run_contiguous, case, str((3, 1, 2)))

    case = contiguous_case(256, 256, 256, 4)
    case["b_scale"] = info((4, 2, 2), np.float32, (4, 1, 2))
    expect(ValueError, "b_scale", run_contiguous, case, "C-contiguous", str((4, 1, 2)))

    case = contiguous_case(256, 64, 256, 4)
    case["m_indices"] = info((128,), np.int32)
    expect(ValueError, "m_indices", run_contiguous, case, str((128,)))

    case = contiguous_case(256, 64, 256, 4)
    case["m_indices"] = info((256,), np.int32, (2,))
    expect(ValueError, "m_indices", run_contiguous, case, "C-contiguous", "(2,)")

    case = contiguous_case(256, 64, 256, 4)
    case["m_indices"] = info((256, 1), np.int32)
    expect(ValueError, "m_indices", run_contiguous, case, "1-D")

    case = contiguous_case(256, 64, 256, 4)
    case["out"] = info((128, 64), BF16)
    expect(ValueError, "out", run_contiguous, case, str((128, 64)))

    case = contiguous_case(256, 64, 256, 4)
    case["m_indices"] = case["m_indices"]._replace(device=1)
    expect(ValueError, "m_indices", run_contiguous, case, "device 1", "device 0")


def test_contiguous_single_group_any_group_stride():
    case = contiguous_case(128, 64, 256, 1)
    case["b"] = info((1, 64, 256), np.uint8, (7, 256, 1))
    assert run_contiguous(case) == (128, 64, 256, 1, "aligned")


# --------------------------------------------------------------------------- masked layout
def test_masked_rules():
    case = masked_case(2, 64, 64, 256)
    case["a"] = info((64, 256), np.uint8)
    expect(ValueError, "a", run_masked, case, "3-D")

    case = masked_case(2, 64, 64, 256)
    case["a"] = info((0, 64, 256), np.uint8)
    expect(ValueError, "a", run_masked, case, "at least 1 group")

    case = masked_case(2, 64, 64, 256)
    case["b"] = info((3, 64, 256), np.uint8)
    expect(ValueError, "b", run_masked, case, "groups", str((3, 64, 256)))

    case = masked_case(2, 64, 64, 256)
    case["a"] = info((2, 64, 256), np.uint8, (65 * 256, 256, 1))
    expect(ValueError, "a", run_masked, case, "without gaps")

    case = masked_case(2, 64, 64, 256)
    case["a_scale"] = info((2, 64, 2), np.float32, (2, 1, 64))   # group stride must be aligned_m * KB
    expect(ValueError, "a_scale", run_masked, case, str((128, 1, 64)))

    case = masked_case(2, 64, 64, 256)
    case["a_scale"] = info((2, 32, 2), np.float32)
    expect(ValueError, "a_scale", run_masked, case, str((2, 32, 2)))

    case = masked_case(2, 64, 64, 256)
    case["masked_m"] = info((3,), np.int32)
    expect(ValueError, "masked_m", run_masked, case, str((3,)))

    case = masked_case(2, 64, 64, 256)
    case["masked_m"] = info((2,), np.int32, (4,))
    expect(ValueError, "masked_m", run_masked, case, "C-contiguous")

    case = masked_case(2, 64, 64, 256)
    case["out"] = info((2, 64, 64), BF16, (64 * 72, 72, 1))      # padded rows: not C-contiguous
    expect(ValueError, "out", run_masked, case, "C-contiguous", str((64 * 72, 72, 1)))

    case = masked_case(2, 64, 64, 256)
    case["out"] = info((2, 64, 72), BF16)
    expect(ValueError, "out", run_masked, case, str((2, 64, 72)))

    case = masked_case(2, 64, 64, 256)
    case["b_scale"] = info((2, 1, 3), np.float32)
    expect(ValueError, "b_scale", run_masked, case, str((2, 1, 3)))

    case = masked_case(2, 64, 64, 256)
    case["masked_m"] = case["masked_m"]._replace(device=2)
    expect(ValueError, "masked_m", run_masked, case, "device 2", "device 0")

    case = masked_case(2, 64, 12, 256)
    expect(ValueError, "b", run_masked, case, "N must be a multiple of 8")

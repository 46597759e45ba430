"""CPU tier: each entry point tests the valid case inline and calls the rules' helpers only on failure;
on any description, valid or not, it must agree with a spec that applies every helper."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from array_infos import BASE_PTR, BF16, c_strides, contiguous_case, dense_case, info, kblocks, kinds, masked_case
from cugemm8 import validation
from cugemm8.arrays import FLOAT32, INT32, ArrayInfo
from cugemm8.validation import check_contiguous, check_dense, check_masked

# --------------------------------------------------------------------------- fast paths vs the rules
# The entry points test the valid case inline and call the helpers only on failure. These spec
# versions apply every helper unconditionally; on any description, valid or not, both must agree.
V = validation


def spec_dense(a, a_scale, b, b_scale, out, device):
    a_shape = V._array(a, "a", V.FP8_DTYPES, V._FP8, 2, "[M, K]")
    V._array(a_scale, "a_scale", (FLOAT32,), "float32", 2, "[M, ceil(K/128)]")
    b_shape = V._array(b, "b", V.FP8_DTYPES, V._FP8, 2, "[N, K]")
    V._array(b_scale, "b_scale", (FLOAT32,), "float32", 2, "[ceil(N/128), ceil(K/128)]")
    m = a_shape[0]
    k, n = V._k_and_n(a_shape, b_shape)
    kb = kblocks(k)
    V._shape(a_scale, "a_scale", (m, kb), "[M, ceil(K/128)]")
    V._shape(b_scale, "b_scale", (kblocks(n), kb), "[ceil(N/128), ceil(K/128)]")
    V._out(out, (m, n), "[M, N]")
    V._tma_operand(a, "a", 1)
    V._tma_operand(b, "b", 1)
    kind = V._a_scale_kind(a_scale, "a_scale")
    V._contiguous(b_scale, "b_scale", 4)
    V._devices(device, a=a, a_scale=a_scale, b=b, b_scale=b_scale, out=out)
    return m, n, k, kind


def spec_masked(a, a_scale, b, b_scale, masked_m, expected_m, out, device):
    a_shape = V._array(a, "a", V.FP8_DTYPES, V._FP8, 3, "[G, max_m, K]")
    V._array(a_scale, "a_scale", (FLOAT32,), "float32", 3, "[G, max_m, ceil(K/128)]")
    b_shape = V._array(b, "b", V.FP8_DTYPES, V._FP8, 3, "[G, N, K]")
    V._array(b_scale, "b_scale", (FLOAT32,), "float32", 3, "[G, ceil(N/128), ceil(K/128)]")
    V._array(masked_m, "masked_m", (INT32,), "int32", 1, "[G]")
    V._expected_m(expected_m)
    groups, max_m = a_shape[0], a_shape[1]
    if groups < 1:
        raise ValueError(f"a must hold at least 1 group; got shape {a_shape}")
    if b_shape[0] != groups:
        raise ValueError(f"b must have the same number of groups as a (G={groups}); got b.shape={b_shape}")
    k, n = V._k_and_n(a_shape, b_shape)
    kb = kblocks(k)
    V._shape(a_scale, "a_scale", (groups, max_m, kb), "[G, max_m, ceil(K/128)]")
    V._shape(b_scale, "b_scale", (groups, kblocks(n), kb), "[G, ceil(N/128), ceil(K/128)]")
    V._shape(masked_m, "masked_m", (groups,), "[G]")
    V._out(out, (groups, max_m, n), "[G, max_m, N]")
    if out is not None:
        V._masked_out(out, n)
    V._tma_operand(a, "a", 1)
    V._tma_operand(b, "b", 1)
    kind = V._a_scale_kind(a_scale, "a_scale")
    V._contiguous(b_scale, "b_scale", 4)
    V._contiguous(masked_m, "masked_m", 4)
    V._devices(device, a=a, a_scale=a_scale, b=b, b_scale=b_scale, masked_m=masked_m, out=out)
    return max_m, n, k, groups, kind


def spec_contiguous(a, a_scale, b, b_scale, m_indices, out, device):
    a_shape = V._array(a, "a", V.FP8_DTYPES, V._FP8, 2, "[sum M, K]")
    V._array(a_scale, "a_scale", (FLOAT32,), "float32", 2, "[sum M, ceil(K/128)]")
    b_shape = V._array(b, "b", V.FP8_DTYPES, V._FP8, 3, "[G, N, K]")
    V._array(b_scale, "b_scale", (FLOAT32,), "float32", 3, "[G, ceil(N/128), ceil(K/128)]")
    V._array(m_indices, "m_indices", (INT32,), "int32", 1, "[sum M]")
    m, groups = a_shape[0], b_shape[0]
    if groups < 1:
        raise ValueError(f"b must hold at least 1 group; got shape {b_shape}")
    if m % 64:
        raise ValueError(f"a has sum M={m} rows (shape {a_shape}); sum M must be a multiple of "
                         f"64 (each expert's segment is padded to it)")
    k, n = V._k_and_n(a_shape, b_shape)
    kb = kblocks(k)
    V._shape(a_scale, "a_scale", (m, kb), "[sum M, ceil(K/128)]")
    V._shape(b_scale, "b_scale", (groups, kblocks(n), kb), "[G, ceil(N/128), ceil(K/128)]")
    V._shape(m_indices, "m_indices", (m,), "[sum M]")
    V._out(out, (m, n), "[sum M, N]")
    V._tma_operand(a, "a", 1)
    V._tma_operand(b, "b", 1)
    kind = V._a_scale_kind(a_scale, "a_scale")
    V._contiguous(b_scale, "b_scale", 4)
    V._contiguous(m_indices, "m_indices", 4)
    V._devices(device, a=a, a_scale=a_scale, b=b, b_scale=b_scale, m_indices=m_indices, out=out)
    return m, n, k, groups, kind


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


small = st.integers(-2, 300)
mutations = st.fixed_dictionaries({}, optional={
    "shape": st.lists(small, min_size=1, max_size=3),
    "strides": st.lists(st.integers(-300, 300 * 300), min_size=3, max_size=3),
    "dtype": st.sampled_from([np.uint8, np.int8, np.float32, np.int32, BF16, np.float16]),
    "ptr": st.integers(0, 64).map(lambda x: BASE_PTR + x),
    "device": st.integers(0, 2),
})


def mutate(case, data):
    name = data.draw(st.sampled_from(sorted(case)), label="argument")
    if name == "expected_m":
        case[name] = data.draw(st.one_of(st.integers(-3, 100), st.booleans(), st.none(), st.floats(0, 9)))
        return case
    x = case[name]
    if x is None:
        x = info((3, 3), BF16)
    change = data.draw(mutations, label="change")
    shape = tuple(change.get("shape", x.shape))
    strides = tuple(change.get("strides", list(x.strides) + [1, 1, 1])[:len(shape)])
    if len(strides) < len(shape):
        strides = c_strides(shape)
    case[name] = ArrayInfo(shape, strides, np.dtype(change.get("dtype", x.dtype)), change.get("ptr", x.ptr),
                           change.get("device", x.device))
    return case


@settings(max_examples=400, deadline=None)
@given(m=st.integers(0, 300), n=st.integers(1, 40).map(lambda x: 8 * x), k=st.integers(1, 40).map(lambda x: 16 * x),
       kind=kinds, with_out=st.booleans(), data=st.data())
def test_dense_fast_path_agrees_with_spec(m, n, k, kind, with_out, data):
    case = mutate(dense_case(m, n, k, kind, with_out), data)
    args = (case["a"], case["a_scale"], case["b"], case["b_scale"], case["out"], 0)
    assert outcome(check_dense, *args) == outcome(spec_dense, *args)


@settings(max_examples=400, deadline=None)
@given(groups=st.integers(1, 4), blocks=st.integers(0, 3), n=st.integers(1, 40).map(lambda x: 8 * x),
       k=st.integers(1, 40).map(lambda x: 16 * x), kind=kinds, with_out=st.booleans(), data=st.data())
def test_contiguous_fast_path_agrees_with_spec(groups, blocks, n, k, kind, with_out, data):
    case = mutate(contiguous_case(128 * blocks, n, k, groups, kind, with_out), data)
    args = (case["a"], case["a_scale"], case["b"], case["b_scale"], case["m_indices"], case["out"], 0)
    assert outcome(check_contiguous, *args) == outcome(spec_contiguous, *args)


@settings(max_examples=400, deadline=None)
@given(groups=st.integers(1, 4), max_m=st.integers(0, 300), n=st.integers(1, 40).map(lambda x: 8 * x),
       k=st.integers(1, 40).map(lambda x: 16 * x), kind=kinds, with_out=st.booleans(), data=st.data())
def test_masked_fast_path_agrees_with_spec(groups, max_m, n, k, kind, with_out, data):
    case = mutate(masked_case(groups, max_m, n, k, kind, with_out), data)
    args = (case["a"], case["a_scale"], case["b"], case["b_scale"], case["masked_m"], case["expected_m"],
            case["out"], 0)
    assert outcome(check_masked, *args) == outcome(spec_masked, *args)

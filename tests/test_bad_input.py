"""Malformed arguments for every public function: each must raise TypeError or ValueError that names
the argument, and nothing may run on the GPU.

CPU tier: hypothesis builds a valid problem description (``validation.ArrayInfo`` per argument),
checks that it passes, then breaks one argument (or several) in one of many ways -- not an array,
dtype, rank, shape, strides, base alignment, device, ``expected_m`` -- and feeds it to the pure
``validation.check_*`` function. The message must start with the broken argument's name (the
validation module's convention). The public functions are called directly where no GPU is needed.

GPU tier (Hopper only): the same faults built from real CuPy arrays and passed to the public
functions. Every buffer of a case is filled with 0xFF before the call and must still be after it
(a valid ``out=`` is passed whenever another argument is broken); no GemmLauncher.launch, no a_scale
conversion and no new prepared signature may result.

Every case tried is counted (``case_counter``, printed in the terminal summary).
"""
from __future__ import annotations

import dataclasses
import decimal
import fractions
import math

import cupy
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cugemm8
from cugemm8 import api, arrays, fp8_gemm, layout, quantize, runtime, validation
from cugemm8.arrays import ArrayInfo
from gpu import has_hopper, requires_hopper

BF16 = np.dtype(ml_dtypes.bfloat16)
U8, I8, I32, F32 = (np.dtype(t) for t in (np.uint8, np.int8, np.int32, np.float32))
ROLE_DTYPES = {"fp8": (U8, I8), "a_scale": (F32,), "b_scale": (F32,), "index": (I32,), "out": (BF16,)}
DTYPE_POOL = [np.dtype(t) for t in (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                    np.uint64, np.float16, np.float32, np.float64, np.bool_, np.complex64)]
CPU_DTYPE_POOL = DTYPE_POOL + [BF16, np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(">f4"), np.dtype(">i4"),
                               np.dtype(">u2")]
GPU_DTYPE_POOL = DTYPE_POOL + [BF16]

# name -> (role, rank) per entry point, in signature order
SPEC = {
    "dense": {"a": ("fp8", 2), "a_scale": ("a_scale", 2), "b": ("fp8", 2), "b_scale": ("b_scale", 2),
              "out": ("out", 2)},
    "contiguous": {"a": ("fp8", 2), "a_scale": ("a_scale", 2), "b": ("fp8", 3), "b_scale": ("b_scale", 3),
                   "m_indices": ("index", 1), "out": ("out", 2)},
    "masked": {"a": ("fp8", 3), "a_scale": ("a_scale", 3), "b": ("fp8", 3), "b_scale": ("b_scale", 3),
               "masked_m": ("index", 1), "expected_m": ("int", 0), "out": ("out", 3)},
}
FUNCTION = {"dense": "matmul", "contiguous": "m_grouped_matmul_contiguous", "masked": "m_grouped_matmul_masked"}
ITEMSIZE = {"fp8": 1, "a_scale": 4, "b_scale": 4, "index": 4, "out": 2}
TYPE_FAULTS = {"not_array", "dtype", "expected_m_type"}      # TypeError; every other fault: ValueError

BASE_PTR = 0x7F00_0000_0000
NOT_INTS = [True, False, 1.0, 2.5, float("nan"), float("inf"), None, "8", b"8", [8], (8,), {"m": 8}, 8 + 0j,
            np.float32(8), np.float64(8), np.bool_(True), decimal.Decimal(8), fractions.Fraction(8, 1), object()]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def c_strides(shape) -> tuple:
    out, step = [], 1
    for extent in reversed(shape):
        out.append(step)
        step *= extent
    return tuple(reversed(out))


def aligned_strides(shape) -> tuple:
    """The kernel's A-scale layout: [M, KB] -> (1, am); [G, M, KB] -> (am*KB, 1, am)."""
    m, kb = shape[-2:]
    am = ceil_div(m, 4) * 4
    return (1, am) if len(shape) == 2 else (am * kb, 1, am)


def a_scale_ok(shape, strides, ptr) -> bool:
    """The documented rule: the kernel's layout (16-byte aligned base) or row-major C-contiguous;
    strides along extent-1 dimensions do not matter, nor do any for an empty array."""
    if 0 in shape:
        return True

    def match(want):
        return all(e == 1 or s == w for e, s, w in zip(shape, strides, want))

    return (match(aligned_strides(shape)) and ptr % 16 == 0) or match(c_strides(shape))


# ----------------------------------------------------------------------------- problem descriptions
@dataclasses.dataclass
class Case:
    layout: str
    m: int          # rows (dense), sum M (contiguous), max_m (masked)
    n: int
    k: int
    g: int
    device: int
    args: dict      # name -> ArrayInfo / None (out) / int (expected_m); CPU tier
    kind: str       # a_scale layout of the valid case: "aligned" or "rowmajor"

    def shape(self, name: str) -> tuple:
        m, n, k, g = self.m, self.n, self.k, self.g
        kb, nb = ceil_div(k, 128), ceil_div(n, 128)
        table = {
            "dense": {"a": (m, k), "a_scale": (m, kb), "b": (n, k), "b_scale": (nb, kb), "out": (m, n)},
            "contiguous": {"a": (m, k), "a_scale": (m, kb), "b": (g, n, k), "b_scale": (g, nb, kb),
                           "m_indices": (m,), "out": (m, n)},
            "masked": {"a": (g, m, k), "a_scale": (g, m, kb), "b": (g, n, k), "b_scale": (g, nb, kb),
                       "masked_m": (g,), "out": (g, m, n)},
        }
        return table[self.layout][name]


def info(shape, dtype, strides=None, ptr=BASE_PTR, device=0) -> ArrayInfo:
    shape = tuple(shape)
    return ArrayInfo(shape, tuple(strides) if strides is not None else c_strides(shape), np.dtype(dtype), ptr,
                     device)


def valid_info(case: Case, name: str, slot: int, pad: int = 0, fp8=U8) -> ArrayInfo:
    """A valid description of argument `name` (`slot` gives each argument its own address)."""
    role, _ = SPEC[case.layout][name]
    shape = case.shape(name)
    ptr = BASE_PTR + slot * (1 << 32)
    if role == "a_scale":
        strides = aligned_strides(shape) if case.kind == "aligned" else c_strides(shape)
        return info(shape, F32, strides, ptr, case.device)
    if role in ("fp8", "out"):
        strides = list(c_strides(shape))
        if len(shape) == 2 or role == "fp8":
            strides[-2] = shape[-1] + pad
            if len(shape) == 3:
                strides[0] = shape[1] * strides[-2]
        return info(shape, fp8 if role == "fp8" else BF16, strides, ptr, case.device)
    return info(shape, {"b_scale": F32, "index": I32}[role], None, ptr, case.device)


@st.composite
def cases(draw, layout_name: str) -> Case:
    n = 8 * draw(st.integers(1, 160))
    k = 16 * draw(st.integers(1, 160))
    device = draw(st.sampled_from([0, 0, 1, 3]))
    kind = draw(st.sampled_from(["aligned", "rowmajor"]))
    if layout_name == "dense":
        m, g = draw(st.one_of(st.integers(0, 300), st.integers(1, 3000))), 1
    elif layout_name == "contiguous":
        m, g = 128 * draw(st.integers(0, 6)), draw(st.integers(1, 9))
    else:
        m, g = draw(st.integers(0, 400)), draw(st.integers(1, 9))
    case = Case(layout_name, m, n, k, g, device, {}, kind)
    padded = layout_name != "masked"
    for slot, name in enumerate(SPEC[layout_name]):
        role, _ = SPEC[layout_name][name]
        if role == "int":
            case.args[name] = draw(st.one_of(st.integers(1, 5000), st.integers(1, 100).map(np.int64)))
        elif name == "out" and draw(st.booleans()):
            case.args[name] = None
        else:
            unit = 16 if role == "fp8" else 8
            pad = unit * draw(st.integers(0, 3)) if (padded and role in ("fp8", "out") and
                                                     not (layout_name == "contiguous" and name == "b")) else 0
            case.args[name] = valid_info(case, name, slot, pad, draw(st.sampled_from([U8, I8])))
    return case


def check(case: Case):
    a = case.args
    if case.layout == "dense":
        return validation.check_dense(a["a"], a["a_scale"], a["b"], a["b_scale"], a["out"], case.device)
    if case.layout == "contiguous":
        return validation.check_contiguous(a["a"], a["a_scale"], a["b"], a["b_scale"], a["m_indices"], a["out"],
                                           case.device)
    return validation.check_masked(a["a"], a["a_scale"], a["b"], a["b_scale"], a["masked_m"], a["expected_m"],
                                   a["out"], case.device)


# ----------------------------------------------------------------------------- faults
# Each fault breaks one argument on its own: whatever the other arguments are (valid, or broken by
# faults of their own), the call must fail. A fault that changes a or b changes only what the rules
# check on a or b first (K, N, sum M, groups), so no other argument's rule fires before theirs.
def _nonempty(shape) -> bool:
    return 0 not in shape


def fault_kinds(case: Case, name: str) -> list[str]:
    role, rank = SPEC[case.layout][name]
    if role == "int":
        return ["expected_m_type", "expected_m_value"]
    shape = case.shape(name)
    kinds = ["not_array", "dtype", "ndim", "shape", "device"]
    nonempty = _nonempty(shape)
    if role in ("fp8", "out") and nonempty:
        kinds += ["strides", "misaligned"]
    elif role == "a_scale" and nonempty:
        if any(e > 1 for e in shape):
            kinds.append("strides")
        ptr = BASE_PTR + 4
        if not a_scale_ok(shape, aligned_strides(shape), ptr):
            kinds.append("misaligned")
    elif role == "b_scale" and nonempty:
        kinds.append("misaligned")
        if any(e > 1 for e in shape):
            kinds.append("strides")
    elif role == "index" and nonempty:
        kinds.append("misaligned")
        if shape[0] > 1:
            kinds.append("strides")
    return kinds


def _perturbed_shape(draw, shape: tuple) -> tuple:
    i = draw(st.integers(0, len(shape) - 1), label="dim")
    delta = draw(st.one_of(st.integers(-shape[i], 6), st.integers(7, 5000)).filter(lambda d: d != 0), label="delta")
    new = list(shape)
    new[i] += delta
    return tuple(new)


def _fp8_shape_fault(draw, case: Case, name: str, shape: tuple) -> tuple:
    options = ["k_bad"] if name == "a" else ["k_mismatch", "n_bad"]
    if name == "a" and case.layout == "contiguous":
        options.append("sum_m_bad")
    if case.layout != "dense" and (name == "b" or case.layout == "masked"):
        options.append("groups")
    what = draw(st.sampled_from(options), label="fp8 shape fault")
    new = list(shape)
    if what == "k_bad":
        new[-1] = draw(st.integers(0, 4000).filter(lambda v: v < 16 or v % 16), label="K")
    elif what == "k_mismatch":
        new[-1] = draw(st.integers(0, 4000).filter(lambda v: v != case.k), label="K")
    elif what == "n_bad":
        new[-2] = draw(st.integers(0, 4000).filter(lambda v: v < 8 or v % 8), label="N")
    elif what == "sum_m_bad":
        new[0] = draw(st.integers(1, 3000).filter(lambda v: v % 128), label="sum M")
    elif case.layout == "contiguous" or name == "a":
        new[0] = 0                                  # no groups at all
    else:
        new[0] = draw(st.integers(0, 12).filter(lambda v: v != case.g), label="G")
    return tuple(new)


def _fp8_or_out_strides(draw, case: Case, name: str, shape: tuple) -> tuple:
    """Strides (elements) that break the TMA operand rules (or, for the masked out, C-contiguity)."""
    role, rank = SPEC[case.layout][name]
    unit = 16 if role == "fp8" else 8                        # elements per 16 bytes
    rows, row_len = shape[-2], shape[-1]
    options = ["last", "row_unaligned"] + (["row_short"] if row_len > 1 else [])
    if rank == 3 and shape[0] > 1:
        options.append("group_gap")
    masked_out = case.layout == "masked" and name == "out"
    if masked_out:
        options.append("row_padded")
    what = draw(st.sampled_from(options), label="stride fault")
    row, last = row_len, 1
    group_delta = 0
    if what == "last":
        last = draw(st.sampled_from([0, 2, 3, 8, 16, row_len + 1]), label="last stride")
        assume(last != 1)
    elif what == "row_unaligned":
        row = row_len + draw(st.integers(1, 40).filter(lambda r: (row_len + r) % unit), label="row pad")
    elif what == "row_short":
        row = draw(st.integers(0, row_len - 1), label="row stride")
    elif what == "row_padded":
        row = row_len + unit * draw(st.integers(1, 4), label="row pad")
    else:
        group_delta = draw(st.one_of(st.integers(-rows * row_len, -1), st.integers(1, 5000)), label="gap")
    strides = [row, last] if rank == 2 else [rows * row + group_delta, row, last]
    return tuple(strides)


def apply_fault(case: Case, name: str, kind: str, draw):
    """Break case.args[name] by `kind` (parameters drawn with `draw`)."""
    role, rank = SPEC[case.layout][name]
    if kind == "expected_m_type":
        case.args[name] = draw(st.sampled_from(NOT_INTS), label="expected_m")
        return
    if kind == "expected_m_value":
        value = draw(st.one_of(st.integers(-(2 ** 63), 0), st.sampled_from([0, -1])), label="expected_m")
        case.args[name] = draw(st.sampled_from([int, np.int64, np.int32]))(max(value, -(2 ** 31)))
        return
    x = case.args[name]
    if x is None:                                            # out: materialize the valid one first
        x = valid_info(case, name, 99)
    shape = case.shape(name)
    if kind == "not_array":
        pool = [True, False, 0, 7, 1.5, "a", b"", [1, 2], (), {}, object(), tuple(x), x._asdict(),
                np.zeros(shape, dtype=x.dtype), np.float32(1), dataclasses.replace]
        if name != "out":
            pool.append(None)
        case.args[name] = draw(st.sampled_from(pool), label="non-array")
    elif kind == "dtype":
        allowed = ROLE_DTYPES[role]
        case.args[name] = x._replace(dtype=draw(st.sampled_from([d for d in CPU_DTYPE_POOL if d not in allowed]),
                                                label="dtype"))
    elif kind == "ndim":
        r = draw(st.sampled_from([r for r in range(5) if r != rank]), label="rank")
        if r > rank:
            new = (1,) * (r - rank) + shape
        elif r == 0:
            new = ()
        else:
            new = (math.prod(shape[:rank - r + 1]),) + shape[rank - r + 1:]
        case.args[name] = info(new, x.dtype, None, x.ptr, x.device)
    elif kind == "shape":
        if role == "fp8":
            new = _fp8_shape_fault(draw, case, name, shape)
        else:
            new = _perturbed_shape(draw, shape)
        assert new != shape
        case.args[name] = info(new, x.dtype, None, x.ptr, x.device)
    elif kind == "device":
        case.args[name] = x._replace(device=draw(st.integers(-1, 7).filter(lambda d: d != case.device),
                                                 label="device"))
    elif kind == "strides":
        if role in ("fp8", "out"):
            strides = _fp8_or_out_strides(draw, case, name, shape)
        elif role == "a_scale":
            strides = tuple(draw(st.integers(-3, 3 * math.prod(shape) + 8), label=f"stride {i}")
                            for i in range(rank))
            assume(not a_scale_ok(shape, strides, x.ptr))
        elif role == "b_scale":
            c = list(c_strides(shape))
            i = draw(st.sampled_from([i for i, e in enumerate(shape) if e > 1]), label="dim")
            c[i] += draw(st.integers(-c[i] - 2, 2000).filter(lambda d: d != 0), label="delta")
            strides = tuple(c)
        else:
            strides = (draw(st.sampled_from([0, 2, 3, -1, 128]), label="stride"),)
        case.args[name] = ArrayInfo(shape, strides, x.dtype, x.ptr, x.device)
    elif kind == "misaligned":
        if role in ("fp8", "out"):
            case.args[name] = x._replace(ptr=x.ptr + draw(st.integers(1, 15), label="offset"))
        elif role == "a_scale":
            ptr = x.ptr + 4 * draw(st.integers(1, 3), label="offset")
            assert not a_scale_ok(shape, aligned_strides(shape), ptr)
            case.args[name] = ArrayInfo(shape, aligned_strides(shape), x.dtype, ptr, x.device)
        else:
            case.args[name] = x._replace(ptr=x.ptr + draw(st.integers(1, 3), label="offset"))
    else:
        raise AssertionError(kind)


def assert_names(exc: BaseException, names) -> None:
    msg = str(exc)
    assert any(msg.startswith(f"{n} ") for n in names), f"message does not start with one of {sorted(names)}: {msg!r}"


CPU_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
LAYOUTS = sorted(SPEC)


ARRAY_FAULTS = ("not_array", "dtype", "ndim", "shape", "device", "strides", "misaligned")
ONE_FAULT = [(layout_name, name, kind) for layout_name in LAYOUTS for name, (role, _) in SPEC[layout_name].items()
             for kind in (("expected_m_type", "expected_m_value") if role == "int" else ARRAY_FAULTS)]


@pytest.mark.parametrize("layout_name, name, kind", ONE_FAULT)
@settings(CPU_SETTINGS, max_examples=25)
@given(data=st.data())
def test_cpu_one_bad_argument(layout_name, name, kind, data, case_counter):
    """Every (entry point, argument, kind of fault) on its own, over generated problems."""
    case = data.draw(cases(layout_name), label="valid case")
    check(case)                                              # the unbroken case passes
    assume(kind in fault_kinds(case, name))                 # e.g. no stride rule for an empty array
    apply_fault(case, name, kind, data.draw)
    case_counter[f"cpu {FUNCTION[layout_name]}"] += 1
    with pytest.raises(TypeError if kind in TYPE_FAULTS else ValueError) as caught:
        check(case)
    assert_names(caught.value, {name})


@pytest.mark.parametrize("layout_name", LAYOUTS)
@CPU_SETTINGS
@given(data=st.data())
def test_cpu_several_bad_arguments(layout_name, data, case_counter):
    case = data.draw(cases(layout_name), label="valid case")
    names = data.draw(st.lists(st.sampled_from(sorted(case.args)), min_size=2, max_size=4, unique=True),
                      label="arguments")
    kinds = {}
    for name in names:
        kinds[name] = data.draw(st.sampled_from(fault_kinds(case, name)), label=f"fault of {name}")
        apply_fault(case, name, kinds[name], data.draw)
    case_counter[f"cpu {FUNCTION[layout_name]}"] += 1
    with pytest.raises((TypeError, ValueError)) as caught:
        check(case)
    assert_names(caught.value, set(names))
    culprit = str(caught.value).split(" ", 1)[0]
    assert isinstance(caught.value, TypeError) == (kinds[culprit] in TYPE_FAULTS), (kinds, str(caught.value))


# ----------------------------------------------------------------------------- CPU tier: public functions
NON_ARRAYS = [None, True, 0, 3.5, "a", b"x", [[1, 2]], (1, 2), {}, object(), np.zeros((4, 128), np.float32),
              np.zeros((4, 128), np.uint8), np.float32(1), np.zeros((), np.float32)]


@pytest.mark.parametrize("bad", NON_ARRAYS, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("fn, name", [
    (cugemm8.matmul, "a"), (cugemm8.m_grouped_matmul_contiguous, "a"), (cugemm8.m_grouped_matmul_masked, "a"),
    (cugemm8.per_token_cast_to_fp8, "x"), (cugemm8.per_block_cast_to_fp8, "w"),
    (cugemm8.get_col_major_tma_aligned_tensor, "x")], ids=lambda v: getattr(v, "__name__", v))
def test_cpu_public_functions_reject_non_arrays(fn, name, bad, case_counter):
    """No GPU is needed to refuse a non-array first argument (later arguments need real arrays to
    get that far: the GPU tier covers them)."""
    if bad is None and fn in (cugemm8.matmul, cugemm8.m_grouped_matmul_contiguous, cugemm8.m_grouped_matmul_masked):
        pytest.skip("a=None gets past the array conversion (out may be None) and is refused by the checks, "
                    "which need the current device: GPU tier")
    case_counter[f"cpu {fn.__name__}"] += 1
    args = {"matmul": (bad, None, None, None), "m_grouped_matmul_contiguous": (bad, None, None, None, None),
            "m_grouped_matmul_masked": (bad, None, None, None, None, 8)}.get(fn.__name__, (bad,))
    with pytest.raises(TypeError) as caught:
        fn(*args)
    assert_names(caught.value, {name})


@settings(max_examples=200, deadline=None)
@given(bad=st.one_of(st.sampled_from(NOT_INTS), st.integers(-(2 ** 70), 0), st.integers(-5, 0).map(np.int64)))
def test_cpu_check_expected_m(bad, case_counter):
    case_counter["cpu check_expected_m"] += 1
    is_int = isinstance(bad, (int, np.integer)) and not isinstance(bad, (bool, np.bool_))
    with pytest.raises(ValueError if is_int else TypeError) as caught:
        validation.check_expected_m(bad)
    assert_names(caught.value, {"expected_m"})


@settings(max_examples=100, deadline=None)
@given(x=st.integers(0, 10 ** 6), size=st.sampled_from([1, 2, 4, 8, 16]))
def test_cpu_get_tma_aligned_size_valid(x, size):
    got = layout.get_tma_aligned_size(x, size)
    assert type(got) is int and got >= x and (got * size) % 16 == 0 and got - x < 16 // size


@settings(max_examples=200, deadline=None)
@given(size=st.integers(-64, 64).filter(lambda s: s <= 0 or 16 % s), x=st.integers(0, 10 ** 6))
def test_cpu_get_tma_aligned_size_bad_element_size_value(size, x, case_counter):
    case_counter["cpu get_tma_aligned_size"] += 1
    with pytest.raises(ValueError) as caught:
        layout.get_tma_aligned_size(x, size)
    assert_names(caught.value, {"element_size"})


GAP = ("get_tma_aligned_size checks neither x nor element_size's type (floats and bools go through, "
       "a negative x gives a negative size, a str or None fails with an unrelated TypeError): "
       "cugemm8/layout.py, for the lead")


@pytest.mark.parametrize("x, size, name, exc", [
    (-1, 4, "x", ValueError), (-100, 1, "x", ValueError), (1.5, 4, "x", TypeError), (True, 4, "x", TypeError),
    ("8", 4, "x", TypeError), (None, 4, "x", TypeError), (8, 4.0, "element_size", TypeError),
    (8, True, "element_size", TypeError), (8, None, "element_size", TypeError), (8, "4", "element_size", TypeError),
], ids=repr)
def test_cpu_get_tma_aligned_size_bad_types(x, size, name, exc, case_counter):
    case_counter["cpu get_tma_aligned_size"] += 1
    with pytest.raises(exc) as caught:
        layout.get_tma_aligned_size(x, size)
    assert_names(caught.value, {name})


@pytest.fixture
def fake_device(monkeypatch):
    """set_num_sms/get_num_sms against a made-up 132-SM device 0 (no GPU needed)."""
    props = {"name": "fake", "cc": (9, 0), "num_sms": 132, "smem_optin": 232448}
    monkeypatch.setattr(runtime, "device_properties", lambda device: props)
    monkeypatch.setattr(runtime, "_num_sms_override", {})
    return props


BAD_NUM_SMS = [(True, TypeError), (False, TypeError), (1.0, TypeError), (66.5, TypeError), (float("nan"), TypeError),
               (None, TypeError), ("8", TypeError), ([8], TypeError), (0, ValueError), (-1, ValueError),
               (-132, ValueError), (133, ValueError), (10 ** 9, ValueError)]


@pytest.mark.parametrize("bad, exc", BAD_NUM_SMS, ids=repr)
def test_cpu_set_num_sms(fake_device, bad, exc, case_counter):
    case_counter["cpu set_num_sms"] += 1
    runtime.set_num_sms(7, device=0)                          # control
    assert runtime.get_num_sms(0) == 7
    with pytest.raises(exc) as caught:
        cugemm8.set_num_sms(bad, device=0)
    assert_names(caught.value, {"num_sms"})
    assert runtime.get_num_sms(0) == 7, "a refused value must not change the setting"


def test_cpu_fault_generator_controls():
    """The generator's building blocks: a valid case passes, and every fault kind is reachable."""
    case = Case("masked", 70, 136, 272, 3, 0, {}, "aligned")
    for slot, name in enumerate(SPEC["masked"]):
        case.args[name] = 40 if name == "expected_m" else valid_info(case, name, slot)
    assert check(case) == (70, 136, 272, 3, "aligned")
    kinds = {k for name in case.args for k in fault_kinds(case, name)}
    assert kinds == {"not_array", "dtype", "ndim", "shape", "device", "strides", "misaligned", "expected_m_type",
                     "expected_m_value"}
    assert a_scale_ok((70, 3), (1, 72), BASE_PTR) and a_scale_ok((70, 3), (3, 1), BASE_PTR + 4)
    assert not a_scale_ok((70, 3), (1, 72), BASE_PTR + 4) and not a_scale_ok((70, 3), (1, 70), BASE_PTR)
    assert a_scale_ok((70, 1), (1, 5), BASE_PTR + 4)          # KB = 1: both layouts are the same


MALFORMED_INTERFACES = [{}, {"shape": (2, 2)}, {"shape": (2, 2), "typestr": "|u1", "version": 3}]


@pytest.mark.parametrize("interface", MALFORMED_INTERFACES, ids=repr)
def test_cpu_malformed_cuda_array_interface(interface, case_counter):
    case_counter["cpu as_device_array"] += 1

    class Foreign:
        __cuda_array_interface__ = interface

    with pytest.raises(TypeError) as caught:
        arrays.as_device_array(Foreign(), "b_scale")
    assert_names(caught.value, {"b_scale"})


# ============================================================================= GPU tier
GPU_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _device_count() -> int:
    try:
        return cupy.cuda.runtime.getDeviceCount() if has_hopper() else 0
    except Exception:
        return 0


def gpu_fault_kinds(case: Case, name: str) -> list[str]:
    """fault_kinds that real arrays can show: another device only with 2 GPUs; a float32/int32
    CuPy array is always 4-byte aligned (misaligned scales and index arrays: CPU tier only)."""
    role, _ = SPEC[case.layout][name]
    return [k for k in fault_kinds(case, name)
            if not (k == "device" and _device_count() < 2)
            and not (k == "misaligned" and role in ("b_scale", "index"))]


class Buffers:
    """Every device buffer one case makes, filled with 0xFF; `untouched()` says none was written."""

    def __init__(self):
        self.raw = []

    def array(self, shape, dtype, strides=None, byte_offset=0, device=None):
        """A cupy.ndarray view (element strides; non-negative) over a fresh 0xFF buffer."""
        dtype = np.dtype(dtype)
        shape = tuple(shape)
        strides = c_strides(shape) if strides is None else tuple(strides)
        assert all(s >= 0 for s in strides)
        span = 0 if 0 in shape else (sum((e - 1) * s for e, s in zip(shape, strides)) + 1) * dtype.itemsize
        dev = cupy.cuda.runtime.getDevice() if device is None else device
        with cupy.cuda.Device(dev):
            buf = cupy.full(span + byte_offset + 16, 0xFF, dtype=cupy.uint8)
        self.raw.append(buf)
        return cupy.ndarray(shape, dtype, memptr=buf.data + byte_offset,
                            strides=tuple(s * dtype.itemsize for s in strides))

    def untouched(self) -> bool:
        for buf in self.raw:
            with cupy.cuda.Device(buf.device.id):
                cupy.cuda.Device().synchronize()
                if not bool((buf == 0xFF).all()):
                    return False
        return True


def gpu_valid(case: Case, name: str, bufs: Buffers, device=None):
    role, _ = SPEC[case.layout][name]
    if role == "int":
        return case.args[name]
    shape = case.shape(name)
    dtype = {"fp8": U8, "a_scale": F32, "b_scale": F32, "index": I32, "out": BF16}[role]
    strides = aligned_strides(shape) if (role == "a_scale" and case.kind == "aligned") else None
    if strides is not None and 0 in shape:
        strides = None
    return bufs.array(shape, dtype, strides, device=device)


def gpu_fault(case: Case, name: str, kind: str, draw, bufs: Buffers):
    """A real CuPy (or host) object for argument `name` broken by `kind`."""
    role, rank = SPEC[case.layout][name]
    if kind in ("expected_m_type", "expected_m_value"):
        apply_fault(case, name, kind, draw)
        return case.args[name]
    shape = case.shape(name)
    dtype = {"fp8": U8, "a_scale": F32, "b_scale": F32, "index": I32, "out": BF16}[role]
    if kind == "not_array":
        pool = [True, False, 0, 7, 1.5, "a", [[0]], (), {}, object(), np.full(shape, 0xFF, dtype=np.uint8),
                np.zeros(shape, dtype=np.float32), np.float32(1)]
        if name != "out":
            pool.append(None)
        return draw(st.sampled_from(pool), label="non-array")
    if kind == "dtype":
        return bufs.array(shape, draw(st.sampled_from([d for d in GPU_DTYPE_POOL if d not in ROLE_DTYPES[role]]),
                                      label="dtype"))
    if kind in ("ndim", "shape"):
        scratch = Case(case.layout, case.m, case.n, case.k, case.g, case.device,
                       {name: info(shape, dtype)}, case.kind)
        apply_fault(scratch, name, kind, draw)
        new = scratch.args[name].shape
        assume(all(e >= 0 for e in new) and math.prod(new) <= 1 << 24)
        return bufs.array(new, dtype)
    if kind == "device":
        return gpu_valid(case, name, bufs, device=1 if case.device == 0 else 0)
    if kind == "strides":
        if role in ("fp8", "out"):
            strides = _fp8_or_out_strides(draw, case, name, shape)
            assume(all(s >= 0 for s in strides))
        elif role == "a_scale":
            strides = tuple(draw(st.integers(0, 3 * math.prod(shape) + 8), label=f"stride {i}") for i in range(rank))
            assume(not a_scale_ok(shape, strides, 0))
        elif role == "b_scale":
            c = list(c_strides(shape))
            i = draw(st.sampled_from([i for i, e in enumerate(shape) if e > 1]), label="dim")
            c[i] += draw(st.integers(-c[i], 2000).filter(lambda d: d != 0), label="delta")
            strides = tuple(c)
        else:
            strides = (draw(st.sampled_from([0, 2, 3, 128]), label="stride"),)
        return bufs.array(shape, dtype, strides)
    if kind == "misaligned":
        if role in ("fp8", "out"):
            offset = draw(st.integers(1, 15), label="byte offset")
            assume(offset % dtype.itemsize == 0)
            return bufs.array(shape, dtype, byte_offset=offset)
        if role == "a_scale":
            return bufs.array(shape, dtype, aligned_strides(shape), byte_offset=4 * draw(st.integers(1, 3)))
    raise AssertionError(kind)


def call_public(case: Case, args: dict, stream=None):
    kw = {"out": args.get("out")}
    if stream is not None:
        kw["stream"] = stream
    if case.layout == "dense":
        return cugemm8.matmul(args["a"], args["a_scale"], args["b"], args["b_scale"], **kw)
    if case.layout == "contiguous":
        return cugemm8.m_grouped_matmul_contiguous(args["a"], args["a_scale"], args["b"], args["b_scale"],
                                                   args["m_indices"], **kw)
    return cugemm8.m_grouped_matmul_masked(args["a"], args["a_scale"], args["b"], args["b_scale"], args["masked_m"],
                                           args["expected_m"], **kw)


# A few fixed problems (a new shape is a new kernel to compile for the control call).
GPU_BASES = {
    "dense": [Case("dense", 130, 136, 272, 1, 0, {}, ""), Case("dense", 1, 8, 16, 1, 0, {}, "")],
    "contiguous": [Case("contiguous", 256, 64, 144, 3, 0, {}, "")],
    "masked": [Case("masked", 70, 64, 144, 3, 0, {"expected_m": 40}, ""),
               Case("masked", 1, 8, 16, 1, 0, {"expected_m": 1}, "")],
}
_controls_done: set = set()


@pytest.fixture(scope="module")
def launch_spy():
    """Records every GEMM launch and every a_scale conversion (both still run)."""
    calls = []
    real_launch = fp8_gemm.GemmLauncher.launch
    real_convert = api.get_col_major_tma_aligned_tensor
    real_kernel = quantize._kernel

    def launch(self, *args, **kwargs):
        calls.append("GemmLauncher.launch")
        return real_launch(self, *args, **kwargs)

    def convert(x):
        calls.append("a_scale conversion")
        return real_convert(x)

    def kernel(name):
        calls.append(f"quantize kernel {name}")
        return real_kernel(name)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(fp8_gemm.GemmLauncher, "launch", launch)
        m.setattr(api, "get_col_major_tma_aligned_tensor", convert)
        m.setattr(quantize, "_kernel", kernel)
        yield calls


def _gpu_case(layout_name: str, data) -> tuple[Case, dict, Buffers]:
    base = data.draw(st.sampled_from(range(len(GPU_BASES[layout_name]))), label="base problem")
    proto = GPU_BASES[layout_name][base]
    case = dataclasses.replace(proto, args=dict(proto.args), kind=data.draw(st.sampled_from(["aligned", "rowmajor"])))
    key = (layout_name, base, case.kind)
    if key not in _controls_done:                            # the unbroken problem runs
        bufs = Buffers()
        call_public(case, {name: gpu_valid(case, name, bufs) for name in SPEC[layout_name]})
        cupy.cuda.Device().synchronize()
        _controls_done.add(key)
    bufs = Buffers()
    args = {name: gpu_valid(case, name, bufs) for name in SPEC[layout_name]}
    return case, args, bufs


def _expect_refused(case, args, bufs, names, exc_type, launch_spy, stream=None):
    prepared = set(api._prepared)
    launch_spy.clear()
    with pytest.raises(exc_type) as caught:
        call_public(case, args, stream)
    assert_names(caught.value, names)
    assert launch_spy == [], f"work was launched before the error: {launch_spy}"
    assert set(api._prepared) == prepared, "a refused call must not prepare a launch"
    assert bufs.untouched(), "a buffer of the call (out= included) was written"
    return caught.value


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("layout_name", LAYOUTS)
@GPU_SETTINGS
@given(data=st.data())
def test_gpu_one_bad_argument(layout_name, data, launch_spy, case_counter):
    case, args, bufs = _gpu_case(layout_name, data)
    names = sorted(SPEC[layout_name])
    name = data.draw(st.sampled_from(names), label="argument")
    kind = data.draw(st.sampled_from(gpu_fault_kinds(case, name)), label="fault")
    args[name] = gpu_fault(case, name, kind, data.draw, bufs)
    case_counter[f"gpu {FUNCTION[layout_name]}"] += 1
    _expect_refused(case, args, bufs, {name}, TypeError if kind in TYPE_FAULTS else ValueError, launch_spy)


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("layout_name", LAYOUTS)
@GPU_SETTINGS
@given(data=st.data())
def test_gpu_several_bad_arguments(layout_name, data, launch_spy, case_counter):
    case, args, bufs = _gpu_case(layout_name, data)
    names = data.draw(st.lists(st.sampled_from(sorted(SPEC[layout_name])), min_size=2, max_size=3, unique=True))
    for name in names:
        kind = data.draw(st.sampled_from(gpu_fault_kinds(case, name)), label=f"fault of {name}")
        args[name] = gpu_fault(case, name, kind, data.draw, bufs)
    case_counter[f"gpu {FUNCTION[layout_name]}"] += 1
    _expect_refused(case, args, bufs, set(names), (TypeError, ValueError), launch_spy)


BAD_STREAMS = ["stream", 1.5, True, False, object(), [0], cupy.cuda.Stream]   # the class, not a stream


def _bad_stream_case(kind: str):
    """A dense problem whose signature is already prepared (the stream is checked at launch time)."""
    case = dataclasses.replace(GPU_BASES["dense"][0], kind=kind, args={})
    call_public(case, {name: gpu_valid(case, name, Buffers()) for name in SPEC["dense"]})
    cupy.cuda.Device().synchronize()
    bufs = Buffers()
    return case, {name: gpu_valid(case, name, bufs) for name in SPEC["dense"]}, bufs


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("bad", BAD_STREAMS, ids=repr)
@pytest.mark.parametrize("kind", ["aligned", "rowmajor"])   # row-major: the conversion must not run either
def test_gpu_bad_stream(kind, bad, launch_spy, case_counter):
    case, args, bufs = _bad_stream_case(kind)
    case_counter["gpu matmul"] += 1
    _expect_refused(case, args, bufs, {"stream"}, TypeError, launch_spy, stream=bad)


QUANTIZER_FAULTS = [("dtype", np.int32), ("dtype", np.float64), ("dtype", np.uint8), ("dtype", np.bool_),
                    ("dtype", np.complex64), ("ndim", 1), ("ndim", 4), ("ndim", 0), ("not_array", None),
                    ("not_array", "host")]


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("fault, value", QUANTIZER_FAULTS, ids=repr)
@pytest.mark.parametrize("fn, name, ok_dtype", [(cugemm8.per_token_cast_to_fp8, "x", np.float32),
                                                (cugemm8.per_block_cast_to_fp8, "w", np.float32),
                                                (cugemm8.get_col_major_tma_aligned_tensor, "x", np.float32)],
                         ids=lambda v: getattr(v, "__name__", None))
def test_gpu_quantizers_and_layout_helper(fn, name, ok_dtype, fault, value, launch_spy, case_counter):
    bufs = Buffers()
    fn(bufs.array((3, 256), ok_dtype))                         # control
    cupy.cuda.Device().synchronize()
    bufs = Buffers()
    if fault == "dtype":
        x = bufs.array((3, 256), value)
    elif fault == "ndim":
        x = bufs.array({0: (), 1: (256,), 4: (1, 1, 3, 256)}[value], ok_dtype)
    else:
        x = np.zeros((3, 256), np.float32) if value == "host" else value
    case_counter[f"gpu {fn.__name__}"] += 1
    launch_spy.clear()
    with pytest.raises(TypeError if fault in ("dtype", "not_array") else ValueError) as caught:
        fn(x)
    assert_names(caught.value, {name})
    assert launch_spy == [] and bufs.untouched()


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("bad, exc", BAD_NUM_SMS, ids=repr)
def test_gpu_set_num_sms(bad, exc, case_counter):
    case_counter["gpu set_num_sms"] += 1
    before = cugemm8.get_num_sms()
    total = runtime.device_properties(cupy.cuda.runtime.getDevice())["num_sms"]
    if isinstance(bad, int) and not isinstance(bad, bool) and 0 < bad <= total:
        pytest.skip(f"{bad} SMs is valid here")
    with pytest.raises(exc) as caught:
        cugemm8.set_num_sms(bad)
    assert_names(caught.value, {"num_sms"})
    assert cugemm8.get_num_sms() == before


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("device", ["count", -1, True, "0", 1.5], ids=repr)
@pytest.mark.parametrize("which", ["set", "get"])
def test_gpu_num_sms_bad_device(which, device, case_counter, monkeypatch):
    monkeypatch.setattr(runtime, "_num_sms_override", dict(runtime._num_sms_override))
    case_counter["gpu set_num_sms"] += 1
    if device == "count":
        device = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises((TypeError, ValueError)) as caught:
        if which == "set":
            cugemm8.set_num_sms(1, device=device)
        else:
            cugemm8.get_num_sms(device)
    assert_names(caught.value, {"device"})

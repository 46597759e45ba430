"""CPU tier of the malformed-argument tests: each must raise TypeError or ValueError that names the
argument.

Hypothesis builds a valid problem description (``ArrayInfo`` per argument), checks that it passes,
then breaks one argument (or several) in one of many ways -- not an array, dtype, rank, shape,
strides, base alignment, device, ``expected_m`` -- and feeds it to the pure ``validation.check_*``
function. The message must start with the broken argument's name (the validation module's
convention). The public functions are called directly where no GPU is needed. Every case tried is
counted (``case_counter``, printed in the terminal summary).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cugemm8
from array_infos import BASE_PTR
from bad_cases import (BAD_NUM_SMS, FUNCTION, LAYOUTS, NOT_INTS, SPEC, TYPE_FAULTS, Case, a_scale_ok, apply_fault,
                       assert_names, cases, check, fault_kinds, valid_info)
from cugemm8 import arrays, layout, runtime, validation

CPU_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


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


@pytest.mark.parametrize("bad, exc", BAD_NUM_SMS, ids=repr)
def test_cpu_set_num_sms(fake_device, bad, exc, case_counter):
    case_counter["cpu set_num_sms"] += 1
    runtime.set_num_sms(7, device=0)                          # control
    assert runtime.get_num_sms(0) == 7
    with pytest.raises(exc) as caught:
        cugemm8.set_num_sms(bad, device=0)
    assert_names(caught.value, {"num_sms"})
    assert runtime.get_num_sms(0) == 7, "a refused value must not change the setting"


@pytest.mark.parametrize("bad", [1, 0, None, "yes", 1.0], ids=repr)
def test_cpu_set_pdl(bad, case_counter):
    case_counter["cpu set_pdl"] += 1
    assert cugemm8.get_pdl() is False
    with pytest.raises(TypeError) as caught:
        cugemm8.set_pdl(bad)
    assert_names(caught.value, {"enabled"})
    assert cugemm8.get_pdl() is False, "a refused value must not change the setting"


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

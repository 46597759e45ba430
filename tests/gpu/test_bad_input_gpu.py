"""GPU tier of the malformed-argument tests (Hopper only): the faults of tests/bad_cases.py built from
real CuPy arrays and passed to the public functions. Every buffer of a case is filled with 0xFF
before the call and must still be after it (a valid ``out=`` is passed whenever another argument is
broken); no GemmLauncher.launch, no a_scale conversion and no new prepared signature may result.
Every case tried is counted (``case_counter``, printed in the terminal summary).
"""
from __future__ import annotations

import dataclasses
import math

import cupy
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cugemm8
from array_infos import aligned_strides, c_strides, info
from bad_cases import (BAD_NUM_SMS, BF16, F32, FUNCTION, GPU_DTYPE_POOL, I32, LAYOUTS, ROLE_DTYPES, SPEC,
                       TYPE_FAULTS, U8, Case, a_scale_ok, apply_fault, assert_names, fault_kinds, fp8_or_out_strides)
from cugemm8 import api, fp8_gemm, quantize, runtime
from hopper import has_hopper, requires_hopper

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
            strides = fp8_or_out_strides(draw, case, name, shape)
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

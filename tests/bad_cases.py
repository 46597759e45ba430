"""Malformed arguments for the public functions, shared by the CPU tier (tests/unit/test_bad_input.py:
ArrayInfo descriptions fed to the pure checks) and the GPU tier (tests/gpu/test_bad_input_gpu.py: real
arrays fed to the public functions): the valid problems, the faults that break one argument, and
the rule that every message starts with the broken argument's name."""
from __future__ import annotations

import dataclasses
import decimal
import fractions
import math

import ml_dtypes
import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from array_infos import BASE_PTR, aligned_strides, c_strides, ceil_div, info
from cugemm8 import validation
from cugemm8.heuristics import CONTIGUOUS_M_ALIGNMENT
from cugemm8.arrays import ArrayInfo

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

NOT_INTS = [True, False, 1.0, 2.5, float("nan"), float("inf"), None, "8", b"8", [8], (8,), {"m": 8}, 8 + 0j,
            np.float32(8), np.float64(8), np.bool_(True), decimal.Decimal(8), fractions.Fraction(8, 1), object()]


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
        new[-1] = draw(st.integers(1, 4000).filter(lambda v: v % 16), label="K")  # K = 0 is valid
    elif what == "k_mismatch":
        new[-1] = draw(st.integers(0, 4000).filter(lambda v: v != case.k), label="K")
    elif what == "n_bad":
        new[-2] = draw(st.integers(1, 4000).filter(lambda v: v % 8), label="N")  # N = 0 is valid
    elif what == "sum_m_bad":
        new[0] = draw(st.integers(1, 3000).filter(lambda v: v % CONTIGUOUS_M_ALIGNMENT), label="sum M")
    elif case.layout == "contiguous" or name == "a":
        new[0] = 0                                  # no groups at all
    else:
        new[0] = draw(st.integers(0, 12).filter(lambda v: v != case.g), label="G")
    return tuple(new)


def fp8_or_out_strides(draw, case: Case, name: str, shape: tuple) -> tuple:
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
            strides = fp8_or_out_strides(draw, case, name, shape)
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


LAYOUTS = sorted(SPEC)

BAD_NUM_SMS = [(True, TypeError), (False, TypeError), (1.0, TypeError), (66.5, TypeError), (float("nan"), TypeError),
               (None, TypeError), ("8", TypeError), ([8], TypeError), (0, ValueError), (-1, ValueError),
               (-132, ValueError), (133, ValueError), (10 ** 9, ValueError)]

"""GPU tier: numerics and safety off the happy path (skipped without a Hopper GPU).

* NaN/Inf in one scale or one e4m3 NaN byte (0x7F / 0xFF) in a payload reaches exactly the outputs
  that depend on it, as NaN (non-finite for an infinite scale); every other output is bitwise the
  clean run's; the kernel finishes.
* Determinism: the same call twice, and the same configuration under different SM caps
  (``set_num_sms``, i.e. another grid), give bitwise equal results.
* Out-of-range device data (the README's "Reliability" rules): ``masked_m`` is clamped to
  [0, max_m]; a contiguous tile whose first row's expert id is negative or >= G is padding (zeros);
  inside a valid tile, rows with a negative id are zeros (rows with another id use the tile's
  expert). Nothing is written outside ``out`` (it sits inside a poisoned buffer, with padded rows
  where the layout allows them).
* Several GPUs: a call on device 1 gives device 0's result bitwise.
"""
from __future__ import annotations

import cupy
import numpy as np
import pytest

from hopper import requires_hopper
from problems import POISON, Guarded, as_float, contiguous_indices, finish, quantized

import cugemm8
from cugemm8 import fp8_gemm, heuristics, runtime
from cugemm8.reference import REL_TOLERANCE, max_rel_error, reference_grouped_contiguous

pytestmark = [pytest.mark.gpu, requires_hopper]


# ----------------------------------------------------------------------------- helpers
def quantized_dense(m, n, k, seed):
    return quantized((m, k), (n, k), seed)


def quantized_contiguous(m, groups, n, k, seed):
    return quantized((m, k), (groups, n, k), seed)


def quantized_masked(groups, max_m, n, k, seed):
    return quantized((groups, max_m, k), (groups, n, k), seed)


def dense(a, sa, b, sb) -> np.ndarray:
    """matmul into a guarded `out` with padded rows; returns the result's bits."""
    g = Guarded((a.shape[0], b.shape[0]), pad=24)
    cugemm8.matmul(a, sa, b, sb, out=g.out)
    finish("matmul")
    assert g.intact(), "matmul wrote outside out"
    return g.bits()


def contiguous(a, sa, b, sb, idx) -> np.ndarray:
    g = Guarded((a.shape[0], b.shape[1]), pad=40)
    cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, cupy.asarray(np.asarray(idx, np.int32)), out=g.out)
    finish("m_grouped_matmul_contiguous")
    assert g.intact(), "m_grouped_matmul_contiguous wrote outside out"
    return g.bits()


def masked(a, sa, b, sb, masked_m, expected_m) -> np.ndarray:
    g = Guarded((a.shape[0], a.shape[1], b.shape[1]))
    cugemm8.m_grouped_matmul_masked(a, sa, b, sb, cupy.asarray(np.asarray(masked_m, np.int32)), expected_m,
                                    out=g.out)
    finish("m_grouped_matmul_masked")
    assert g.intact(), "m_grouped_matmul_masked wrote outside out"
    return g.bits()


def with_value(x, index, value):
    """A copy of x with one element replaced; an A-scale in the kernel's (M-major) layout stays so."""
    y = x.copy()
    y[index] = value
    if x.dtype == cupy.float32 and x.ndim >= 2 and x.shape[-2] > 1 and x.strides[-2] == 4:
        y = cugemm8.get_col_major_tma_aligned_tensor(y)
        assert y.strides == x.strides
    return y


def assert_only(got: np.ndarray, clean: np.ndarray, affected: np.ndarray, value: str) -> None:
    """`affected` outputs NaN (non-finite for an infinite input); all others bitwise `clean`."""
    assert affected.any() and got.shape == clean.shape == affected.shape
    same = got[~affected] == clean[~affected]
    assert same.all(), f"{int((~same).sum())} outputs that do not depend on the bad value changed"
    vals = as_float(got[affected])
    if value == "nan":
        assert np.isnan(vals).all(), f"{int((~np.isnan(vals)).sum())} of {vals.size} affected outputs are not NaN"
    else:
        assert (~np.isfinite(vals)).all(), f"{int(np.isfinite(vals).sum())} of {vals.size} affected outputs are finite"


VALUES = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


# ----------------------------------------------------------------------------- NaN / Inf
DENSE_M, DENSE_N, DENSE_K = 200, 392, 512   # M: no BLOCK_M divides it; N: 3 full 128-column scale blocks
                                             # and a partial one; K: 4 k-blocks


@pytest.mark.parametrize("value", sorted(VALUES))
@pytest.mark.parametrize("where", ["a_scale", "b_scale"])
def test_dense_non_finite_scale(where, value):
    m, n, k = DENSE_M, DENSE_N, DENSE_K
    a, sa, b, sb = quantized_dense(m, n, k, seed=11)
    clean = dense(a, sa, b, sb)
    assert np.isfinite(as_float(clean)).all()
    rng = np.random.default_rng(5)
    for _ in range(3):
        kb = int(rng.integers(0, k // 128))
        affected = np.zeros((m, n), bool)
        if where == "a_scale":
            i = int(rng.integers(0, m))
            got = dense(a, with_value(sa, (i, kb), VALUES[value]), b, sb)
            affected[i, :] = True                              # the row, every column
        else:
            j = int(rng.integers(0, -(-n // 128)))
            got = dense(a, sa, b, with_value(sb, (j, kb), VALUES[value]))
            affected[:, 128 * j:128 * (j + 1)] = True          # every row, that 128-column block
        assert_only(got, clean, affected, value)


@pytest.mark.parametrize("code", [0x7F, 0xFF])
@pytest.mark.parametrize("where", ["a", "b"])
def test_dense_nan_payload(where, code):
    m, n, k = DENSE_M, DENSE_N, DENSE_K
    a, sa, b, sb = quantized_dense(m, n, k, seed=12)
    clean = dense(a, sa, b, sb)
    rng = np.random.default_rng(code)
    for _ in range(3):
        affected = np.zeros((m, n), bool)
        c = int(rng.integers(0, k))
        if where == "a":
            i = int(rng.integers(0, m))
            got = dense(with_value(a, (i, c), code), sa, b, sb)
            affected[i, :] = True
        else:
            j = int(rng.integers(0, n))
            got = dense(a, sa, with_value(b, (j, c), code), sb)
            affected[:, j] = True
        assert_only(got, clean, affected, "nan")


@pytest.mark.parametrize("where", ["b_scale", "a_scale", "a", "b", "a_padding_row"])
def test_contiguous_nan_stays_in_its_expert(where):
    n, k = 264, 256
    idx = contiguous_indices([100, 0, 200, 37])
    a, sa, b, sb = quantized_contiguous(len(idx), 4, n, k, seed=21)
    clean = contiguous(a, sa, b, sb, idx)
    affected = np.zeros((len(idx), n), bool)
    expert = 2
    rows_of = np.nonzero(idx == expert)[0]
    if where == "b_scale":
        got = contiguous(a, sa, b, with_value(sb, (expert, 1, 0), float("nan")), idx)
        affected[rows_of, 128:256] = True
    elif where == "a_scale":
        i = int(rows_of[7])
        got = contiguous(a, with_value(sa, (i, 1), float("nan")), b, sb, idx)
        affected[i, :] = True
    elif where == "a":
        i = int(rows_of[-1])
        got = contiguous(with_value(a, (i, 3), 0x7F), sa, b, sb, idx)
        affected[i, :] = True
    elif where == "b":
        got = contiguous(a, sa, with_value(b, (expert, 200, 5), 0x7F), sb, idx)
        affected[rows_of, 200] = True
    else:                       # a NaN in a row marked -1 inside a computed tile: the row is still zeros
        pad = int(np.nonzero(idx < 0)[0][0])
        got = contiguous(with_value(a, (pad, 0), 0x7F), sa, b, sb, idx)
        assert (got == clean).all() and (got[idx < 0] == 0).all()
        return
    assert_only(got, clean, affected, "nan")


def test_masked_nan_stays_in_its_row():
    groups, max_m, n, k = 4, 100, 264, 256
    valid = [60, 0, 100, 30]
    a, sa, b, sb = quantized_masked(groups, max_m, n, k, seed=31)
    clean = masked(a, sa, b, sb, valid, 64)
    affected = np.zeros((groups, max_m, n), bool)
    got = masked(a, with_value(sa, (2, 99, 1), float("nan")), b, sb, valid, 64)
    affected[2, 99, :] = True
    assert_only(got, clean, affected, "nan")
    # NaN in rows that are not computed (past masked_m, or in an empty group) changes nothing.
    for g, i in [(0, 60), (1, 0), (3, 99)]:
        got = masked(a, with_value(sa, (g, i, 0), float("nan")), b, sb, valid, 64)
        assert (got == clean).all(), f"NaN in a_scale[{g}, {i}] (not a valid row) leaked"
        got = masked(with_value(a, (g, i, 5), 0x7F), sa, b, sb, valid, 64)
        assert (got == clean).all(), f"NaN in a[{g}, {i}] (not a valid row) leaked"


# ----------------------------------------------------------------------------- determinism
def test_same_inputs_twice_bitwise():
    a, sa, b, sb = quantized_dense(777, 2112, 2048, seed=41)
    assert (dense(a, sa, b, sb) == dense(a, sa, b, sb)).all()
    idx = contiguous_indices([300, 0, 129, 64])
    a, sa, b, sb = quantized_contiguous(len(idx), 4, 512, 1024, seed=42)
    assert (contiguous(a, sa, b, sb, idx) == contiguous(a, sa, b, sb, idx)).all()
    a, sa, b, sb = quantized_masked(3, 256, 512, 1024, seed=44)
    assert (masked(a, sa, b, sb, [256, 17, 200], 128) == masked(a, sa, b, sb, [256, 17, 200], 128)).all()


@pytest.fixture
def restore_num_sms():
    saved = dict(runtime._num_sms_override)
    yield cupy.cuda.runtime.getDevice()
    runtime._num_sms_override.clear()
    runtime._num_sms_override.update(saved)


@pytest.fixture
def grids(monkeypatch):
    """The grid of every GEMM launch, in order."""
    seen = []
    real = fp8_gemm.GemmLauncher.launch

    def launch(self, *args, **kwargs):
        seen.append(self.grid)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(fp8_gemm.GemmLauncher, "launch", launch)
    return seen


def _same_config_other_grid(layout, m, n, k, groups, total):
    """An SM count below `total` for which the heuristic keeps the configuration but changes the grid."""
    first = heuristics.choose(layout, m, n, k, groups, total)
    for sms in list(range(total - 1, total // 2, -1)) + [16, 8, 4, 2]:
        plan = heuristics.choose(layout, m, n, k, groups, sms)
        if plan.config == first.config and plan.grid != first.grid:
            return first, sms, plan
    return first, None, None


def _padded_rows(a):
    """The same A with a row stride 16 bytes longer (a new call signature, same values)."""
    k = a.shape[-1]
    wide = cupy.zeros(a.shape[:-1] + (k + 16,), cupy.uint8)
    wide[..., :k] = a
    return wide[..., :k]


DETERMINISM_SHAPES = [("normal", 4096, 4096, 7168, 1), ("normal", 1500, 2112, 7168, 1),
                      ("normal", 640, 7168, 2048, 1), ("contiguous", 2048, 4096, 2048, 4),
                      ("masked", 256, 4096, 512, 4)]   # K below the split's SPLIT_MIN_K_BLOCKS: see below


@pytest.mark.parametrize("layout, m, n, k, groups", DETERMINISM_SHAPES)
def test_bitwise_equal_across_sm_counts(layout, m, n, k, groups, restore_num_sms, grids):
    total = runtime.device_properties(restore_num_sms)["num_sms"]
    first, sms, second = _same_config_other_grid(layout, m, n, k, groups, total)
    # A masked kernel that splits its last wave sums a split tile's k-blocks in two halves, and which
    # tiles are split depends on the grid: those may differ in the last bits (README).
    assert not first.config.tail_split, "pick a masked shape whose configuration does not split"
    if sms is None:
        pytest.skip(f"no SM count keeps the configuration of {layout} {m}x{n}x{k} and changes its grid")
    if layout == "normal":
        a, sa, b, sb = quantized_dense(m, n, k, seed=51)
        call = lambda a_: dense(a_, sa, b, sb)  # noqa: E731
    elif layout == "contiguous":
        idx = contiguous_indices([m // groups - 5] * groups)
        assert len(idx) == m
        a, sa, b, sb = quantized_contiguous(m, groups, n, k, seed=52)
        call = lambda a_: contiguous(a_, sa, b, sb, idx)  # noqa: E731
    else:
        a, sa, b, sb = quantized_masked(groups, m, n, k, seed=54)
        call = lambda a_: masked(a_, sa, b, sb, [m, m // 2, 1, m - 3], m)  # noqa: E731
    cugemm8.set_num_sms(total)
    ref = call(a)
    assert grids[-1] == first.grid
    cugemm8.set_num_sms(sms)
    # A with another row stride: a call signature not prepared yet, so it is planned under the new cap.
    got = call(_padded_rows(a))
    assert grids[-1] == second.grid, f"the SM cap {sms} did not take effect (grid {grids[-1]})"
    assert (got == ref).all(), f"grid {first.grid} and grid {second.grid} (same configuration) differ"


def test_set_num_sms_applies_to_prepared_signatures(restore_num_sms, grids):
    total = runtime.device_properties(restore_num_sms)["num_sms"]
    a, sa, b, sb = quantized_dense(4096, 4096, 2048, seed=61)
    cugemm8.set_num_sms(total)
    dense(a, sa, b, sb)
    full = grids[-1]
    cap = max(2, total // 4)
    cugemm8.set_num_sms(cap)
    dense(a, sa, b, sb)
    assert grids[-1] <= cap < full


# ----------------------------------------------------------------------------- out-of-range device data
@pytest.mark.parametrize("expected_m", [1, 100])
def test_masked_m_out_of_range_is_clamped(expected_m):
    max_m, n, k = 100, 264, 256
    bad = [-(2 ** 31), -5, 0, 37, 100, 101, 2 ** 31 - 1]
    clamped = [min(max(v, 0), max_m) for v in bad]
    a, sa, b, sb = quantized_masked(len(bad), max_m, n, k, seed=71)
    got = masked(a, sa, b, sb, bad, expected_m)                # masked() also checks the guards
    ref = masked(a, sa, b, sb, clamped, expected_m)
    for g, rows in enumerate(clamped):
        assert (got[g, rows:] == POISON).all(), f"group {g}: rows past min(max(masked_m, 0), max_m) were written"
        assert np.isfinite(as_float(got[g, :rows])).all(), f"group {g}: valid rows not written"
    assert (got == ref).all(), "an out-of-range masked_m must behave as its clamped value"


SLAB = 64  # rows per expert lookup in the contiguous layout (the alignment)


def sanitized(idx: np.ndarray, groups: int) -> np.ndarray:
    """The documented reading of m_indices, as well-formed input: a 64-row slab whose first id is
    outside [0, G) is all padding; inside a valid slab, ids outside [0, G) are padding and every
    other row uses the slab's expert."""
    out = idx.copy()
    for start in range(0, len(idx), SLAB):
        slab = out[start:start + SLAB]
        first = slab[0]
        if first < 0 or first >= groups:
            slab[:] = -1
        else:
            bad = (slab < 0) | (slab >= groups)
            slab[:] = first
            slab[bad] = -1
    return out


def test_m_indices_out_of_range():
    groups, n, k, m = 4, 264, 256, 128 * 8
    bm = heuristics.choose("contiguous", m, n, k, groups, cugemm8.get_num_sms()).config.block_m
    rng = np.random.default_rng(81)
    idx = np.zeros(m, np.int32)
    patterns = ["valid_with_negative_rows", "first_is_G", "first_is_int_min", "all_int_max", "all_minus_one",
                "valid_with_other_ids", "first_is_minus_seven", "valid_last_expert"]
    for t, start in enumerate(range(0, m, SLAB)):
        kind = patterns[t % len(patterns)]
        e = int(rng.integers(0, groups))
        tile = np.full(SLAB, e, np.int32)
        if kind == "valid_with_negative_rows":
            tile[rng.choice(np.arange(1, SLAB), 5, replace=False)] = [-1, -2, -7, -(2 ** 31), -100]
            tile[-9:] = -1
        elif kind == "first_is_G":
            tile[0] = groups
        elif kind == "first_is_int_min":
            tile[0] = -(2 ** 31)
        elif kind == "all_int_max":
            tile[:] = 2 ** 31 - 1
        elif kind == "all_minus_one":
            tile[:] = -1
        elif kind == "valid_with_other_ids":
            tile[rng.choice(np.arange(1, SLAB), 4, replace=False)] = [groups, groups + 5, 2 ** 31 - 1,
                                                                      (e + 1) % groups]
        elif kind == "first_is_minus_seven":
            tile[0] = -7
        else:
            tile[:] = groups - 1
        idx[start:start + SLAB] = tile
    a, sa, b, sb = quantized_contiguous(m, groups, n, k, seed=82)
    got = contiguous(a, sa, b, sb, idx)                    # contiguous() also checks guards and row padding
    rule = sanitized(idx, groups)
    assert (got[rule < 0] == 0).all(), f"padding rows (by the documented rule; BLOCK_M={bm}) must be zeros"
    valid = rule >= 0
    ref = reference_grouped_contiguous(a, sa, b, sb, rule)
    err = max_rel_error(as_float(got)[valid], ref[valid])
    assert err <= REL_TOLERANCE, f"valid rows: normalized error {err:.4f} (BLOCK_M={bm})"
    assert (got == contiguous(a, sa, b, sb, rule)).all(), "must equal the same call on the well-formed indices"


def test_dense_writes_nothing_outside_out():
    for m, n, k in [(1, 8, 16), (200, 264, 256), (333, 136, 400)]:
        a, sa, b, sb = quantized_dense(m, n, k, seed=m)
        got = dense(a, sa, b, sb)                             # dense() checks the guards and row padding
        assert np.isfinite(as_float(got)).all(), f"{m}x{n}x{k}: some outputs not written"


# ----------------------------------------------------------------------------- several GPUs
def test_device_1_matches_device_0():
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs; cupy sees 1")
    if cupy.cuda.runtime.getDeviceProperties(1)["major"] != 9:
        pytest.skip("device 1 is not a Hopper GPU")
    with cupy.cuda.Device(0):
        dense_in = quantized_dense(300, 2112, 2048, seed=91)
        masked_in = quantized_masked(2, 64, 512, 256, seed=92)
        ref_dense = dense(*dense_in)
        ref_masked = masked(*masked_in, [64, 10], 32)
        host_dense = [cupy.asnumpy(x) for x in dense_in]
        host_masked = [cupy.asnumpy(x) for x in masked_in]
    with cupy.cuda.Device(1):
        def there(host):
            a, sa, b, sb = (cupy.asarray(x) for x in host)
            assert a.data.device_id == 1
            return a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb

        got_dense = dense(*there(host_dense))
        got_masked = masked(*there(host_masked), [64, 10], 32)
    assert (got_dense == ref_dense).all(), "matmul on device 1 differs from device 0"
    assert (got_masked == ref_masked).all(), "m_grouped_matmul_masked on device 1 differs from device 0"

"""CPU tier for the sweeps (benchmarks.tune, benchmarks.tune_grouped): candidate lists and contiguous
layouts (no GPU, no compiling)."""
import numpy as np
import pytest

import cugemm8
from benchmarks import shapes as bench
from benchmarks import tune
from benchmarks import tune_grouped as tg
from cugemm8 import heuristics


def test_shape_tables_match_the_benchmark():
    assert tg.MASKED == [(s.groups, s.m, s.n, s.k) for s in bench.MASKED_SHAPES]
    assert tg.CONTIGUOUS[:4] == [(s.groups, s.m, s.n, s.k) for s in bench.CONTIGUOUS_SHAPES]
    assert tg.MASKED_MAX_M == 4096


def test_candidates_follow_the_rules():
    for layout, n, k, g in (("masked", 4096, 7168, 4), ("contiguous", 7168, 2048, 8)):
        cfgs = tg.candidates(layout, n, k, g)
        assert len(cfgs) == len(set(cfgs)) == 30
        for c in cfgs:
            assert (c.layout, c.n, c.k, c.num_groups, c.cluster) == (layout, n, k, g, 1)
            assert c.block_m in (64, 128, 256) and c.block_n % 16 == 0
            assert c.block_n in heuristics.block_n_candidates(c.block_m)
            assert c.stages == heuristics._stages(c.block_m, c.block_n, k, c.masked_groups,
                                                  record_slots=c.record_slots) >= 2
            assert c.num_math_wg == (1 if c.block_m == 64 else 2)
            assert c.swizzle_d == heuristics.swizzle_for(c.block_n)
            assert c.smem_bytes <= heuristics.SMEM_CAPACITY
    narrow = tg.candidates("masked", 4096, 7168, 4, min_wide_block_n=32)
    assert len(narrow) == 28 and not [c for c in narrow if c.block_m >= 128 and c.block_n < 32]


def test_heuristic_pick_is_a_candidate():
    for g, e, n, k in tg.MASKED:
        assert heuristics.choose("masked", e, n, k, g, 132).config in tg.candidates("masked", n, k, g)
    for g, m, n, k in tg.CONTIGUOUS:
        rows = tg.uneven_rows(g) if m == tg.UNEVEN else [m] * g
        total = len(tg.contiguous_layout(rows, cugemm8.get_m_alignment_for_contiguous_layout())[0])
        assert heuristics.choose("contiguous", total, n, k, g, 132).config in tg.candidates("contiguous", n, k, g)


def test_with_pick():
    cfgs = tg.candidates("masked", 4096, 7168, 1)
    pick = heuristics.choose("masked", 1024, 4096, 7168, 1, 132).config
    assert tg.with_pick(cfgs, pick, quick=False) == cfgs
    quick = tg.with_pick(cfgs, pick, quick=True)
    assert len(quick) == tg.QUICK_CANDIDATES and pick in quick and set(quick) <= set(cfgs)
    outsider = tg.candidates("masked", 4096, 7168, 2)[0]
    assert tg.with_pick(cfgs, outsider, quick=False) == cfgs + [outsider]
    assert outsider in tg.with_pick(cfgs, outsider, quick=True)
    assert len(tg.with_pick(cfgs, None, quick=True)) == tg.QUICK_CANDIDATES


def test_uneven_rows():
    rows = tg.uneven_rows(8)
    assert rows == tg.uneven_rows(8) and len(rows) == 8 and sum(rows) == 8 * 4096
    assert all(0.6 * 4096 < r < 1.4 * 4096 for r in rows) and len(set(rows)) > 1


def test_contiguous_layout():
    for align in (64, 128):
        idx, offsets = tg.contiguous_layout([4096] * 8, align)
        ref, seg = bench.contiguous_m_indices(8, 4096, align)
        assert np.array_equal(idx, ref) and offsets == [g * seg for g in range(8)]
        rows = [100, 0, 129, 64]
        idx, offsets = tg.contiguous_layout(rows, align)
        assert idx.dtype == np.int32 and len(idx) % align == 0 and all(o % align == 0 for o in offsets)
        for g, (off, r) in enumerate(zip(offsets, rows)):
            assert (idx[off:off + r] == g).all()
        assert (idx >= 0).sum() == sum(rows)
        assert len(idx) == sum(-(-r // align) * align for r in rows)


def test_best_row_prefers_correct_rows():
    rows = [{"us": 5.0, "ok": False}, {"us": 7.0, "ok": True}, {"us": None, "ok": False}]
    assert tg.best_row(rows)["us"] == 7.0
    assert tg.best_row([{"us": 5.0, "ok": False}])["us"] == 5.0
    assert tg.best_row([{"us": None, "ok": False}]) is None


def test_dense_candidates():
    cfgs = tune.dense_candidates(64, 2112, 7168)
    assert cfgs and len(cfgs) == len(set(cfgs))
    assert all(c.block_m == 64 and c.cluster == 1 and c.stages >= 2 for c in cfgs)
    big = tune.dense_candidates(4096, 7168, 2048)
    assert {c.block_m for c in big} == {64, 128, 256} and any(c.cluster == 2 for c in big)
    assert heuristics.choose("normal", 4096, 7168, 2048, 1, 132).config in big
    rasters = tune.dense_candidates(4096, 7168, 2048, rasters=(8, 16))
    assert {(c.raster_group, c.cluster) for c in rasters} <= {(8, 1), (8, 2), (16, 1), (16, 2)}
    assert tune.DENSE == [(s.m, s.n, s.k) for s in bench.DENSE_SHAPES]


def test_dense_line_names_best_and_pick():
    rows = [{"block_m": 64, "block_n": 16, "stages": 8, "cluster": 1, "raster": 8, "us": 10.0, "tflops": 1.0,
             "ok": True, "picked": False},
            {"block_m": 64, "block_n": 64, "stages": 6, "cluster": 1, "raster": 8, "us": 11.0, "tflops": 1.0,
             "ok": False, "picked": True}]
    line = tune.dense_line({"m": 64, "n": 2112, "k": 7168, "rows": rows, "pick": None}, raster_sweep=False)
    assert "best      64x16x8c1s1" in line and "pick 64x64x6c1s1" in line and "(1.10x)" in line
    assert "MISMATCH in [(64, 64)]" in line


@pytest.mark.parametrize("argv, message", [(["--rasters", "4,x"], "comma-separated integers"),
                                           (["--pairs", "128,a"], "comma-separated integers"),
                                           (["--share-b", "192,b"], "comma-separated integers"),
                                           (["--rasters", "0"], "positive band widths")])
def test_width_lists_are_checked_before_the_gpu(argv, message, capsys):
    with pytest.raises(SystemExit):
        tg.main(["--layout", "uneven", *argv])
    assert message in capsys.readouterr().err

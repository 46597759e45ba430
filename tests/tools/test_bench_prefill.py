"""CPU tier for the benchmark's prefill section (benchmarks/prefill.py, issue 22): its shape tables, the uneven
expert draw and its padding, the summary against the targets, the CLI, and a dry run of the section with NumPy
standing in for CuPy and NumPy references standing in for the kernels. No GPU, no torch."""
import os
import subprocess
import sys
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from benchmarks import __main__ as cli
from benchmarks import library, prefill, protocol, report, shapes, tables
from benchmarks.env import Env
from cugemm8 import quantize, reference

ROOT = Path(__file__).resolve().parents[2]
BF16 = np.dtype(ml_dtypes.bfloat16)
UNEVEN_NK = {(4096, 7168), (7168, 2048), (16384, 5120), (5120, 8192)}


# ----------------------------------------------------------------------------- tables
def test_prefill_tables_have_the_issue_counts():
    dense, uneven = shapes.PREFILL_DENSE_SHAPES, shapes.PREFILL_UNEVEN_SHAPES
    assert len(dense) == 18 and len(set(dense)) == 18 and {s.kind for s in dense} == {"normal"}
    assert {s.m for s in dense} == {2048, 8192, 16384} and {(s.n, s.k) for s in dense} == set(shapes.DENSE_NK)
    assert len(uneven) == 32 and len(set(uneven)) == 32 and {s.kind for s in uneven} == {"uneven"}
    assert {s.groups for s in uneven} == {8, 16, 32, 64} and {s.m for s in uneven} == {256, 1024}
    assert {(s.n, s.k) for s in uneven} == UNEVEN_NK
    labels = [s.label for s in dense + uneven]
    assert len(set(labels)) == 50
    assert shapes.Shape("uneven", 8, 256, 4096, 7168).label == "u8x256x4096x7168"
    assert "u64x1024x16384x5120" in labels and "16384x7168x16384" in labels
    full = shapes.prefill_shapes(quick=False)
    assert [t for t, _ in full] == ["dense"] * 18 + ["uneven"] * 32
    quick = shapes.prefill_shapes(quick=True)
    assert [t for t, _ in quick] == ["dense", "uneven"]
    for table, shape in quick:
        assert shape in shapes.PREFILL_TABLES[table]
    # the older tables and draws are untouched
    assert len(shapes.DENSE_SHAPES) == 18 and shapes.uneven_rows(8, 4096) == shapes.uneven_rows(8, 4096)
    assert sum(shapes.uneven_rows(8, 4096)) == 8 * 4096


@pytest.mark.parametrize("groups,mean", [(g, m) for g in (8, 16, 32, 64) for m in (256, 1024)] + [(2, 1), (3, 7)])
def test_uneven_expert_rows_draw(groups, mean):
    rows = shapes.uneven_expert_rows(groups, mean)
    assert rows == shapes.uneven_expert_rows(groups, mean)        # fixed per (groups, mean) and seed
    assert len(rows) == groups and all(type(r) is int for r in rows)
    full = [r for r in rows if r]
    assert 0 < len(full) < groups                                  # at least one empty, never all
    assert all(0.5 * mean <= r <= 1.5 * mean for r in full)


def test_uneven_expert_rows_seed_spread_and_errors():
    draws = [tuple(shapes.uneven_expert_rows(64, 1024, seed=s)) for s in range(20)]
    assert len(set(draws)) == 20
    rows = [r for d in draws for r in d]
    empty = sum(r == 0 for r in rows) / len(rows)
    assert 0.06 < empty < 0.2                                      # about 1/8
    full = [r for r in rows if r]
    assert min(full) < 600 and max(full) > 1450                    # the whole 512..1536 range is used
    assert shapes.uneven_expert_rows(8, 256, seed=1) != shapes.uneven_expert_rows(8, 256, seed=2)
    for g, m in ((1, 256), (8, 0)):
        with pytest.raises(ValueError):
            shapes.uneven_expert_rows(g, m)


@pytest.mark.parametrize("groups,mean", [(8, 256), (16, 1024), (64, 256)])
def test_uneven_padding_to_128(groups, mean):
    rows = shapes.uneven_expert_rows(groups, mean)
    idx, offsets = shapes.contiguous_layout(rows, shapes.PREFILL_ALIGN)
    assert shapes.PREFILL_ALIGN == 128 and idx.dtype == np.int32 and idx.size % 128 == 0
    ends = offsets[1:] + [idx.size]
    for g, (r, start, end) in enumerate(zip(rows, offsets, ends)):
        assert start % 128 == 0 and (end - start) % 128 == 0 and end - start == -(-r // 128) * 128
        assert np.all(idx[start:start + r] == g) and np.all(idx[start + r:end] == -1)
    assert sum(int((idx == g).sum()) for g in range(groups)) == sum(rows)
    assert set(np.unique(idx).tolist()) - {-1} == {g for g, r in enumerate(rows) if r}


# ----------------------------------------------------------------------------- summary
def synthetic_row(table, shape, t_cg, t_dg=None, status="ok"):
    entries = {"cugemm8": {"status": status, "median_s": t_cg}}
    if t_dg:
        entries["deepgemm"] = {"status": "ok", "median_s": t_dg}
    return tables.finish_row({**tables.base_row(shape), "table": table}, entries)


def test_summary_geomean_min_and_targets():
    d = [synthetic_row("dense", s, 1.0, t) for s, t in zip(shapes.PREFILL_DENSE_SHAPES[:2], (1.21, 1.0))]
    u = [synthetic_row("uneven", s, 1.0, t) for s, t in zip(shapes.PREFILL_UNEVEN_SHAPES[:3], (1.5, 0.9, 1.2))]
    s = prefill.prefill_summary(d + u)
    assert s["dense"]["geomean_deepgemm_over_cugemm8"] == pytest.approx(1.1)
    assert s["dense"]["min_deepgemm_over_cugemm8"] == 1.0 and s["dense"]["min_shape"] == "2048x24576x1536"
    assert s["dense"]["target_met"] is True and s["dense"]["rows_below_1"] == 0
    assert s["uneven"]["geomean_deepgemm_over_cugemm8"] == pytest.approx((1.5 * 0.9 * 1.2) ** (1 / 3))
    assert s["uneven"]["rows_below_1"] == 1 and s["uneven"]["shapes_below_1"] == ["u8x256x7168x2048"]
    assert s["uneven"]["min_shape"] == "u8x256x7168x2048" and s["uneven"]["target_met"] is False
    # a row without a ratio (cugemm8 wrong, or no DeepGEMM) leaves the target unassessed
    extra = synthetic_row("uneven", shapes.PREFILL_UNEVEN_SHAPES[3], 1.0, 2.0, status="wrong")
    err = {**tables.base_row(shapes.PREFILL_UNEVEN_SHAPES[4]), "table": "uneven", "error": "boom"}
    s = prefill.prefill_summary(d + u + [extra, err])["uneven"]
    assert s["target_met"] is None and s["rows"] == 5 and s["rows_compared"] == 3
    assert s["cugemm8_not_ok"] == ["u8x256x5120x8192", "u8x1024x4096x7168"]
    assert prefill.prefill_summary([])["dense"]["target_met"] is None
    lines = prefill.prefill_summary_lines(prefill.prefill_summary(d + u))
    assert len(lines) == 2 and ">= 1.05x geomean: met" in lines[0]
    assert "no shape below 1.00x: NOT met" in lines[1] and "1 below 1.0" in lines[1]


# ----------------------------------------------------------------------------- CLI, imports
def test_parse_args_accepts_prefill():
    a = cli.parse_args(["--only", "prefill"])
    assert a.sections == ["prefill"]
    assert cli.SECTIONS[-1] == "decode" and cli.SECTIONS[-2] == "prefill"
    assert cli.parse_args(["--only", "decode", "--only", "prefill"]).sections == ["prefill", "decode"]


def test_prefill_imports_without_a_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    code = "import sys, benchmarks.prefill; print('torch' in sys.modules, 'cupy' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False False", proc.stderr
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "prefill" in proc.stdout, proc.stderr


# ----------------------------------------------------------------------------- a dry run on NumPy
CG_S, DENSE_S, DG_S = 10e-6, 8e-6, 12e-6


class FakeEnv:
    """NumPy for CuPy, NumPy references for the kernels, and the real Timer on a clock only the kernels move.
    The fake DeepGEMM leaves padding rows NaN: the check must look at valid rows only."""
    plan = Env.plan

    def __init__(self, with_deepgemm=True):
        dev = types.SimpleNamespace(now=0.0, flush=lambda: None, event=dict, sync=lambda: None,
                                    elapsed_s=lambda s, e: e["t"] - s["t"])
        dev.record = lambda ev: ev.__setitem__("t", dev.now)
        self.dev, self.timer = dev, protocol.Timer(dev, settle_s=0)
        self.stream = _NullContext()
        self.lib, self.num_sms, self.is_anchor_gpu = library.current(), 132, False
        self.rng = np.random.default_rng(0)
        self.peers = self.deepgemm = None
        self.peers_note = self.deepgemm_note = "none"
        if with_deepgemm:
            self.peers = types.SimpleNamespace(to_cupy_f32=lambda cp, y: y.astype(np.float32))
            self.deepgemm = types.SimpleNamespace(contiguous=self.dg_contiguous, dense=self.dg_dense)
            self.peers_note = self.deepgemm_note = "fake"
        self.cp = types.SimpleNamespace(**{k: getattr(np, k) for k in ("float32", "float64", "uint8", "uint16",
                                                                        "uint32", "int32", "empty", "empty_like",
                                                                        "asarray", "ascontiguousarray")})
        self.cg = types.SimpleNamespace(
            matmul=self.matmul, m_grouped_matmul_contiguous=self.contiguous,
            per_token_cast_to_fp8=quantize.per_token_cast_to_fp8_numpy,
            per_block_cast_to_fp8=quantize.per_block_cast_to_fp8_numpy, get_col_major_tma_aligned_tensor=lambda s: s,
            api=types.SimpleNamespace(BF16=BF16))
        self.freed = 0

    def randn(self, shape):
        return self.rng.standard_normal(shape).astype(np.float32)

    def sync(self):
        pass

    def free(self):
        self.freed += 1

    def work(self, seconds):
        self.dev.now += seconds

    def matmul(self, a, sa, b, sb, out=None):
        out = np.empty((a.shape[0], b.shape[0]), dtype=BF16) if out is None else out
        out[...] = reference.reference_matmul(a, sa, b, sb).astype(BF16)
        self.work(DENSE_S if a.shape[0] > 256 else CG_S)   # the dense row's cugemm8 at 256 rows; else dense_same_mnk
        return out

    def contiguous(self, a, sa, b, sb, m_indices, out=None):
        out = np.empty((a.shape[0], b.shape[1]), dtype=BF16) if out is None else out
        out[...] = reference.reference_grouped_contiguous(a, sa, b, sb, m_indices).astype(BF16)
        self.work(CG_S)
        return out

    def dg_contiguous(self, a, sa, b, sb, m_indices):
        out = np.full((a.shape[0], b.shape[1]), np.nan, dtype=BF16)

        def run():
            d = reference.reference_grouped_contiguous(a, sa, b, sb, m_indices).astype(BF16)
            valid = m_indices >= 0
            out[valid] = d[valid]
            self.work(DG_S)
        return run, out

    def dg_dense(self, a, sa, b, sb):
        out = np.empty((a.shape[0], b.shape[0]), dtype=BF16)

        def run():
            out[...] = reference.reference_matmul(a, sa, b, sb).astype(BF16)
            self.work(DG_S)
        return run, out


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


SMALL = [("dense", shapes.Shape("normal", 1, 256, 256, 256)), ("uneven", shapes.Shape("uneven", 8, 64, 256, 384))]


@pytest.mark.parametrize("with_deepgemm", [True, False])
def test_run_prefill_dry_run(monkeypatch, capsys, with_deepgemm):
    monkeypatch.setattr(prefill, "prefill_shapes", lambda quick: SMALL)
    env = FakeEnv(with_deepgemm)
    partials = []
    res = prefill.run_prefill(env, types.SimpleNamespace(quick=True, reps=5, checkpoint=partials.append))
    assert [len(p["rows"]) for p in partials] == [2, 2] and partials[0]["partial"] and env.freed == 2
    dense, uneven = res["rows"]
    assert [r.get("error") for r in res["rows"]] == [None, None]
    assert dense["table"] == "dense" and uneven["table"] == "uneven" and uneven["config"] and uneven["dense_config"]
    rows = shapes.uneven_expert_rows(8, 64)
    assert uneven["expert_rows"] == rows and uneven["valid_rows"] == sum(rows)
    assert uneven["empty_experts"] == rows.count(0) >= 1 and uneven["total_rows"] % 128 == 0
    assert uneven["bytes"] == shapes.gemm_bytes(sum(rows), 256, 384, groups=8 - rows.count(0))
    cg = uneven["results"]["cugemm8"]
    assert cg["status"] == "ok" and cg["diff"] < 1e-3 and cg["median_s"] == pytest.approx(CG_S)
    assert cg["tflops"] == pytest.approx(2 * sum(rows) * 256 * 384 / CG_S * 1e-12)
    assert uneven["dense_time_over_contiguous"] == pytest.approx(DENSE_S / CG_S)
    s = res["summary"]
    out = capsys.readouterr().out
    assert "== prefill" in out and "-- uneven" in out and "u8x64x256x384" in out and "issue 22 target" in out
    if with_deepgemm:   # NaN on DeepGEMM's padding rows: checked over valid rows only, so ok
        dg = uneven["results"]["deepgemm"]
        assert dg["status"] == "ok" and dg["diff"] < 1e-3
        assert uneven["ratio_deepgemm"] == pytest.approx(DG_S / CG_S) == dense["ratio_deepgemm"]
        assert s["uneven"]["geomean_deepgemm_over_cugemm8"] == pytest.approx(1.2)
        assert s["uneven"]["target_met"] is True and s["dense"]["target_met"] is True
    else:
        assert uneven["ratio_deepgemm"] is None and s["uneven"]["target_met"] is None
        assert "not assessed (0 of 1 rows compared)" in out and "no DeepGEMM/cugemm8 ratio (1 rows)" in out
    report.print_summary({"prefill": res}, {"gpu": "x", "sms": 1, "reps": 5}, Path("x.json"))
    assert ("prefill uneven: DeepGEMM/cugemm8 time geomean" if with_deepgemm else
            "prefill uneven: no DeepGEMM/cugemm8 ratio") in capsys.readouterr().out
    why = report.write_chart(Path("/nonexistent/x.png"), {"prefill": res}, "t")   # the chart skips prefill
    assert why == "no rows" or why.startswith("matplotlib unavailable")


def test_uneven_check_fails_on_a_wrong_valid_row(monkeypatch):
    """A kernel that leaves one valid row unwritten (NaN) is flagged wrong: the check does cover valid rows."""
    env = FakeEnv(with_deepgemm=False)
    good = env.contiguous

    def bad(a, sa, b, sb, m_indices, out=None):
        out = good(a, sa, b, sb, m_indices, out=out)
        first = int(np.flatnonzero(m_indices >= 0)[-1])
        out[first] = np.nan
        return out

    env.cg.m_grouped_matmul_contiguous = bad
    row = prefill.bench_uneven_shape(env, shapes.Shape("uneven", 8, 64, 256, 384), 3)
    assert row["results"]["cugemm8"]["status"] == "wrong"

"""CPU tier for the benchmark (benchmarks/): shape tables, FLOP/byte formulas, argument parsing, the
peers' loading, the rows and the summary. No GPU, no torch."""
import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import __main__ as cli
from benchmarks import env as bench_env
from benchmarks import peers, protocol, report, shapes, tables

ROOT = Path(__file__).resolve().parents[2]


def test_dense_table_is_the_18_deepgemm_shapes():
    nk = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
    expected = {("normal", 1, m, n, k) for m, (n, k) in itertools.product((64, 128, 4096), nk)}
    got = [(s.kind, s.groups, s.m, s.n, s.k) for s in shapes.DENSE_SHAPES]
    assert len(got) == 18 and set(got) == expected


def test_grouped_tables():
    assert [(s.groups, s.m, s.n, s.k) for s in shapes.CONTIGUOUS_SHAPES] == [
        (4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168), (8, 4096, 7168, 2048)]
    assert {s.kind for s in shapes.CONTIGUOUS_SHAPES} == {"contiguous"}
    masked = {(s.groups, s.m, s.n, s.k) for s in shapes.MASKED_SHAPES}
    assert len(shapes.MASKED_SHAPES) == 6 and masked == {
        (g, e, n, k) for g, e in ((1, 1024), (2, 512), (4, 256)) for n, k in ((4096, 7168), (7168, 2048))}
    assert {s.kind for s in shapes.MASKED_SHAPES} == {"masked"}


def test_quick_shapes_come_from_the_tables():
    for section, table in (("dense", shapes.DENSE_SHAPES), ("contiguous", shapes.CONTIGUOUS_SHAPES),
                           ("masked", shapes.MASKED_SHAPES)):
        assert shapes.shapes_for(section, quick=False) == table
        quick = shapes.shapes_for(section, quick=True)
        assert 0 < len(quick) < len(table) or len(table) == 1
        assert set(quick) <= set(table)


def test_every_table_shape_has_a_deepgemm_anchor():
    table = shapes.DENSE_SHAPES + shapes.CONTIGUOUS_SHAPES + shapes.MASKED_SHAPES
    assert set(shapes.DEEPGEMM_H200_TFLOPS) == set(table)
    # spot checks (DeepGEMM TFLOPS on the H200)
    assert shapes.DEEPGEMM_H200_TFLOPS[shapes.Shape("normal", 1, 64, 2112, 7168)] == pytest.approx(142.65, abs=0.1)
    assert shapes.DEEPGEMM_H200_TFLOPS[shapes.Shape("normal", 1, 4096, 7168, 16384)] == pytest.approx(1449.5, abs=0.1)
    assert shapes.DEEPGEMM_H200_TFLOPS[shapes.Shape("masked", 4, 256, 7168, 2048)] == pytest.approx(623.85, abs=0.1)


def test_flop_and_byte_formulas_hand_computed():
    # dense M=64, N=2112, K=7168: MK + NK + 2MN = 458752 + 15138816 + 270336
    assert shapes.gemm_flops(64, 2112, 7168) == 2 * 64 * 2112 * 7168 == 1_937_768_448
    assert shapes.gemm_bytes(64, 2112, 7168) == 15_867_904
    # the anchor's DeepGEMM time for that shape (13.584 µs) gives its quoted 143 TFLOPS and 1168 GB/s
    t = 1.3584000058472156e-05
    assert shapes.gemm_flops(64, 2112, 7168) / t * 1e-12 == pytest.approx(142.65, abs=0.01)
    assert shapes.gemm_bytes(64, 2112, 7168) / t * 1e-9 == pytest.approx(1168.1, abs=0.1)
    # grouped: 3 valid rows, 2 groups of N=4, K=5 -> 3*5 + 2*4*5 + 2*3*4
    assert shapes.gemm_flops(3, 4, 5) == 120
    assert shapes.gemm_bytes(3, 4, 5, groups=2) == 15 + 40 + 24


def test_masked_m_draw_is_fixed_and_in_range():
    for g, e in ((1, 1024), (2, 512), (4, 256)):
        m = shapes.draw_masked_m(g, e)
        assert m.dtype == np.int32 and m.shape == (g,)
        assert np.all(m >= int(0.7 * e)) and np.all(m <= int(1.3 * e)) and np.all(m <= shapes.MASKED_MAX_M)
        assert np.array_equal(m, shapes.draw_masked_m(g, e))


def test_contiguous_m_indices_pad_each_expert():
    idx, seg = shapes.contiguous_m_indices(3, 100, 128)
    assert seg == 128 and idx.dtype == np.int32 and idx.shape == (384,)
    for g in range(3):
        assert np.all(idx[g * 128:g * 128 + 100] == g) and np.all(idx[g * 128 + 100:(g + 1) * 128] == -1)
    idx, seg = shapes.contiguous_m_indices(2, 256, 128)
    assert seg == 256 and np.array_equal(idx, np.repeat(np.arange(2, dtype=np.int32), 256))


def test_ratios_geomean_slug():
    assert shapes.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert shapes.geomean([None, 4.0, float("nan")]) == pytest.approx(4.0)
    assert shapes.geomean([]) is None
    assert shapes.ratio(3.0, 2.0) == 1.5 and shapes.ratio(None, 2.0) is None and shapes.ratio(1.0, None) is None
    assert report.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_table_summary_on_synthetic_rows():
    def row(m, t_cg, t_bw, status="ok"):
        shape = shapes.Shape("normal", 1, m, 2112, 7168)
        entries = {"cugemm8": {"status": status, "median_s": t_cg, "tflops": 1.0},
                   "cublaslt_blockwise": {"status": "ok", "median_s": t_bw}}
        return tables.finish_row(tables.base_row(shape), entries)

    rows = [row(64, 1.0, 2.0), row(128, 1.0, 0.5), row(4096, 1.0, 9.0, status="wrong")]
    s = report.table_summary(rows)
    assert s["geomean_blockwise_over_cugemm8"] == pytest.approx(1.0)
    assert s["min_blockwise_over_cugemm8"] == 0.5 and s["min_blockwise_shape"] == "128x2112x7168"
    assert s["rows_compared"] == 2 and s["cugemm8_not_ok"] == ["4096x2112x7168"]


def test_parse_args_defaults_and_options():
    a = cli.parse_args([])
    assert a.sections == list(cli.SECTIONS) and a.reps == 30 and a.out == "bench/results/"
    assert not a.no_peers and not a.quick
    a = cli.parse_args(["--only", "jit", "--only", "dense", "--reps", "40", "--out", "x", "--no-peers", "--quick"])
    assert a.sections == ["dense", "jit"] and a.reps == 40 and a.out == "x" and a.no_peers and a.quick


def test_parse_args_rejects_bad_input(capsys):
    for argv in (["--only", "nope"], ["--reps", "0"], ["--frobnicate"]):
        with pytest.raises(SystemExit) as exc:
            cli.parse_args(argv)
        assert exc.value.code == 2


def test_help_runs_without_gpu_or_torch():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for option in ("--only", "--out", "--reps", "--no-peers", "--quick"):
        assert option in proc.stdout
    code = ("import sys, cugemm8, benchmarks.__main__, benchmarks.tables, benchmarks.host, benchmarks.peers;"
            " print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


def test_gpu_helpers_match_the_reference_on_numpy():
    """calc_diff_gpu and bf16_to_f32 take the array module as an argument: NumPy stands in for CuPy."""
    import ml_dtypes

    from cugemm8.reference import calc_diff

    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 53)).astype(np.float32)
    y = (x + 0.01 * rng.standard_normal(x.shape)).astype(np.float32)
    pairs = [(x[:20], y[:20]), (x[20:], y[20:])]
    assert bench_env.calc_diff_gpu(np, pairs) == pytest.approx(calc_diff(x, y), rel=1e-9, abs=1e-15)
    b = x.astype(ml_dtypes.bfloat16)
    assert np.array_equal(bench_env.bf16_to_f32(np, b), b.astype(np.float32))


def test_rescale_rows_keeps_the_split_and_hits_the_total():
    assert shapes.rescale_rows([807], 1006) == [1006]
    out = shapes.rescale_rows([276, 205, 190, 250], 1085)
    assert sum(out) == 1085 and out[0] > out[1] > out[2] and out[3] > out[1]


def test_masked_anchor_rows_are_plausible():
    # DeepGEMM's valid rows behind each masked number: within its draw's 0.7-1.3 x expected x groups.
    assert set(shapes.DEEPGEMM_H200_MASKED_ROWS) == set(shapes.MASKED_SHAPES)
    for shape, rows in shapes.DEEPGEMM_H200_MASKED_ROWS.items():
        assert 0.7 * shape.m * shape.groups <= rows <= 1.3 * shape.m * shape.groups


def test_deepgemm_same_run_ratio_in_summary():
    def row(m, t_cg, t_dg):
        shape = shapes.Shape("normal", 1, m, 2112, 7168)
        entries = {"cugemm8": {"status": "ok", "median_s": t_cg, "tflops": 1.0},
                   "deepgemm": {"status": "ok", "median_s": t_dg}}
        return tables.finish_row(tables.base_row(shape), entries)

    s = report.table_summary([row(64, 1.0, 2.0), row(128, 2.0, 1.0), row(4096, 1.0, None)])
    assert s["geomean_deepgemm_over_cugemm8"] == pytest.approx(1.0) and s["rows_compared_deepgemm"] == 2
    assert s["min_deepgemm_over_cugemm8"] == 0.5 and s["min_deepgemm_shape"] == "128x2112x7168"


def test_deepgemm_peer_is_optional(monkeypatch):
    """No torch, no deep_gemm, or a deep_gemm without the 8dfa329 functions: no peer, and the reason."""
    assert peers.load_deepgemm(None) == (None, "needs torch")
    fake_peers = type("Peers", (), {"torch": None})()
    monkeypatch.setitem(sys.modules, "deep_gemm", None)   # import raises ImportError
    peer, note = peers.load_deepgemm(fake_peers)
    assert peer is None and note.startswith("deep_gemm not importable")
    module = type(sys)("deep_gemm")
    module.gemm_fp8_fp8_bf16_nt = lambda *a: None
    monkeypatch.setitem(sys.modules, "deep_gemm", module)
    peer, note = peers.load_deepgemm(fake_peers)
    assert peer is None and "m_grouped_gemm_fp8_fp8_bf16_nt_masked" in note
    for name in peers.DeepGemmPeer.FUNCTIONS:
        setattr(module, name, lambda *a: None)
    peer, note = peers.load_deepgemm(fake_peers)
    assert isinstance(peer, peers.DeepGemmPeer) and note.startswith("deep_gemm from")


def test_alone_row_against_the_anchor():
    shape = shapes.Shape("contiguous", 4, 8192, 4096, 7168)
    row = tables.base_row(shape)
    flops = shapes.gemm_flops(4 * 8192, 4096, 7168)
    anchor = row["deepgemm_h200_tflops"]
    t_anchor = flops / (anchor * 1e12)
    entries = {"cugemm8": {"alone_median_s": t_anchor / 1.1}, "deepgemm": {"alone_median_s": t_anchor}}
    tables.alone_row(row, entries, "cugemm8", "deepgemm", flops)
    a = row["alone"]
    assert a["cugemm8_over_anchor"] == pytest.approx(1.1) and a["deepgemm_over_anchor"] == pytest.approx(1.0)
    assert a["deepgemm_over_cugemm8_time"] == pytest.approx(1.1)
    row2 = tables.base_row(shape)
    tables.alone_row(row2, {"cugemm8": {"alone_median_s": t_anchor}}, "cugemm8", "deepgemm", flops)
    assert row2["alone"]["deepgemm_tflops"] is None and row2["alone"]["deepgemm_over_cugemm8_time"] is None
    row2["results"], row["results"] = {}, {}
    for r in (row, row2):
        r.update(ratio_blockwise=None, ratio_per_tensor=None, vs_deepgemm_h200=None)
    s = report.table_summary([row, row2])
    assert s["geomean_alone_cugemm8_over_deepgemm_h200"] == pytest.approx(1.1 ** 0.5)
    assert s["min_alone_cugemm8_over_deepgemm_h200"] == pytest.approx(1.0)
    assert s["geomean_alone_deepgemm_over_deepgemm_h200"] == pytest.approx(1.0)


def test_print_summary_names_the_worst_rows(capsys, tmp_path):
    def row(m, t_cg, t_bw):
        shape = shapes.Shape("normal", 1, m, 2112, 7168)
        entries = {"cugemm8": {"status": "ok", "median_s": t_cg, "tflops": 100.0},
                   "cublaslt_blockwise": {"status": "ok", "median_s": t_bw},
                   "cublaslt_per_tensor": {"status": "ok", "median_s": t_cg}}
        return tables.finish_row(tables.base_row(shape), entries)

    rows = [row(64, 1.0, 1.5), row(128, 1.0, 0.9)]
    results = {"dense": {"rows": rows, "summary": report.table_summary(rows)},
               "masked": {"skipped": "not here"},
               "overhead": {"rows": {"cugemm8 out=": {"wall_us": 12.5, "calls": 2000}}}}
    info = {"gpu": "NVIDIA H200", "sms": 132, "reps": 30}
    report.print_summary(results, info, tmp_path / "x.json")
    out = capsys.readouterr().out
    assert "summary: NVIDIA H200 (132 SMs), reps=30" in out
    assert "min 0.90x at 128x2112x7168" in out and "per-tensor/cugemm8 geomean 1.00x" in out
    assert "masked: skipped: not here" in out
    assert "2000 back-to-back calls" in out and "cugemm8 out= 12.5" in out
    assert "meaningful only on an H200" not in out


def test_json_and_row_text(tmp_path):
    shape = shapes.Shape("masked", 2, 512, 4096, 7168)
    row = tables.finish_row({**tables.base_row(shape), "config": {"block_m": 128, "block_n": 128, "stages": 5,
                                                                   "num_math_wg": 2}},
                            {"cugemm8": {"status": "wrong", "median_s": 2e-5, "tflops": 1.0, "diff": 0.5}})
    text = report.row_text(row, dense=False)
    assert text.split()[:2] == ["m2x512x4096x7168", "128x128"] and "5.0e-01" in text
    path = tmp_path / "out" / "r.json"
    report.write_json(path, {"gpu": "x"}, {"masked": {"rows": [row]}})
    import json

    doc = json.loads(path.read_text())
    assert doc["info"] == {"gpu": "x"} and doc["results"]["masked"]["rows"][0]["kind"] == "masked"
    assert report.table_summary([row])["cugemm8_not_ok"] == ["m2x512x4096x7168"]


def test_protocol_constants_in_the_run_info_are_the_protocols():
    assert protocol.FLUSH_BYTES == 1 << 30 and protocol.SETTLE_S == 1.0 and protocol.WARMUP_CALLS == 3
    assert report.DIFF_LIMIT == bench_env.DIFF_LIMIT
    assert shapes.ANCHOR_SOURCE.startswith("DeepGEMM 8dfa329")

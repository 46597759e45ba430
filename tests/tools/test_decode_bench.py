"""CPU tier for the benchmark's decode section (benchmarks/decode.py): its shape lists, the masked draw, the
byte counts and the roofline fraction by hand, the summary, and a dry run of the whole section with NumPy
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
from benchmarks import decode, library, protocol, report, shapes, tables
from benchmarks.env import Env
from cugemm8 import quantize, reference

ROOT = Path(__file__).resolve().parents[2]
BF16 = np.dtype(ml_dtypes.bfloat16)


# ----------------------------------------------------------------------------- tables and formulas
def test_decode_tables_have_the_issue_counts():
    dense, narrow, masked = shapes.DECODE_DENSE_SHAPES, shapes.DECODE_NARROW_SHAPES, shapes.DECODE_MASKED_SHAPES
    assert len(dense) == 48 and {(s.n, s.k) for s in dense} == set(shapes.DENSE_NK)
    assert sorted({s.m for s in dense}) == [1, 2, 4, 8, 16, 32, 64, 128] and len(set(dense)) == 48
    assert len(narrow) == 24 and len(set(narrow)) == 24
    assert {s.n for s in narrow} == {256, 512, 1024} and {s.k for s in narrow} == {4096, 7168}
    assert {s.m for s in narrow} == {1, 16, 64, 128}
    assert len(masked) == 24 and len(set(masked)) == 24 and {s.kind for s in masked} == {"masked"}
    assert {s.groups for s in masked} == {8, 32, 128} and {s.m for s in masked} == {1, 4, 16, 32}
    assert {(s.n, s.k) for s in masked} == {(4096, 7168), (7168, 2048)}
    assert {s.kind for s in dense + narrow} == {"normal"} and max(s.m for s in dense + narrow) <= 128
    full = shapes.decode_shapes(quick=False)
    assert [t for t, _ in full] == ["dense"] * 48 + ["narrow"] * 24 + ["masked"] * 24
    quick = shapes.decode_shapes(quick=True)
    assert 0 < len(quick) < 10 and {t for t, _ in quick} == {"dense", "narrow", "masked"}
    for table, shape in quick:
        assert shape in shapes.DECODE_TABLES[table]


def test_decode_masked_draw_is_fixed_with_empty_groups():
    for g in (8, 32, 128):
        for e in (1, 4, 16, 32):
            m = shapes.decode_masked_m(g, e)
            max_m = shapes.decode_max_m(e)
            assert m.dtype == np.int32 and m.shape == (g,) and np.array_equal(m, shapes.decode_masked_m(g, e))
            assert m.min() >= 0 and m.max() <= 2 * e <= max_m and max_m % 64 == 0 and m.sum() > 0
            assert (m == 0).sum() >= g // 4
    assert shapes.decode_max_m(1) == shapes.decode_max_m(32) == 64 and shapes.decode_max_m(33) == 128


def test_decode_bytes_and_roofline_fraction_by_hand():
    # 64x2112x7168: MK + NK + 2MN = 458752 + 15138816 + 270336 = 15.9 MB
    assert shapes.gemm_bytes(64, 2112, 7168) == 15_867_904
    # masked: 8 valid rows in 2 non-empty groups of 4: 8*8 (A) + 2*8*4 (D) + 2*4*8 (the two groups' B)
    assert shapes.masked_decode_bytes([0, 3, 5, 0], n=4, k=8) == 64 + 64 + 64
    assert shapes.masked_decode_bytes(np.array([0, 0, 1], dtype=np.int32), 16, 128) == 128 + 32 + 16 * 128
    # floor at 4 TB/s with a 2 µs empty kernel: 15867904 / 4e12 = 3.966976 µs; + 2 µs; over 10 µs
    f = shapes.roofline_fraction(15_867_904, 10e-6, 4e12, 2e-6)
    assert f == pytest.approx(0.5966976)


def test_add_roofline_and_summary_on_synthetic_rows():
    floor = {"copy_bytes_per_s": 4e12, "empty_kernel_s": 2e-6}

    def row(table, shape, t_cg, t_dg=None, status="ok", t_read=4e-6):
        entries = {"cugemm8": {"status": status, "median_s": t_cg}, "read": {"status": "ok", "median_s": t_read}}
        if t_dg:
            entries["deepgemm"] = {"status": "ok", "median_s": t_dg}
        r = tables.finish_row({**tables.base_row(shape), "table": table, "bytes": 4_000_000}, entries)
        return decode.add_roofline(r, floor)

    rows = [row("dense", shapes.Shape("normal", 1, 1, 2112, 7168), 3e-6, 6e-6),
            row("dense", shapes.Shape("normal", 1, 2, 2112, 7168), 12e-6, 6e-6),
            row("dense", shapes.Shape("normal", 1, 4, 2112, 7168), 1e-6, status="wrong"),
            row("narrow", shapes.Shape("normal", 1, 1, 256, 4096), 6e-6),
            row("masked", shapes.Shape("masked", 8, 1, 4096, 7168), 30e-6, 30e-6),
            {**tables.base_row(shapes.Shape("masked", 8, 4, 4096, 7168)), "table": "masked", "error": "boom"}]
    # floor = 4e6 / 4e12 + 2e-6 = 3 µs
    assert rows[0]["results"]["cugemm8"]["roofline_fraction"] == pytest.approx(1.0)
    assert rows[0]["results"]["deepgemm"]["roofline_fraction"] == pytest.approx(0.5)
    s = decode.decode_summary(rows, {"graph": {"per_call_s": 5e-6}})
    assert s["roofline_geomean_dense"] == pytest.approx(0.5)      # 1.0 and 0.25; the wrong row is left out
    assert s["rows_scored_dense"] == 2 and s["roofline_geomean_narrow"] == pytest.approx(0.5)
    assert s["roofline_geomean_masked"] == pytest.approx(0.1)
    assert s["roofline_min"] == pytest.approx(0.1) and s["roofline_min_shape"] == "m8x1x4096x7168"
    assert s["deepgemm_over_cugemm8_geomean_dense"] == pytest.approx(1.0) and s["rows_compared_deepgemm_dense"] == 2
    assert s["graph_us_per_call"] == pytest.approx(5.0)
    assert s["cugemm8_not_ok"] == ["4x2112x7168", "m8x4x4096x7168"]
    # the read: 3 µs floor over 4 µs everywhere; DeepGEMM at 6 µs is 1.5x the read, cugemm8 0.75x and 3x it
    assert s["read_roofline_geomean_dense"] == pytest.approx(0.75) and s["read_roofline_min"] == pytest.approx(0.75)
    assert s["deepgemm_over_read_geomean_dense"] == pytest.approx(1.5)
    assert s["cugemm8_over_read_geomean_dense"] == pytest.approx(1.5)
    assert decode.decode_summary([])["roofline_geomean_dense"] is None


def test_parse_args_and_cli_without_a_gpu():
    a = cli.parse_args(["--only", "decode", "--quick", "--no-peers"])
    assert a.sections == ["decode"] and a.quick and a.no_peers and "decode" in cli.SECTIONS
    assert cli.parse_args([]).sections[-1] == "decode"   # last: the longest
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",   # never benchmarks, even where a GPU is present
               PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "decode", "--quick", "--no-peers",
                           "--out", "/nonexistent/never-written"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "cannot start on a GPU" in proc.stderr, proc.stdout + proc.stderr
    code = "import sys, benchmarks.decode; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


# ----------------------------------------------------------------------------- a dry run on NumPy
GEMM_S, EMPTY_S, COPY_BW = 10e-6, 2e-6, 4e12


class Clock(protocol.Timer):
    """The real Timer on a device whose clock only the stubbed GPU work advances."""

    def __init__(self):
        dev = types.SimpleNamespace(now=0.0, flush=lambda: None, event=dict, sync=lambda: None,
                                    elapsed_s=lambda s, e: e["t"] - s["t"])
        dev.record = lambda ev: ev.__setitem__("t", dev.now)
        super().__init__(dev, settle_s=0)

    def advance(self, seconds):
        self.device.now += seconds


class FakeStream:
    """Stream capture by recording the stubs' work; a graph replays it."""

    def __init__(self, fail=False):
        self.captured, self.fail = None, fail

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self):
        if self.fail:
            raise RuntimeError("capture not supported on this stream")
        self.captured = []

    def end_capture(self):
        work, self.captured = self.captured, None
        return types.SimpleNamespace(launch=lambda stream=None: [w() for w in work])


class FakeEnv:
    plan = Env.plan

    def __init__(self, capture_fails=False):
        self.timer = Clock()
        self.stream = FakeStream(fail=capture_fails)
        self.lib, self.num_sms, self.is_anchor_gpu = library.current(), 132, False
        self.peers, self.peers_note, self.deepgemm = None, "disabled (--no-peers)", None
        self.rng = np.random.default_rng(0)
        self.cp, self.cg = self.fake_cupy(), self.fake_cugemm8()

    def randn(self, shape):
        return self.rng.standard_normal(shape).astype(np.float32)

    def sync(self):
        pass

    def free(self):
        pass

    def gpu_work(self, fn, stream, seconds=GEMM_S):
        """Run fn now, or record it when `stream` is capturing; either way the clock moves when it runs."""
        def work():
            self.timer.advance(seconds)
            fn()
        if stream is not None and stream.captured is not None:
            stream.captured.append(work)
        else:
            work()

    def fake_cupy(self):
        env = self

        def buffer(size, dtype=None):
            copy = lambda src, nbytes, stream=None: env.timer.advance(2 * nbytes / COPY_BW)  # noqa: E731
            return types.SimpleNamespace(data=types.SimpleNamespace(copy_from_device_async=copy))

        def raw_kernel(code, name):
            assert "__global__ void " + name in code
            return lambda grid, block, args: env.timer.advance(EMPTY_S)

        class ReadKernel:   # the read yardstick: its bytes at the copy's bandwidth, plus a launch
            max_dynamic_shared_size_bytes = 0

            def __call__(self, grid, block, args, shared_mem=0):
                assert grid == (env.num_sms,) and shared_mem == self.max_dynamic_shared_size_bytes > 48 * 1024
                env.timer.advance(grid[0] * int(args[1]) / COPY_BW + EMPTY_S)

        def raw_module(code):
            return types.SimpleNamespace(get_function=lambda name: (ReadKernel() if "__global__ void " + name in code
                                                                    else None))

        cp = types.SimpleNamespace(**{k: getattr(np, k) for k in ("float32", "float64", "uint8", "uint16", "uint32",
                                                                  "int32", "empty", "empty_like", "asarray")})
        cp.ones = cp.zeros = buffer
        cp.RawKernel, cp.RawModule = raw_kernel, raw_module
        cp.cuda = types.SimpleNamespace(Stream=lambda non_blocking=False: FakeStream())
        return cp

    def fake_cugemm8(self):
        env = self

        def matmul(a, sa, b, sb, out=None, stream=None):
            out = np.empty((a.shape[0], b.shape[0]), dtype=BF16) if out is None else out
            env.gpu_work(lambda: out.__setitem__(..., reference.reference_matmul(a, sa, b, sb).astype(BF16)), stream)
            return out

        def masked(a, sa, b, sb, masked_m, expected_m, out=None, stream=None):
            assert type(expected_m) is int and expected_m > 0
            out = np.empty((a.shape[0], a.shape[1], b.shape[1]), dtype=BF16) if out is None else out

            def run():   # only the valid rows are written, as the kernel does
                d = reference.reference_grouped_masked(a, sa, b, sb, masked_m)
                for g, m in enumerate(masked_m):
                    out[g, :m] = d[g, :m].astype(BF16)
            env.gpu_work(run, stream)
            return out

        return types.SimpleNamespace(
            matmul=matmul, m_grouped_matmul_masked=masked, per_token_cast_to_fp8=quantize.per_token_cast_to_fp8_numpy,
            per_block_cast_to_fp8=quantize.per_block_cast_to_fp8_numpy, get_col_major_tma_aligned_tensor=lambda s: s,
            api=types.SimpleNamespace(BF16=BF16))


SMALL = [("dense", shapes.Shape("normal", 1, 1, 256, 256)), ("narrow", shapes.Shape("normal", 1, 16, 256, 384)),
         ("masked", shapes.Shape("masked", 8, 4, 256, 256))]


@pytest.mark.parametrize("capture_fails", [False, True])
def test_run_decode_dry_run(monkeypatch, capsys, capture_fails):
    monkeypatch.setattr(decode, "decode_shapes", lambda quick: SMALL)
    monkeypatch.setattr(decode, "GRAPH_SHAPE", (64, 256, 256))
    env = FakeEnv(capture_fails)
    partials = []
    res = decode.run_decode(env, types.SimpleNamespace(quick=True, reps=5, checkpoint=partials.append))
    assert [len(p["rows"]) for p in partials] == [3, 3, 3] and partials[0]["partial"]   # one list, growing
    assert res["floor"]["copy_bytes_per_s"] == pytest.approx(COPY_BW)
    assert res["floor"]["empty_kernel_s"] == pytest.approx(EMPTY_S) and res["floor_after"]["empty_kernel_s"]
    rows = res["rows"]
    assert [r.get("error") for r in rows] == [None] * 3
    assert [r["table"] for r in rows] == ["dense", "narrow", "masked"] and rows[1]["narrow"] and not rows[0]["narrow"]
    for r in rows:
        cg = r["results"]["cugemm8"]
        assert cg["status"] == "ok" and cg["diff"] < 1e-3 and cg["median_s"] == pytest.approx(GEMM_S)
        assert cg["roofline_fraction"] == pytest.approx((r["bytes"] / COPY_BW + EMPTY_S) / GEMM_S)
        assert r["config"] and r["a_scale_layout"] == "tma-aligned"
        # the read of the row's bytes (rounded up to 16 bytes a CTA) at the copy's bandwidth scores about 1
        rd = r["results"]["read"]
        assert rd["status"] == "ok" and rd["diff"] is None
        assert r["bytes"] <= (rd["median_s"] - EMPTY_S) * COPY_BW < r["bytes"] + 16 * env.num_sms
        assert rd["roofline_fraction"] == pytest.approx(1.0, rel=1e-3)
    assert rows[0]["bytes"] == 256 + 256 * 256 + 2 * 256
    m = rows[2]
    assert m["max_m"] == 64 and m["masked_m"] == shapes.decode_masked_m(8, 4).tolist()
    assert m["bytes"] == shapes.masked_decode_bytes(m["masked_m"], 256, 256) and m["empty_groups"] >= 2
    g = res["graph"]
    if capture_fails:
        assert "capture not supported" in g["capture_errors"][0] and g["captured_on"] == "new non-blocking stream"
    else:
        assert g["captured_on"] == "benchmark stream" and "capture_errors" not in g
    assert g["diff"] < 1e-3 and "none between the calls inside the graph" in g["flush"]
    for name in ("graph", "eager", "single"):
        assert g[name]["per_call_s"] == pytest.approx(GEMM_S)
    s = res["summary"]
    assert s["graph_us_per_call"] == pytest.approx(10.0) and s["cugemm8_not_ok"] == []
    assert s["read_roofline_geomean_dense"] == pytest.approx(1.0, rel=1e-3)
    assert s["read_roofline_min"] == pytest.approx(1.0, rel=1e-3)
    assert s["cugemm8_over_read_geomean_narrow"] == pytest.approx(GEMM_S / rows[1]["results"]["read"]["median_s"])
    assert s["copy_bandwidth_after_over_before"] == pytest.approx(1.0)
    out = capsys.readouterr().out
    assert "== decode" in out and "-- masked" in out and "m8x4x256x256" in out and "CUDA graph, 20 x 64x256x256" in out
    assert "copy 0.00 TB/s" not in out and "copy 4.00 TB/s" in out
    report.print_summary({"decode": res}, {"gpu": "x", "sms": 1, "reps": 5}, Path("x.json"))
    assert "decode: roofline fraction geomean dense" in capsys.readouterr().out
    why = report.write_decode_chart(Path("/nonexistent/x.png"), [], "t")
    assert why == "no rows" or why.startswith("matplotlib unavailable")


def test_calibrate_failures_leave_no_fractions(monkeypatch, capsys):
    env = FakeEnv()
    env.cp.RawKernel = None   # not callable: the empty kernel fails
    floor = decode.calibrate(env, 3)
    assert "error" in floor["empty_kernel"] and floor["empty_kernel_s"] is None and floor["copy_bytes_per_s"]
    row = decode.add_roofline({"bytes": 10, "results": {"cugemm8": {"status": "ok", "median_s": 1e-5}}}, floor)
    assert row["results"]["cugemm8"]["roofline_fraction"] is None
    decode.print_floor(floor)
    decode.print_tail({"graph": {"error": "x"}, "summary": decode.decode_summary([])})
    out = capsys.readouterr().out
    assert "no fractions" in out and "CUDA graph: x" in out

"""CPU tier: `python -m cugemm8` as a user meets it: sass --config-only without a disassembler, sizes checked
as the API checks them, one-line errors with exit status 2 or 1, a quiet broken pipe, precompile and cache."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cugemm8 import __main__ as cli
from cugemm8 import heuristics, heuristics_wgrad, jit

REPO = Path(__file__).resolve().parents[2]


def run(*args, env=None, **kwargs):
    full = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run([sys.executable, "-m", "cugemm8", *args], capture_output=True, text=True, env=full, **kwargs)


def test_sass_config_only_matches_the_heuristic(capsys):
    assert cli.main(["sass", "--m", "64", "--n", "2112", "--k", "7168", "--sms", "132", "--config-only"]) == 0
    line = json.loads(capsys.readouterr().out)
    cfg = heuristics.choose("normal", 64, 2112, 7168, 1, 132).config
    assert (line["block_m"], line["block_n"], line["split_k"]) == (cfg.block_m, cfg.block_n, cfg.split_k)


def test_sass_weight_gradient_config_only(capsys):
    assert cli.main(["sass", "--layout", "k_grouped_wgrad", "--groups", "8", "--m", "2048", "--n", "7168", "--sms", "132",
                     "--config-only"]) == 0
    line = json.loads(capsys.readouterr().out)
    cfg = heuristics_wgrad.choose("k_grouped", 2048, 7168, 8, 132).config
    assert (line["out_format"], line["k"], line["block_n"], line["num_groups"]) == ("float32", 0, cfg.block_n, 8)


@pytest.mark.parametrize("args, shown", [
    (["--m", "64", "--n", "2112"], "--k is required for the normal layout"),
    (["--m", "64", "--n", "2112", "--layout", "wgrad", "--out-dtype", "float8_e4m3"], "output is float32"),
    (["--m", "64", "--n", "100", "--k", "7168"], "--n must be a positive multiple of 8; got 100"),
    (["--m", "64", "--n", "2112", "--k", "100"], "--k must be a positive multiple of 16; got 100"),
    (["--m", "0", "--n", "2112", "--k", "7168"], "--m must be >= 1"),
    (["--m", "64", "--n", "2112", "--k", "7168", "--groups", "2"], "--groups must be >= 1"),
    (["--m", "100", "--n", "2112", "--k", "7168", "--layout", "contiguous", "--groups", "2"], "multiple of 64"),
    (["--m", "64", "--n", "2120", "--k", "7168", "--out-dtype", "float8_e4m3"], "multiple of 16"),
])
def test_sass_sizes_one_line_errors(args, shown, capsys):
    assert cli.main(["sass", *args, "--sms", "132", "--config-only"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cugemm8: error: ") and shown in err and err.count("\n") == 1


def test_sass_without_disassembler_says_what_to_install(monkeypatch, capsys):
    def missing(name):
        raise FileNotFoundError(name)

    monkeypatch.setattr("cugemm8.sass.tool_path", missing)
    assert cli.main(["sass", "--m", "64", "--n", "256", "--k", "256", "--sms", "132"]) == 1
    assert 'pip install "cugemm8[sass]"' in capsys.readouterr().err


def test_broken_pipe_is_quiet():
    """`python -m cugemm8 sass ... | head -1`: no traceback when the reader leaves."""
    p = subprocess.Popen([sys.executable, "-m", "cugemm8", "sass", "--m", "64", "--n", "256", "--k", "256", "--sms",
                          "132"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(REPO)))
    p.stdout.readline()
    p.stdout.close()   # the reader goes away before the SASS is written
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_precompile_and_cache(tmp_path):
    env = {"CUGEMM8_CACHE_DIR": str(tmp_path / "c")}
    res = run("precompile", "--n", "4096", "--k", "512", "--m", "1:64", "--sms", "132", "--quiet", env=env)
    assert res.returncode == 0, res.stderr
    kernels = int(res.stdout.split()[0])
    (tmp_path / "c" / ".tmp-unfinished.cubin").write_bytes(b"x")   # a write under way is not a kernel
    info = json.loads(run("cache", "info", env=env).stdout)
    assert info["cache_entries"] == kernels >= 1 and info["cache_dir"] == str(tmp_path / "c")
    cleared = run("cache", "clear", env=env)
    assert cleared.returncode == 0 and f"removed {kernels} kernels and {kernels + 1} lock" in cleared.stdout
    assert json.loads(run("cache", "info", env=env).stdout)["cache_entries"] == 0


def test_precompile_bad_range_is_one_line():
    res = run("precompile", "--n", "4096", "--k", "512", "--m", "64:1", "--sms", "132")
    assert res.returncode == 2 and res.stderr.startswith("cugemm8: error: m must be a range")
    assert "Traceback" not in res.stderr


def test_info_says_why_there_is_no_gpu():
    res = run("info")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert (info["gpu"] is None) == (info["no_gpu_reason"] is not None)
    assert info["cache_dir"] == str(jit.cache_dir())

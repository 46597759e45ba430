"""CPU tier: cugemm8.precompile builds exactly the configurations the heuristic picks over an M range, into the
disk cache (later builds load them), in parallel processes too; its arguments are checked by name."""
import pytest

import cugemm8
from cugemm8 import fp8_gemm, heuristics, heuristics_wgrad, jit


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUGEMM8_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUGEMM8_JIT_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(jit, "_memory", {})
    return tmp_path / "cache"


def picked(layout, ms, n, k, groups=1, fmt="bfloat16"):
    return list(dict.fromkeys(heuristics.choose(layout, m, n, k, groups, 132, fmt).config for m in ms))


def test_builds_what_the_heuristic_picks(cache, monkeypatch, capsys):
    configs = cugemm8.precompile(2112, 7168, m=(1, 200), num_sms=132, progress=True)
    assert configs == picked("normal", range(1, 201), 2112, 7168) and len(configs) > 1
    assert len(list(cache.glob("*.cubin"))) == len(configs)
    assert f"{len(configs)}/{len(configs)} kernels" in capsys.readouterr().err
    compiles = []
    monkeypatch.setattr(jit, "compile_cubin", lambda *a, **kw: compiles.append(a))
    monkeypatch.setattr(jit, "_memory", {})
    for cfg in configs:            # what a server's first calls do: load, not compile
        fp8_gemm.build(cfg)
    assert compiles == []


def test_grouped_fp8_and_parallel(cache):
    configs = cugemm8.precompile(4096, 512, layout="masked", m=[1, 16, 64], groups=8, num_sms=132,
                                 out_dtype="float8_e4m3", jobs=2, progress=False)
    assert configs == picked("masked", [1, 16, 64], 4096, 512, 8, "float8_e4m3")
    assert all(cfg.out_format == "float8_e4m3" for cfg in configs)
    assert len(list(cache.glob("*.cubin"))) == len(configs)


def test_weight_gradients(cache):
    """The weight gradients' kernels: K is a run-time value (None), the picks are heuristics_wgrad.choose's."""
    configs = cugemm8.precompile(2112, None, layout="wgrad", m=[512, 7168], num_sms=132, progress=False)
    assert configs == list(dict.fromkeys(heuristics_wgrad.choose("normal", m, 2112, 1, 132).config for m in (512, 7168)))
    grouped = cugemm8.precompile(4096, None, layout="k_grouped_wgrad", m=7168, groups=8, num_sms=132, progress=False)
    assert grouped == [heuristics_wgrad.choose("k_grouped", 7168, 4096, 8, 132).config]
    assert all(cfg.wgrad for cfg in configs + grouped)
    assert len(list(cache.glob("*.cubin"))) == len(configs) + 1


@pytest.mark.parametrize("kwargs, error, shown", [
    (dict(n=100), ValueError, "n must be a positive multiple of 8"),
    (dict(k=8), ValueError, "k must be a positive multiple of 16"),
    (dict(n=2112.0), TypeError, "n must be an int"),
    (dict(layout="dense"), ValueError, "layout must be one of"),
    (dict(groups=4), ValueError, "groups must be >= 1 (and 1 for the normal layout)"),
    (dict(layout="wgrad", groups=4), ValueError, "groups must be >= 1"),
    (dict(layout="wgrad", out_dtype="float8_e4m3"), ValueError, "the weight gradient's output is float32"),
    (dict(k=None), TypeError, "k must be an int"),
    (dict(m=(10, 5)), ValueError, "m must be a range"),
    (dict(m=0), ValueError, "m must hold at least one value"),
    (dict(m="1:8"), TypeError, "m must be an int"),
    (dict(jobs=0), ValueError, "jobs must be >= 1"),
    (dict(num_sms=0), ValueError, "num_sms must be positive"),
    (dict(out_dtype="float16"), ValueError, "out_dtype must be one of"),
    (dict(n=2120, out_dtype="float8_e4m3"), ValueError, "multiple of 16"),
])
def test_bad_arguments(kwargs, error, shown):
    args = dict(n=2112, k=7168, num_sms=132, progress=False)
    args.update(kwargs)
    n, k = args.pop("n"), args.pop("k")
    with pytest.raises(error) as caught:
        cugemm8.precompile(n, k, **args)
    assert shown in str(caught.value)

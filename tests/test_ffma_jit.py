"""The FFMA interleave patch applied through the JIT (fp8_gemm.build, fp8_gemm.get_launcher).

CPU tier: what fp8_gemm.build returns with the patch on and off, the cache keys, the environment
switches. GPU tier (Hopper only): the patched and unpatched kernels give bitwise identical results.
"""
import pytest

from cugemm8 import ffma, fp8_gemm, heuristics, jit, sass
from cugemm8.heuristics import KernelConfig
from gpu import requires_hopper

KERNEL = fp8_gemm.KERNEL_NAME


def config(block_m: int, block_n: int = 128, n: int = 2112, k: int = 7168) -> KernelConfig:
    """An explicit configuration (independent of the heuristic's current choices)."""
    return heuristics.make_config("normal", n, k, 1, block_m, block_n)


ONE_WG = config(64)      # one math warpgroup: ptxas leaves the promotion FFMAs without yields
TWO_WG = config(256)     # two math warpgroups: ptxas interleaves yields itself
OFF = {"enabled": False}
VARIANTS = {"on": {"enabled": True}, "fraction_1": {"enabled": True, "fraction": 1.0},
            "no_keep": {"enabled": True, "keep_compiler_yields": False}}


@pytest.fixture
def fresh_jit(tmp_path, monkeypatch):
    """An empty disk and memory cache, the default environment."""
    monkeypatch.setenv("CUGEMM8_CACHE_DIR", str(tmp_path))
    for var in ("CUGEMM8_JIT_DISABLE_CACHE", "CUGEMM8_DISABLE_FFMA_INTERLEAVE", "CUGEMM8_PRINT_FFMA_PATCH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(jit, "_memory", {})
    monkeypatch.setattr(fp8_gemm, "_printed", set())
    monkeypatch.setattr(ffma, "FFMA_INTERLEAVE_DEFAULT", True)
    return tmp_path


@pytest.fixture(scope="module")
def raw_one_wg():
    return jit.compile_cubin(fp8_gemm.render(ONE_WG), name=f"{KERNEL}.cu")   # the name build() gives


def test_patch_is_applied_by_build(fresh_jit, raw_one_wg):
    off = fp8_gemm.build(ONE_WG, ffma=OFF)
    on = fp8_gemm.build(ONE_WG)
    assert off == raw_one_wg
    expected, count = ffma.interleave(raw_one_wg)
    assert on == expected and count > 0

    # Only the hi words of FFMA instructions differ, and each by exactly the patch's two bits.
    offset, size = sass.text_sections(raw_one_wg)[KERNEL]
    assert len(on) == len(off)
    diff = [i for i in range(len(on)) if on[i] != off[i]]
    assert diff and all(offset <= i < offset + size and (i - offset) % 16 >= 8 for i in diff)
    old = list(sass.instructions(off, KERNEL))
    new = list(sass.instructions(on, KERNEL))
    changed = [(o, n) for o, n in zip(old, new) if o != n]
    assert len(changed) == count
    for (_, lo, hi), (_, new_lo, new_hi) in changed:
        assert sass.is_ffma_rrr(lo, hi) and new_lo == lo and hi ^ new_hi == ffma.PATCH_MASK


def test_variants_follow_their_settings(fresh_jit, raw_one_wg):
    for name, spec in VARIANTS.items():
        s = ffma.ffma_settings(spec)
        expected, _ = ffma.interleave(raw_one_wg, s.fraction, keep_compiler_yields=s.keep_compiler_yields)
        assert fp8_gemm.build(ONE_WG, ffma=spec) == expected, name
        assert fp8_gemm.build(ONE_WG, ffma=s) == expected, name   # FfmaSettings accepted as well


def test_cache_keys_differ_between_on_and_off(fresh_jit, raw_one_wg):
    specs = {"off": OFF, "default": None, **VARIANTS}
    versions = {name: ffma.ffma_settings(spec).patch_version for name, spec in specs.items()}
    assert versions["off"] == "off" and versions["default"] == versions["on"]
    assert len(set(versions.values())) == len(specs) - 1
    for name, version in versions.items():
        if name != "off":
            assert ffma.PATCHER_VERSION in version
    source, options = fp8_gemm.render(ONE_WG), jit.default_options()
    keys = {jit.cache_key(source, options, v) for v in versions.values()}
    assert len(keys) == len(specs) - 1

    cubins = {name: fp8_gemm.build(ONE_WG, ffma=spec) for name, spec in specs.items()}
    assert len(list(fresh_jit.rglob("*.cubin"))) == len(keys)   # one disk entry per key
    # A new process's view (empty memory cache): each variant comes back from disk unchanged.
    jit._memory.clear()
    for name, spec in specs.items():
        assert fp8_gemm.build(ONE_WG, ffma=spec) == cubins[name], name
    assert cubins["off"] == raw_one_wg and cubins["on"] != cubins["off"]


def test_environment_switches(fresh_jit, raw_one_wg, monkeypatch):
    patched, _ = ffma.interleave(raw_one_wg)
    assert ffma.ffma_settings(None) == ffma.FfmaSettings()
    monkeypatch.setenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE", "1")
    assert ffma.ffma_settings(None).enabled is False
    assert fp8_gemm.build(ONE_WG) == raw_one_wg
    assert fp8_gemm.build(ONE_WG, ffma={"enabled": True}) == patched   # explicit settings win
    monkeypatch.setenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE", "0")
    assert fp8_gemm.build(ONE_WG) == patched
    # The default policy is a module constant.
    monkeypatch.delenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE")
    monkeypatch.setattr(ffma, "FFMA_INTERLEAVE_DEFAULT", False)
    assert fp8_gemm.build(ONE_WG) == raw_one_wg
    monkeypatch.setenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE", "0")
    assert fp8_gemm.build(ONE_WG) == patched


def test_print_patch(fresh_jit, monkeypatch, capsys):
    monkeypatch.setenv("CUGEMM8_PRINT_FFMA_PATCH", "1")
    fp8_gemm.build(ONE_WG)
    first = capsys.readouterr().out
    assert "patching" in first and "FFMAs changed" in first and " FFMA R" in first
    fp8_gemm.build(ONE_WG)                      # memory-cache hit, already reported: silent
    assert capsys.readouterr().out == ""
    jit._memory.clear()
    fp8_gemm._printed.clear()
    fp8_gemm.build(ONE_WG)                      # disk-cache hit: the same changes are reported
    again = capsys.readouterr().out
    assert "JIT cache" in again
    changes = [line for line in first.splitlines() if " FFMA R" in line]
    assert changes == [line for line in again.splitlines() if " FFMA R" in line]
    fp8_gemm.build(ONE_WG, ffma=OFF)
    assert " FFMA R" not in capsys.readouterr().out


def test_patch_error_falls_back_to_unpatched(fresh_jit, raw_one_wg, monkeypatch):
    def refuse(*args, **kwargs):
        raise ffma.FfmaPatchError("test")

    monkeypatch.setattr(ffma, "interleave", refuse)
    with pytest.warns(RuntimeWarning, match="unpatched"):
        assert fp8_gemm.build(ONE_WG) == raw_one_wg


def test_default_constants_are_read_at_call_time(monkeypatch):
    monkeypatch.delenv("CUGEMM8_DISABLE_FFMA_INTERLEAVE", raising=False)
    monkeypatch.setattr(ffma, "FFMA_INTERLEAVE_DEFAULT", True)
    monkeypatch.setattr(ffma, "FFMA_DEFAULT_FRACTION", 0.5)
    monkeypatch.setattr(ffma, "FFMA_DEFAULT_KEEP_COMPILER_YIELDS", False)
    expected = ffma.FfmaSettings(enabled=True, fraction=0.5, keep_compiler_yields=False)
    assert ffma.ffma_settings(None) == expected == ffma.ffma_settings({})


def test_settings_validation():
    with pytest.raises(ValueError):
        ffma.ffma_settings({"enabled": True, "fractoin": 0.5})
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError):
            ffma.ffma_settings({"fraction": bad})
    with pytest.raises(TypeError):
        ffma.ffma_settings({"enabled": 1})
    with pytest.raises(TypeError):
        ffma.ffma_settings(True)
    s = ffma.ffma_settings({"fraction": 1})
    assert s.fraction == 1.0 and isinstance(s.fraction, float)
    assert hash(s) == hash(ffma.FfmaSettings(fraction=1.0))


# ----------------------------------------------------------------------------- GPU tier


def _launch_all(cfg, specs, m, seed):
    """Output bytes (uint16) of `cfg` for each FFMA setting, on the same random inputs."""
    import cupy

    import cugemm8

    rng = cupy.random.default_rng(seed)
    a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, cfg.k), dtype=cupy.float32))
    b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal((cfg.n, cfg.k), dtype=cupy.float32))
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    stream = cupy.cuda.get_current_stream()
    outs = {}
    for name, spec in specs.items():
        out = cupy.full((m, cfg.n), 0xFFFF, dtype=cupy.uint16)    # NaN: unwritten outputs differ from any result
        run = fp8_gemm.bind(cfg, a, sa, b, sb, out, ffma=spec)
        assert run.launcher.kernel.ffma == ffma.ffma_settings(spec)
        run()
        outs[name] = out
    stream.synchronize()
    return outs


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("cfg", [ONE_WG, TWO_WG], ids=["block_m_64", "block_m_256"])
def test_patched_results_bitwise_identical(cfg):
    import cupy


    specs = {"off": OFF, "default": None, **VARIANTS}
    if cfg is ONE_WG:
        assert fp8_gemm.build(cfg, ffma=VARIANTS["on"]) != fp8_gemm.build(cfg, ffma=OFF)
    dev = cupy.cuda.runtime.getDevice()
    assert fp8_gemm.get_kernel(cfg, dev, OFF) is not fp8_gemm.get_kernel(cfg, dev, VARIANTS["on"])
    for m, seed in ((200, 1), (1000, 2)):
        outs = _launch_all(cfg, specs, m, seed)
        ref = outs.pop("off")
        assert not bool((ref == 0xFFFF).any()), "some outputs were not written"
        for name, out in outs.items():
            assert bool(cupy.array_equal(out, ref)), f"{name}: results differ from the unpatched kernel (M={m})"

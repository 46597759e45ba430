"""CPU tier for the probes (benchmarks.tile_probe, ablation_probe, wgrad_probe, segments_probe, stream_probe,
l2_side_probe, stream_shape_probe): no GPU; the last two probes' kernels, and a weight gradient with a probe macro, are
compiled by NVRTC."""
import dataclasses

import pytest

from benchmarks import ablation_probe
from benchmarks.tile_probe import tile_config
from cugemm8 import heuristics


def test_tile_names():
    plain = tile_config("256x128", 4096, 7168, "bfloat16")
    assert plain == heuristics.make_config("normal", 4096, 7168, 1, 256, 128)
    assert tile_config("256x128s2", 4096, 7168, "bfloat16").stages == 2
    pairs = tile_config("128x128s4c2", 4096, 7168, "bfloat16")
    assert (pairs.block_m, pairs.block_n, pairs.stages, pairs.cluster) == (128, 128, 4, 2)
    assert tile_config("128x128", 4096, 7168, "float8_e4m3").out_fp8
    split = tile_config("64x128k2", 4096, 7168, "float8_e4m3")
    assert (split.split_k, split.stream_b) == (2, True)
    plain_b = tile_config("64x128k2n", 4096, 7168, "float8_e4m3")
    assert (plain_b.split_k, plain_b.stream_b) == (2, False) and plain_b == dataclasses.replace(split, stream_b=False)
    assert tile_config("256x128s2r16", 4096, 7168, "bfloat16").raster_group == 16
    pick = heuristics.choose("normal", 16384, 32768, 512, 1, 132).config
    assert tile_config("pick", 32768, 512, "bfloat16", 16384) == pick
    assert tile_config("pickr32", 32768, 512, "bfloat16", 16384) == dataclasses.replace(pick, raster_group=32)
    with pytest.raises(SystemExit, match="needs M"):
        tile_config("pick", 32768, 512, "bfloat16")


@pytest.mark.parametrize("tile", ["256", "256x", "256x128s", "256x128c3", "x128", "256x128 ", "pickr", "256x128c2r8"])
def test_malformed_tile_names_are_refused(tile):
    with pytest.raises(SystemExit, match="expected BMxBN"):
        tile_config(tile, 4096, 7168, "bfloat16")


def test_report_lines(capsys):
    from benchmarks.tile_probe import report

    times = {"256x128 s3 base": [2e-6, 2e-6, 2e-6], "256x128 s3 no-loads": [1e-6, 1e-6, 1e-6]}
    report("8x8x8", times, 8_000_000, lambda name: name.rsplit(" ", 1)[0] + " base", "base")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-2:] == ["1.000x", "base"] and lines[1].split()[-2:] == ["0.500x", "base"]
    assert "2.0 us" in lines[0] and "8 TFLOPS" in lines[1]


def test_more_stages_than_fit_is_refused():
    most = heuristics.make_config("normal", 4096, 7168, 1, 256, 128).stages
    with pytest.raises(SystemExit, match=f"1 to {most} stages"):
        tile_config(f"256x128s{most + 1}", 4096, 7168, "bfloat16")


def test_ablation_variants_name_probe_macros_only():
    """Every macro a variant defines is one the CUDA sources test under #ifdef, and none of them is defined by the
    library's own render (the shipped kernels never see them)."""
    from pathlib import Path

    sources = "".join(p.read_text() for p in Path("cuda_src").rglob("*.cuh"))
    macros = {m for defines in ablation_probe.VARIANTS.values() for m in defines}
    assert macros == {"CG8_PROBE_NO_PROMOTE", "CG8_PROBE_NO_LOADS", "CG8_PROBE_NO_MMA", "CG8_PROBE_NO_AMAX_EXCHANGE"}
    for m in macros:
        assert f"#ifdef {m}" in sources
    render = heuristics.make_config("normal", 4096, 7168, 1, 256, 128)
    from cugemm8 import fp8_gemm
    assert "CG8_PROBE" not in fp8_gemm.render(render)


def test_unknown_variants_are_refused():
    with pytest.raises(SystemExit, match="unknown variants"):
        ablation_probe.main(["--variants", "base,no-lods"])
    from benchmarks import wgrad_probe
    with pytest.raises(SystemExit, match="unknown variants"):
        wgrad_probe.main(["--variants", "base,turns"])


def test_wgrad_tile_names():
    from benchmarks.wgrad_probe import tile_config
    from cugemm8 import heuristics_wgrad

    assert tile_config("128x160", 2112) == heuristics_wgrad.make_config("normal", 2112, 1, 128, 160)
    assert tile_config("128x128s5", 2112).stages == 5
    assert tile_config("128x128s5r16", 2112).raster_group == 16
    assert tile_config("pickr32", 2112, 7168) == dataclasses.replace(
        heuristics_wgrad.choose("normal", 7168, 2112, 1, 132).config, raster_group=32)
    with pytest.raises(SystemExit, match="expected BMxBN"):
        tile_config("128x128k2", 2112)
    with pytest.raises(SystemExit, match="expected BMxBN"):
        tile_config("pick", 2112)   # the pick needs M
    assert tile_config("128x160t", 4096, 7168) == heuristics_wgrad.make_config("normal", 7168, 1, 128, 160,
                                                                              transpose_d=True)
    assert tile_config("pick", 4096, 7168).transpose_d   # 7168x4096: D^T (NOTES.md v47)
    with pytest.raises(SystemExit, match="expected BMxBN"):
        tile_config("128x160t", 4096)   # D^T's kernel is over M


def test_no_promote_takes_the_weight_gradients_promotion_out():
    """The weight gradient's loop honours CG8_PROBE_NO_PROMOTE (wgrad_probe's `no-promote`): its 2 x 80 FP32
    operations a k-block (128x160: FMUL and FFMA per accumulator) are gone, the MMAs stay."""
    from benchmarks import wgrad_probe
    from cugemm8 import fp8_gemm, jit, sass

    cfg = wgrad_probe.tile_config("128x160", 2112)
    counts = {}
    for variant in ("base", "no-promote"):
        prefix = "".join(f"#define {name} 1\n" for name in ablation_probe.VARIANTS[variant])
        text = sass.disassemble(jit.compile_cubin(prefix + fp8_gemm.render(cfg)))
        counts[variant] = {op: text.count(op + " ") for op in ("FMUL", "FFMA", "QGMMA.64x160x32.F32.E4M3.E4M3")}
    assert counts["no-promote"]["FMUL"] + counts["no-promote"]["FFMA"] <= counts["base"]["FMUL"] + counts["base"]["FFMA"] - 150
    assert counts["no-promote"]["QGMMA.64x160x32.F32.E4M3.E4M3"] == counts["base"]["QGMMA.64x160x32.F32.E4M3.E4M3"]


@pytest.mark.parametrize("argv", [["--token-variants", "1x4,2"], ["--sizes", "4096"], ["--token-variants", "1xa"]])
def test_stream_probe_malformed_arguments_are_refused(argv):
    from benchmarks import stream_probe

    with pytest.raises(SystemExit, match="--token-variants BxC"):
        stream_probe.main(argv)


def test_stream_probe_macros_default_to_the_library_kernel():
    """The quantizer's probe macros keep the shipped values unless a probe sets them, and the host launches as many
    CTAs per SM as the kernel's bounds allow."""
    from pathlib import Path

    source = Path("cuda_src/quantize.cu").read_text()
    assert "#define CG8_TOKEN_BATCHES 1\n" in source and "#define CG8_TOKEN_CTAS 4\n" in source
    assert "4 * _sm_count(device)" in Path("cugemm8/quantize.py").read_text()


def test_split_tile_names():
    split = tile_config("128x128k2", 4096, 7168, "float8_e4m3")
    assert (split.split_k, split.stream_b, split.out_fp8) == (2, True, True)
    assert tile_config("128x128k3", 4096, 7168, "bfloat16").split_k == 3  # chunks of 5, 5 and 6 fragments
    with pytest.raises(SystemExit, match="cannot split"):
        tile_config("64x16k3", 4096, 7168, "bfloat16")   # 2 fragments do not make 3 chunks
    with pytest.raises(SystemExit, match="cannot split"):
        tile_config("128x128k2c2", 4096, 7168, "bfloat16")


@pytest.mark.parametrize("tile", ["128x64", "64x96", "64x256k2"])
def test_e4m3_tiles_the_kernel_rejects_are_refused_before_compiling(tile):
    """e4m3 output needs tiles a multiple of 128 wide, and 128 when split (config.cuh): the probes say so instead of
    failing in the JIT's static_assert on the device."""
    with pytest.raises(SystemExit, match="multiple of 128 wide"):
        tile_config(tile, 4096, 7168, "float8_e4m3")
    assert tile_config(tile, 4096, 7168, "bfloat16").block_n == int(tile.split("x")[1].split("k")[0])


def test_two_groups_separates_two_latency_classes_and_not_one():
    """l2_side_probe classes chunks by a two-means split; one class of latencies must read as one (low separation)."""
    import random

    from benchmarks.l2_side_probe import two_groups

    rng = random.Random(3)
    two = [rng.gauss(330, 8) for _ in range(500)] + [rng.gauss(450, 8) for _ in range(500)]
    threshold, separation = two_groups(two)
    assert 360 < threshold < 420 and separation > 3
    _, one = two_groups([rng.gauss(330, 8) for _ in range(1000)])
    assert one < 1.5


@pytest.mark.parametrize("module", ["l2_side_probe", "stream_shape_probe"])
def test_probe_kernels_compile_for_sm90a(module):
    """The probes' own kernels (compiled by CuPy on the device) compile with NVRTC for sm_90a here."""
    import importlib

    from cuda.bindings import nvrtc

    source = importlib.import_module(f"benchmarks.{module}").SOURCE
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{module}.cu".encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    (result,) = nvrtc.nvrtcCompileProgram(prog, 2, [b"-arch=sm_90a", b"-std=c++17"])
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode()


def test_probe_logs_open_with_the_gpu_date_versions_and_commit(monkeypatch):
    """tile_probe, ablation_probe, wgrad_probe and small_m_ab print tune.provenance_line() first, so a log read
    later names its GPU, date, driver, NVRTC and commit."""
    from benchmarks import tune

    monkeypatch.setattr(tune, "gpu_props", lambda: {"name": "NVIDIA H200", "num_sms": 132})
    monkeypatch.setattr(tune, "provenance", lambda: {"utc": "2026-11-26T22:00:00+00:00", "driver_api_version": 13000,
                                                      "nvrtc": "13.0", "git": {"commit": "abc", "dirty": False}})
    line = tune.provenance_line()
    for part in ("NVIDIA H200 (132 SMs)", "2026-11-26T22:00:00+00:00", "driver 13000", "NVRTC 13.0", "abc"):
        assert part in line


def test_segments_probe_layouts_and_pairs():
    """segments_probe: the tile names it parses (rN: band width), the -paired layout (the same experts, those of an odd
    number of 128-row blocks next to each other) and the share of CTA pairs within one expert it prints."""
    import numpy as np

    from benchmarks import segments_probe as sp, shapes

    assert sp.TILE.fullmatch("128x256pr16").groups() == ("128", "256", None, "p", "16")
    assert sp.TILE.fullmatch("128x256s2").groups() == ("128", "256", "2", None, None)
    assert sp.pair_odd_experts([128, 256, 300, 0, 200, 384]) == [256, 128, 300, 0, 200, 384]  # 384 has no partner
    drawn, paired = sp.layout_rows("uneven256", 64), sp.layout_rows("uneven256-paired", 64)
    assert sorted(drawn) == sorted(paired) and drawn != paired
    share = [sp.sharing_pairs(shapes.contiguous_layout(r, 128)[0]) for r in (drawn, paired)]
    assert share[0] == pytest.approx(42 / 72) and share[1] == pytest.approx(58 / 72)
    # a pair shares only where both blocks are one pass of one expert (a padding slab idles; a second expert is a pass)
    idx = np.array([0] * 128 + [0] * 64 + [-1] * 64 + [1] * 64 + [2] * 64 + [3] * 128, dtype=np.int32)
    assert sp.sharing_pairs(idx) == 0.5

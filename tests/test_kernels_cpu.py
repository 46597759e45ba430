"""CPU tier: every configuration the heuristic picks compiles for sm_90a, and its SASS looks right;
the heuristic's choices respect the hardware's limits."""
import functools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cugemm8 import heuristics, jit, kernels, sass

DENSE = [(m, n, k) for m in (64, 128, 4096)
         for n, k in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]
SPREAD = [(1, 8, 16), (7, 24, 112), (65, 136, 144), (200, 1000, 1040), (1000, 4104, 2000), (3000, 256, 7168),
          (129, 2048, 128), (257, 512, 4096), (17, 576, 7168), (2048, 7168, 576)]
CONTIGUOUS = [(4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168), (8, 4096, 7168, 2048),
              (3, 300, 136, 400)]
MASKED = [(g, e, n, k) for g, e in ((1, 1024), (2, 512), (4, 256)) for n, k in ((4096, 7168), (7168, 2048))] + [
    (32, 40, 24, 128)]
SMS = (132, 114, 78)
CONTIGUOUS_EXPLICIT = [heuristics.make_config("contiguous", n, 384, 5, bm, bn)
                       for bm, bn, n in ((256, 128, 256), (128, 128, 256), (64, 64, 256), (128, 160, 320))]

SPLIT_EXPLICIT = [heuristics.make_config("masked", bn, k, 3, bm, bn, tail_split=True)
                  for bm, bn, k in ((128, 128, 1024), (256, 128, 384), (64, 64, 256), (128, 144, 640))]


def picked_configs():
    configs = set()
    for sms in SMS:
        for m, n, k in DENSE + SPREAD:
            configs.add(heuristics.choose("normal", m, n, k, 1, sms).config)
        for g, m, n, k in CONTIGUOUS:
            configs.add(heuristics.choose("contiguous", g * m, n, k, g, sms).config)
        for g, m, n, k in MASKED:
            configs.add(heuristics.choose("masked", m, n, k, g, sms).config)
    # Multicast (clusters of 2) is not picked by the heuristic at present; compile the configurations
    # the GPU tier runs explicitly (tests/test_gpu_gemm.py::test_multicast_*).
    for bm, bn in ((256, 128), (128, 96), (64, 64)):
        configs.add(heuristics.make_config("normal", 8 * bn, 1040, 1, bm, bn, cluster=2))
    configs.add(heuristics.make_config("masked", 512, 1024, 3, 256, 128, cluster=2))
    # Contiguous tiles of every height over 64-row expert segments (tests/test_gpu_gemm.py).
    for cfg in CONTIGUOUS_EXPLICIT:
        configs.add(cfg)
    # The masked split last wave at every tile height (tests/test_gpu_gemm.py::test_masked_split_last_wave).
    for cfg in SPLIT_EXPLICIT:
        configs.add(cfg)
    return sorted(configs, key=repr)


CONFIGS = picked_configs()


@pytest.fixture(scope="module")
def compiled():
    return {cfg: jit.compile_cubin(kernels.render(cfg)) for cfg in CONFIGS}


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.layout}-n{c.n}-k{c.k}-g{c.num_groups}-"
                         f"{c.block_m}x{c.block_n}x{c.stages}")
def test_config_compiles_with_expected_sass(cfg, compiled):
    cubin = compiled[cfg]
    text = sass.disassemble(cubin)
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", text)
    names = {op.split(".")[0] for op in ops}
    assert any(op.startswith("QGMMA.64x%dx32.F32.E4M3.E4M3" % cfg.block_n) for op in ops), "no FP8 wgmma"
    assert "USETMAXREG" in names, "setmaxnreg missing"
    assert "UTMALDG" in names and "UTMASTG" in names, "TMA loads/stores missing"
    assert (cfg.cluster == 2) == any(op.startswith("UTMALDG.2D.MULTICAST") for op in ops), "multicast loads"
    assert not names & {"LDL", "STL"}, "local memory (spills) in the kernel"
    usage = sass.resource_usage(cubin)
    kern = usage[kernels.KERNEL_NAME]
    assert kern["STACK"] == 0 and kern.get("LOCAL", 0) == 0
    # The split tail's exchange: asynchronous stores into the peer CTA, and no GPU-wide memory barrier
    # (a cluster-scope release compiles to MEMBAR.ALL.GPU: 2.6 us per exchange, NOTES.md v10).
    assert ("STAS" in names) == cfg.tail_split, "st.async exactly in split-capable kernels"
    assert not (cfg.tail_split and "MEMBAR.ALL.GPU" in text), "GPU-wide memory barrier in a split kernel"


def test_trace_build_only_when_asked():
    """scripts/trace_timeline.py's instrumented build (CG8_TRACE) compiles, and without it the library's
    kernel carries no trace code."""
    cfg = heuristics.choose("masked", 256, 4096, 7168, 4, 132).config
    plain = sass.disassemble(jit.compile_cubin(kernels.render(cfg)))
    traced = sass.disassemble(jit.compile_cubin("#define CG8_TRACE 1\n" + kernels.render(cfg)))
    assert "SR_GLOBALTIMER" not in plain and "SR_GLOBALTIMER" in traced


def test_heuristic_picks_known_good_tiles():
    # The configuration every benchmark shape gets must fit, and large shapes must use big tiles.
    plan = heuristics.choose("normal", 4096, 7168, 16384, 1, 132)
    assert plan.config.block_m * plan.config.block_n >= 128 * 128
    assert heuristics.choose("normal", 64, 2112, 7168, 1, 132).config.block_m == 64


@settings(max_examples=300, deadline=None)
@given(layout=st.sampled_from(heuristics.LAYOUTS), m=st.integers(1, 70000), n=st.integers(1, 8192).map(lambda v: 8 * v),
       k=st.integers(1, 2048).map(lambda v: 16 * v), groups=st.integers(1, 64), sms=st.integers(1, 144))
def test_heuristic_limits(layout, m, n, k, groups, sms):
    if layout == "normal":
        groups = 1
    plan = heuristics.choose(layout, m, n, k, groups, sms)
    cfg = plan.config
    assert cfg.smem_bytes <= heuristics.SMEM_CAPACITY
    assert 1 <= plan.grid <= sms
    assert 1 <= cfg.stages <= max(1, -(-k // 128))
    assert cfg.block_n % 8 == 0 and cfg.block_m in (64, 128, 256)
    assert cfg.block_n <= 128 or 128 % (cfg.block_n - 128) == 0
    if layout == "contiguous":
        # Every tile size honours 64-row expert segments (one pass per expert run of 64-row slabs);
        # 256-row tiles, which more often span two experts, only where experts are large on average.
        assert heuristics.CONTIGUOUS_M_ALIGNMENT == 64 and cfg.block_n <= 128
        assert cfg.block_m < 256 or m >= heuristics.WIDE_ROWS * groups
    assert heuristics.choose(layout, m, n, k, groups, sms) == plan  # deterministic


@pytest.mark.parametrize("layout, m, n, k, groups", [("normal", 4096, 7168, 16384, 1), ("masked", 256, 4096, 7168, 3),
                                                    ("masked", 64, 2112, 7168, 37), ("contiguous", 8192, 4096, 200, 5)])
def test_smem_formula_matches_kernel_layout(layout, m, n, k, groups):
    # The host sizes the launch's shared memory; the kernel lays it out. A static_assert appended to
    # the translation unit checks that the two agree.
    cfg = heuristics.choose(layout, m, n, k, groups, 132).config
    src = kernels.render(cfg) + "static_assert(cg8::kSmemBytes == %d, \"mismatch\");\n" % cfg.smem_bytes
    jit.compile_cubin(src)


def test_heuristic_against_measured_sweep():
    """The heuristic against a measured sweep of every candidate configuration (H200, NOTES.md): its
    pick for each benchmark shape must be within 10% of the best measured configuration, and within
    3% on average (0.9% when the heuristic was set; 3.8% for DeepGEMM's rule)."""
    import glob
    import json
    import math

    path = sorted(glob.glob("bench/results/v2/tune-h200-*.json"))[0]
    results = json.load(open(path))["results"]
    losses = []
    for r in results:
        cfg = heuristics.choose("normal", r["m"], r["n"], r["k"], 1, 132).config
        rows = {(x["block_m"], x["block_n"], x["cluster"]): x["us"] for x in r["rows"]}
        mine = rows[(cfg.block_m, cfg.block_n, cfg.cluster)]
        best = min(rows.values())
        assert mine <= 1.1 * best, (r["m"], r["n"], r["k"], cfg, mine, best)
        losses.append(math.log(mine / best))
    assert math.exp(sum(losses) / len(losses)) <= 1.03


@functools.lru_cache(maxsize=None)
def main_loops(layout: str, groups: int, bm: int, bn: int, n: int = 4096, k: int = 7168) -> tuple[tuple[str, ...], ...]:
    """Opcodes of every main loop: each innermost loop (backward branch, no such loop inside) that issues
    wgmmas, in address order. (The contiguous kernel has a round loop unrolled over the stages and rolled
    loops around it; the masked kernel's split tail tile has a second copy after the tile loop.)"""
    cfg = heuristics.make_config(layout, n, k, groups, bm, bn)
    text = sass.disassemble(jit.compile_cubin(kernels.render(cfg)))
    ins = [(int(a, 16), op) for a, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", text)]
    loops = []   # (start, end) of every backward branch's range that holds a wgmma
    for addr, op in ins:
        m = re.match(r"@!?P\d\s+BRA\s+0x([0-9a-f]+)", op)
        if m and int(m.group(1), 16) < addr:
            start = int(m.group(1), 16)
            if any(o.startswith("QGMMA") for a, o in ins if start <= a <= addr):
                loops.append((start, addr))
    innermost = [(s, e) for s, e in loops if not any((s, e) != (s2, e2) and s <= s2 and e2 <= e for s2, e2 in loops)]
    assert innermost, "no main loop found"
    return tuple(tuple(re.match(r"(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", o).group(1) for a, o in ins if start <= a <= end)
                 for start, end in sorted(innermost))


def main_loop(layout: str, groups: int, bm: int, bn: int, n: int = 4096, k: int = 7168) -> tuple[str, ...]:
    """The first main loop (main_loops)."""
    return main_loops(layout, groups, bm, bn, n, k)[0]


@pytest.mark.parametrize("layout,groups,bm,bn", [
    ("masked", 1, 256, 128), ("masked", 1, 128, 128), ("masked", 4, 128, 128), ("masked", 4, 256, 128),
    ("contiguous", 4, 256, 128), ("contiguous", 4, 128, 128)])
def test_grouped_main_loop_stays_on_the_uniform_datapath(layout, groups, bm, bn):
    """The grouped kernels' main loops must form their wgmma descriptors as the normal kernel's does.
    Scheduler state that ptxas cannot prove warp-uniform (masked: a group cursor advanced with
    shared-memory loads, or a run-time k-range in the tile loop; contiguous: branches on per-thread
    slab masks) moved that arithmetic to per-thread registers with an R2UR before every wgmma, 10-13%
    slower (NOTES.md v7, v8, v9). Every contiguous main loop is checked (whole tiles, tiles of two
    experts; rolled and round loops); the masked kernel's second loop is the split tail tile's copy,
    run once per CTA at most."""
    normal, grouped = main_loops("normal", 1, bm, bn), main_loops(layout, groups, bm, bn)
    grouped = grouped if layout == "contiguous" else grouped[:1]
    count = lambda ops, name: sum(op == name or op.startswith(name + ".") for op in ops)  # noqa: E731
    per_wgmma = lambda ops: len(ops) / count(ops, "QGMMA")  # noqa: E731
    r2ur_normal = max(count(ops, "R2UR") for ops in normal)
    for ops in grouped:
        assert count(ops, "S2UR") == 0, "shared-memory base re-derived inside a main loop"
        assert count(ops, "R2UR") <= r2ur_normal + 2, (count(ops, "R2UR"), r2ur_normal)
    # Instructions per wgmma in the leanest loop: at most 4 more than the normal kernel's. (The contiguous
    # 128x128 loop forms its scale addresses from the pinned base, about 20 more instructions per k-block,
    # NOTES.md v11; the masked loops are rolled where the normal 256x128 one is unrolled over the stages,
    # 3.3 more per wgmma with NVRTC 13.0.)
    assert min(map(per_wgmma, grouped)) <= min(map(per_wgmma, normal)) + 4, (
        [len(o) for o in grouped], [len(o) for o in normal])


@pytest.mark.parametrize("layout,groups,bm,bn", [
    ("normal", 1, 256, 128), ("normal", 1, 128, 128), ("normal", 1, 128, 64), ("masked", 1, 128, 128),
    ("contiguous", 4, 256, 128)])
def test_two_warpgroup_main_loop_has_no_r2ur(layout, groups, bm, bn):
    """With two math warpgroups and BLOCK_N <= 128, every wgmma descriptor is formed on the uniform
    datapath: the warpgroup's A-slab offset comes from a value ptxas knows to be warp-uniform. Formed per
    thread, each A descriptor took an R2UR before its wgmma, 2-4% slower on an H200 (NOTES.md v11)."""
    loops = main_loops(layout, groups, bm, bn)
    for ops in loops if layout == "contiguous" else loops[:1]:  # (masked: the split tail's copy after it)
        r2ur = [op for op in ops if op.startswith("R2UR")]
        assert not r2ur, len(r2ur)


@pytest.mark.parametrize("layout, groups, k, aligned", [
    ("normal", 1, 7168, True), ("normal", 1, 1536, True), ("normal", 1, 512, False),
    ("contiguous", 4, 7168, True), ("contiguous", 4, 2048, True)])
def test_stage_aligned_main_loop_is_unrolled_over_the_stages(layout, groups, k, aligned):
    """Tiles with two slabs per warpgroup run whole rounds of the stage ring unrolled over the stages
    (compile-time addresses; 3-4% faster at 256x128 on an H200, NOTES.md v11, v13, v15). The normal layout
    starts every tile at stage 0, except where the stages passed through at each tile end would be a large
    share of the ring (K=512); the contiguous one takes the ring where the last tile left it (rolled
    k-blocks around the rounds), so it has the rounds at every K with enough k-blocks."""
    cfg = heuristics.make_config(layout, 4096, k, groups, 256, 128)
    wgmmas = max(sum(op.startswith("QGMMA") for op in ops) for ops in main_loops(layout, groups, 256, 128, 4096, k))
    assert wgmmas == (2 * 4 * cfg.stages if aligned else 2 * 4), (wgmmas, cfg.stages)

"""CPU tier: every configuration of the catalog (tests/kernel_configs.py) compiles for sm_90a and its
SASS looks right (test_cuda_sources.py checks the sources and the shared contracts)."""
import functools
import re

import pytest

from cugemm8 import fp8_gemm, heuristics, jit, sass
from kernel_configs import CONFIGS, WGRAD_CONFIGS

ALL_CONFIGS = CONFIGS + WGRAD_CONFIGS


@pytest.fixture(scope="module")
def compiled():
    """Each configuration's cubin and compile log (ptxas' remarks included)."""
    out = {}
    for cfg in ALL_CONFIGS:
        log = []
        out[cfg] = jit.compile_cubin(fp8_gemm.render(cfg), log=log), log[0]
    return out


@pytest.mark.parametrize("cfg", ALL_CONFIGS, ids=lambda c: f"{c.layout}-n{c.n}-k{c.k}-g{c.num_groups}-"
                         f"{c.block_m}x{c.block_n}x{c.stages}s{c.splits}" + ("-" + c.out_format if c.out_format != "bfloat16" else "")
                         + ("-t" if c.transpose_d else "") + ("-loaded" if c.load_d else ""))
def test_config_compiles_with_expected_sass(cfg, compiled):
    cubin, log = compiled[cfg]
    # ptxas serializes the wgmma pipeline (C7510 and kin: a call boundary, register pressure) with only a
    # remark in the log; the main loops would lose their MMA overlap.
    assert not re.search(r"C751\d", log), f"wgmma serialized by ptxas: {log}"
    text = sass.disassemble(cubin)
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", text)
    names = {op.split(".")[0] for op in ops}
    # (column halves: one 128-wide chain per half)
    assert any(op.startswith("QGMMA.64x%dx32.F32.E4M3.E4M3" % (cfg.block_n // cfg.col_halves)) for op in ops), \
        "no FP8 wgmma"
    assert "USETMAXREG" in names, "setmaxnreg missing"
    assert "UTMALDG" in names, "TMA loads missing"
    # Decode configurations load B with an L2 cache policy (evict-first); no other load carries one.
    hinted = any("UTMALDG" in line and "desc[" in line for line in text.splitlines())
    assert hinted == cfg.stream_b, "L2 cache policy on B's loads exactly where stream_b"
    # Split-K tiles store their column chunks by threads; the weight gradient adds its tiles into D by TMA
    # reduce-add, or loads D (a 3-D TMA load) and stores it (load_d); every other kernel stores tiles by TMA.
    assert ("UTMASTG" in names) == (cfg.split_k == 1 and (not cfg.wgrad or cfg.load_d)), "TMA stores"
    assert ("UTMAREDG" in names) == (cfg.wgrad and not cfg.load_d), "TMA reduce-add exactly in the weight-gradient kernels"
    assert any(op.startswith("UTMALDG.3D") for op in ops) == cfg.load_d, "D loaded exactly where load_d"
    assert (cfg.cluster == 2) == any(op.startswith("UTMALDG.2D.MULTICAST") for op in ops), "multicast loads"
    assert not names & {"LDL", "STL"}, "local memory (spills) in the kernel"
    # The output's format: e4m3 packed from FP32 (and no stmatrix of bf16 pairs), or bf16 only.
    e4m3_out = any(op.startswith("F2FP.SATFINITE.E4M3.F32") for op in ops)
    assert e4m3_out == cfg.out_fp8, "e4m3 conversion exactly in e4m3-output kernels"
    assert ("STSM" in names) == (cfg.out_format == "bfloat16"), "stmatrix exactly in bf16-output kernels"
    # e4m3 of whole 64-column blocks: B loaded in fragment order (a 5-D box) and the bytes stored 16 at a time;
    # elsewhere 2 at a time (fp8_gemm._b_map, epilogue.cuh write_rows).
    permuted = heuristics.permutes_b(cfg)
    assert any(op.startswith("UTMALDG.5D") for op in ops) == permuted, "B's 5-D box exactly where permutes_b"
    if cfg.out_fp8:
        assert ("STS.128" in ops) == permuted and ("STS.U16" in ops) == (not permuted), "e4m3 payload stores"
    usage = sass.resource_usage(cubin)
    kern = usage[fp8_gemm.kernel_name(cfg)]
    assert kern["STACK"] == 0 and kern.get("LOCAL", 0) == 0
    # A split tile's exchange: asynchronous stores into the peer CTAs, and no GPU-wide memory barrier
    # (a cluster-scope release compiles to MEMBAR.ALL.GPU: 2.6 us per exchange, NOTES.md v10).
    assert ("STAS" in names) == (cfg.splits > 1 or cfg.group_ctas > 1), \
        "st.async exactly in kernels whose CTAs exchange sums or row amax"
    assert not (cfg.splits > 1 and "MEMBAR.ALL.GPU" in text), "GPU-wide memory barrier in a split kernel"


def test_trace_build_only_when_asked():
    """The timeline tracer's instrumented build (benchmarks/trace.py) (CG8_TRACE) compiles, and without it the library's
    kernel carries no trace code."""
    cfg = heuristics.choose("masked", 256, 4096, 7168, 4, 132).config
    plain = sass.disassemble(jit.compile_cubin(fp8_gemm.render(cfg)))
    traced = sass.disassemble(jit.compile_cubin("#define CG8_TRACE 1\n" + fp8_gemm.render(cfg)))
    assert "SR_GLOBALTIMER" not in plain and "SR_GLOBALTIMER" in traced


@functools.lru_cache(maxsize=None)
def main_loops(layout: str, groups: int, bm: int, bn: int, n: int = 4096, k: int = 7168) -> tuple[tuple[str, ...], ...]:
    """Opcodes of every main loop: each innermost loop (backward branch, no such loop inside) that issues
    wgmmas, in address order. (The contiguous kernel has a round loop unrolled over the stages and rolled
    loops around it; the masked kernel's split tail tile has a second copy after the tile loop.)"""
    cfg = heuristics.make_config(layout, n, k, groups, bm, bn)
    text = sass.disassemble(jit.compile_cubin(fp8_gemm.render(cfg)))
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


@pytest.mark.parametrize("layout, bm, cluster, rows, boxes", [
    ("normal", 64, 1, 30, (30, 30)),      # one m-block of fewer rows: the main maps hold M rows
    ("normal", 64, 1, 64, (64, 64)),
    ("normal", 64, 1, 65, (64, 1)),       # a last m-block of 1 row after a whole one: its own box
    ("normal", 128, 1, 200, (128, 72)),
    ("normal", 128, 1, 256, (128, 128)),  # whole m-blocks: the tail maps are the main ones
    ("normal", 256, 1, 300, (256, 44)),
    ("normal", 256, 1, 100, (100, 100)),
    ("normal", 128, 2, 200, (64, 64)),    # a pair multicasting A: half a tile each, whole tiles
    ("masked", 64, 1, 100, (64, 64)),     # grouped layouts load whole tiles (their rows are in the tensor)
    ("contiguous", 128, 1, 300, (128, 128)),
])
def test_a_boxes_hold_the_rows_of_a_tile(layout, bm, cluster, rows, boxes):
    """A's main and tail boxes (rows; the scales' boxes round them up to 4): the normal layout loads no rows past
    A's end, the last m-block after others through the tail maps (producer.cuh, policy_normal.cuh tail_maps)."""
    cfg = heuristics.make_config(layout, 512, 1024, 1 if layout == "normal" else 2, bm, 128, cluster=cluster)
    assert fp8_gemm.a_boxes(cfg, rows) == boxes

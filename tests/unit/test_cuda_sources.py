"""CPU tier: the CUDA sources' structure and the contracts shared with Python.

Each header compiles on its own; raw inline PTX lives only in cuda_src/ptx/; only the tile policies
(and the scheduler that picks one) look at the layout; the generated wgmma wrappers list the right
operands; the kernel's shared-memory map has the size cugemm8.heuristics computes, and a rendered
kernel refuses to compile when they disagree."""
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cugemm8 import fp8_gemm, heuristics, heuristics_wgrad, jit
from kernel_configs import CONFIGS, WGRAD_CONFIGS

SRC = jit.source_dir()
HEADERS = sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.cuh"))
LAYOUT_POLICY_FILES = {"gemm/config.cuh", "gemm/scheduler.cuh", "gemm/policy_normal.cuh",
                       "gemm/policy_contiguous.cuh", "gemm/policy_masked.cuh", "gemm/policy_k_grouped.cuh"}


def _code(path: Path) -> str:
    """The file without comments."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


@pytest.mark.parametrize("header", HEADERS)
def test_header_compiles_on_its_own(header):
    jit.compile_cubin(f'#include "{header}"\n', name="header.cu")


def test_kernel_compiles_with_the_default_configuration():
    source = '#include "gemm/config.cuh"\nnamespace cg8 { using Config = DefaultConfig; }\n#include "fp8_gemm.cu"\n'
    assert jit.compile_cubin(source)[:4] == b"\x7fELF"


def test_inline_ptx_only_in_the_ptx_layer():
    offenders = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.cu*")
                 if not p.relative_to(SRC).as_posix().startswith("ptx/") and re.search(r"\basm\b", _code(p))]
    assert not offenders, offenders


def test_layout_tested_only_in_the_tile_policies():
    """Every layout-specific answer comes from the configuration's tile policy: no other file names a layout."""
    offenders = []
    for p in (SRC / "gemm").glob("*.cuh"):
        rel = p.relative_to(SRC).as_posix()
        if rel not in LAYOUT_POLICY_FILES and re.search(r"\bkLayout\b|Layout::k", _code(p)):
            offenders.append(rel)
    assert not offenders, offenders
    for entry in ("fp8_gemm.cu", "fp8_wgrad.cu"):
        assert not re.search(r"\bkLayout\b|Layout::k", _code(SRC / entry))


def test_kernel_entry_is_short():
    """The entry only sets up and sends each warpgroup to its role."""
    assert len((SRC / "gemm" / "kernel.cuh").read_text().splitlines()) <= 150


def test_wgmma_wrappers_are_what_their_generator_writes():
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "scripts" / "gen_wgmma_fp8.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_wgmma_wrappers_list_their_operands():
    text = (SRC / "ptx" / "wgmma_fp8.cuh").read_text()
    specs = re.findall(r"struct WgmmaFp8<(\d+)> \{(.*?)\n\};", text, flags=re.S)
    assert [int(n) for n, _ in specs] == list(range(8, 257, 8))
    for n, body in specs:
        regs = int(n) // 2
        assert f"float (&d)[{regs}]" in body and f"m64n{n}k32.f32.e4m3.e4m3" in body
        template = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body.split(":")[0]))
        outs = re.search(r"\{(%0(?:, %\d+)*)\}", template).group(1)
        assert outs == ", ".join(f"%{i}" for i in range(regs)), n
        assert f"}}, %{regs}, %{regs + 1}, p, 1, 1;" in template and f"setp.ne.b32 p, %{regs + 2}, 0;" in template
        constraints = re.findall(r'"\+f"\(d\[(\d+)\]\)', body)
        assert [int(c) for c in constraints] == list(range(regs)), n


def _smem_check(configs) -> str:
    lines = ['#include "gemm/smem.cuh"']
    lines += [f"static_assert(cg8::SmemLayout<{fp8_gemm.config_type(c)}>::kBytes == {c.smem_bytes}, "
              f'"{c.layout} {c.block_m}x{c.block_n} s{c.stages}");' for c in configs]
    return "\n".join(lines) + "\n"


def test_smem_map_matches_the_heuristics_on_the_catalog():
    """One source for the shared-memory size: heuristics.smem_bytes, checked against the kernel's map."""
    jit.compile_cubin(_smem_check(CONFIGS + WGRAD_CONFIGS), name="smem.cu")


@settings(max_examples=20, deadline=None)
@given(layout=st.sampled_from(heuristics_wgrad.LAYOUTS), m=st.integers(1, 40000), n=st.integers(1, 4096).map(lambda v: 8 * v),
       groups=st.integers(1, 1024), sms=st.integers(1, 144))
def test_smem_map_matches_the_heuristics_on_any_wgrad_pick(layout, m, n, groups, sms):
    cfg = heuristics_wgrad.choose(layout, m, n, 1 if layout == "normal" else groups, sms).config
    jit.compile_cubin(_smem_check([cfg]), name="smem.cu")


@settings(max_examples=20, deadline=None)
@given(layout=st.sampled_from(heuristics.LAYOUTS), m=st.integers(1, 20000), n=st.integers(1, 2048).map(lambda v: 8 * v),
       k=st.integers(1, 1024).map(lambda v: 16 * v), groups=st.integers(1, 40))
def test_smem_map_matches_the_heuristics_on_any_pick(layout, m, n, k, groups):
    cfg = heuristics.choose(layout, m, n, k, 1 if layout == "normal" else groups, 132).config
    jit.compile_cubin(_smem_check([cfg]), name="smem.cu")


def test_rendered_kernel_checks_the_shared_contracts():
    """render() emits compile-time checks of BLOCK_K, the contiguous alignment and the shared-memory size;
    a mismatch stops the compile."""
    cfg = heuristics.choose("contiguous", 8192, 4096, 7168, 4, 132).config
    source = fp8_gemm.render(cfg)
    for contract in (f"kBlockK == {heuristics.BLOCK_K}", f"kSlabRows == {heuristics.CONTIGUOUS_M_ALIGNMENT}",
                     f"::kBytes == {cfg.smem_bytes}"):
        assert contract in source
    wrong = source.replace(f"::kBytes == {cfg.smem_bytes}", f"::kBytes == {cfg.smem_bytes + 16}")
    with pytest.raises(jit.CompileError, match="shared memory differs"):
        jit.compile_cubin(wrong)

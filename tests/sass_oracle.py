"""Real kernels and the disassemblers as oracles, shared by the SASS-decoder and FFMA-patch tests.

Real kernels come from NVRTC; pip's cuobjdump / nvdisasm are the oracles. Each tool call costs about
0.45 s, so listings are made once per kernel.
"""
import functools
import re

import pytest

from cugemm8 import fp8_gemm, heuristics, jit, sass

KERNEL = fp8_gemm.KERNEL_NAME


def tools_available() -> bool:
    try:
        sass.tool_path("cuobjdump"), sass.tool_path("nvdisasm")
        return True
    except FileNotFoundError:
        return False


needs_tools = pytest.mark.skipif(not tools_available(), reason="cuobjdump/nvdisasm not installed")


# Fixed configurations (not the heuristic's current picks, which move as it is tuned): one math
# warpgroup (BLOCK_M=64, no compiler yields on the promotion FFMAs) and two (BLOCK_M=256).
CONFIGS = {
    "one_wg": heuristics.KernelConfig("normal", 2112, 7168, 1, 64, 16, 16, 1, 32),
    "two_wg": heuristics.KernelConfig("normal", 7168, 16384, 1, 256, 128, 3, 2, 128),
}


@functools.lru_cache(maxsize=None)
def compile_named(name):
    return jit.compile_cubin(fp8_gemm.render(CONFIGS[name]))


@functools.lru_cache(maxsize=None)
def listing(name):
    """cuobjdump's listing of CONFIGS[name], parsed."""
    return sass.parse_listing(sass.disassemble(compile_named(name)))


def words_of(cubin, kernel=None):
    return [(lo, hi) for _, lo, hi in sass.instructions(cubin, kernel)]


_PRED = re.compile(r"^@(!?)P([0-6T])\s+")


def split_text(text):
    """(predicate_text, mnemonic, [operands]) of one instruction's text."""
    m = _PRED.match(text)
    pred = m.group(0).strip() if m else ""
    rest = text[m.end():] if m else text
    mnemonic, _, ops = rest.partition(" ")
    return pred, mnemonic, [o.strip() for o in ops.split(",")] if ops else []


def reg_of(operand):
    """(register number, has .reuse) of a register operand: 'R12', '-|R12.reuse|', '|R12|.reuse'."""
    m = re.fullmatch(r"-?\|?R(Z|\d+)(\.reuse)?\|?(\.reuse)?", operand)
    assert m, operand
    return (255 if m.group(1) == "Z" else int(m.group(1))), bool(m.group(2) or m.group(3))


def reuse_slots(hi):
    return [bool(sass.reuse_flags(hi) >> slot & 1) for slot in range(3)]

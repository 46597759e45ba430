#!/usr/bin/env python3
"""Writes cuda_src/ptx/wgmma_fp8.cuh, the FP8 wgmma wrappers for every N (``--check``: exit 1 if the
committed file differs from what this writes; the CPU tier runs that)."""
import sys
import textwrap
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "cuda_src" / "ptx" / "wgmma_fp8.cuh"

HEAD = '''// wgmma.mma_async m64nNk32, e4m3 x e4m3 -> f32, both operands from shared memory, one specialization
// per N the instruction allows (8 to 256 in steps of 8). Each lists its N/2 accumulator registers as
// inline-asm operands, which the preprocessor cannot generate, hence the length of this file (one
// operand list per N, no logic). Written by scripts/gen_wgmma_fp8.py: edit that, not this file;
// tests/unit/test_cuda_sources.py checks that the two agree and every operand list.
//
//   WgmmaFp8<N>::mma(d, desc_a, desc_b, scale_d): d (+)= A·B for one 64xNx32 step; scale_d == 0
//   overwrites d instead of accumulating (the first step of a k-block).
#pragma once
#include "types.cuh"

namespace cg8 {

template <uint32_t N>
struct WgmmaFp8;  // N must be a multiple of 8 in [8, 256]
'''


def specialization(n: int) -> str:
    regs = n // 2
    outs = textwrap.wrap(", ".join(f"%{i}" for i in range(regs)), 96)
    constraints = textwrap.wrap(", ".join(f'"+f"(d[{i}])' for i in range(regs)), 100)
    lines = ["template <>", f"struct WgmmaFp8<{n}> {{",
             f"    __device__ __forceinline__ static void mma(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b, "
             "uint32_t scale_d) {",
             f'        asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 2}, 0;\\n"',
             f'                     " wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{"']
    lines += [f'                     "{line}{"" if i == len(outs) - 1 else " "}"' for i, line in enumerate(outs)]
    lines += [f'                     "}}, %{regs}, %{regs + 1}, p, 1, 1;\\n}}"']
    lines += [f"                     : {constraints[0]}"] + [f"                       {c}" for c in constraints[1:]]
    lines += ['                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));', "    }", "};"]
    return "\n".join(lines)


def render() -> str:
    return HEAD + "\n" + "\n\n".join(specialization(n) for n in range(8, 257, 8)) + "\n\n}  // namespace cg8\n"


def main(argv) -> int:
    text = render()
    if "--check" in argv:
        if OUT.read_text() != text:
            print(f"{OUT} differs from what {Path(__file__).name} writes; run it", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

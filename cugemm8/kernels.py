"""Render and build the GEMM kernel for one configuration.

The kernel lives in ``cuda_src/fp8_gemm.cuh``; this module writes the small translation unit that
fixes its compile-time constants and adds the one ``wgmma`` wrapper for the chosen BLOCK_N (an
inline-asm operand list of BLOCK_N/2 accumulators, which the C preprocessor cannot generate).
"""
from __future__ import annotations

import os

from . import jit
from .heuristics import GEMM_TYPE_CODE, KernelConfig

KERNEL_NAME = "cugemm8_fp8_gemm"


def wgmma_wrapper(n: int) -> str:
    """`wgmma_m64k32(d, desc_a, desc_b, scale_d)`: one m64nNk32 e4m3 x e4m3 -> f32 MMA from shared memory."""
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    constraints = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (
        "__device__ __forceinline__ void wgmma_m64k32(float (&d)[%d], uint64_t desc_a, uint64_t desc_b, "
        "uint32_t scale_d) {\n"
        '    asm volatile("{\\n .reg .pred p;\\n setp.ne.b32 p, %%%d, 0;\\n"\n'
        '        " wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3 {%s}, %%%d, %%%d, p, 1, 1;\\n}"\n'
        "        : %s\n"
        '        : "l"(desc_a), "l"(desc_b), "r"(scale_d));\n'
        "}\n"
    ) % (regs, regs + 2, n, outs, regs, regs + 1, constraints)


def render(cfg: KernelConfig) -> str:
    consts = {
        "kShapeN": cfg.n,
        "kShapeK": cfg.k,
        "kBlockM": cfg.block_m,
        "kBlockN": cfg.block_n,
        "kStages": cfg.stages,
        "kNumMathWG": cfg.num_math_wg,
        "kSwizzleD": cfg.swizzle_d,
        "kGemmType": GEMM_TYPE_CODE[cfg.layout],
        "kNumGroups": cfg.num_groups,
        "kRasterGroup": cfg.raster_group,
        "kClusterSize": cfg.cluster,
    }
    lines = ['#include "ptx.cuh"', "namespace cg8 {"]
    lines += [f"constexpr uint32_t {name} = {value};" for name, value in consts.items()]
    lines.append(wgmma_wrapper(cfg.block_n))
    lines.append("}  // namespace cg8")
    attr = f"__cluster_dims__({cfg.cluster}, 1, 1)" if cfg.cluster > 1 else ""
    lines += [f"#define CG8_CLUSTER_ATTRIBUTE {attr}", '#include "fp8_gemm.cuh"', ""]
    return "\n".join(lines)


def ffma_interleave_enabled() -> bool:
    return os.environ.get("CUGEMM8_DISABLE_FFMA_INTERLEAVE", "") in ("", "0")


def build(cfg: KernelConfig) -> bytes:
    """The cubin for `cfg` (cached in memory and on disk)."""
    return jit.build(render(cfg), name=f"{KERNEL_NAME}.cu")

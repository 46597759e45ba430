"""Pick the weight gradients' configuration (``wgrad_matmul``, ``k_grouped_wgrad_matmul``): deterministic and pure,
like ``heuristics.choose``, whose wave rule it applies to the weight gradient's tiles.

D[M, N] += A[M, K] B[N, K]^T with 1x128 scales on both operands, FP32 D added into by TMA reduce-add (the dense
form and the k-grouped MoE form). K is a run-time value (the tokens), so one kernel serves every K, and K does not
enter the choice.
"""
from __future__ import annotations

import functools
import math

from .heuristics import (FULL_WAVE, MAX_STAGES, SMEM_CAPACITY, WGRAD_OUT, KernelConfig, LaunchPlan, _plan, ceil_div,
                         swizzle_for, wgrad_smem_bytes)

LAYOUTS = ("normal", "k_grouped")   # one GEMM, or K grouped (MoE)
# The entry points' names for them (the command line's and precompile's --layout), and the layout of each.
ENTRY_LAYOUTS = {"wgrad": "normal", "k_grouped_wgrad": "k_grouped"}
# Tiles are one 64-row slab per math warpgroup: the sums, one accumulator and B's per-column scales fill the
# math threads' registers up to BLOCK_N = 160 (the CPU tier's SASS check: no local memory). The FP32 D tile
# takes shared memory from the stages; the H200 tile sweep (bench/results/v22) found 128x160 with 3 stages
# slower than 128x128 and 128x144 with 4 on every shape tried (668-694 against 686-786 TFLOPS): 4 at least.
BLOCK_NS = tuple(range(16, 161, 16))
MIN_STAGES = 4


def make_config(layout: str, n: int, num_groups: int, block_m: int, block_n: int) -> KernelConfig:
    """The weight-gradient configuration of one tile shape: the most stages that fit, one math warpgroup per
    64 rows, the widest FP32 output swizzle."""
    k_groups = num_groups if layout == "k_grouped" else 0
    stages = next((s for s in range(MAX_STAGES, 0, -1)
                   if wgrad_smem_bytes(block_m, block_n, s, k_groups) <= SMEM_CAPACITY), 0)
    return KernelConfig(layout=layout, n=n, k=0, num_groups=num_groups, block_m=block_m, block_n=block_n,
                        stages=stages, num_math_wg=block_m // 64, swizzle_d=swizzle_for(block_n, 4),
                        out_format=WGRAD_OUT)


@functools.lru_cache(maxsize=1024)
def choose(layout: str, m: int, n: int, num_groups: int, num_sms: int) -> LaunchPlan:
    """Configuration of the weight gradient D[g] += A_g B_g^T over `num_groups` groups of M x N (the normal
    layout: one). The wave rule of heuristics.choose over 64- and 128-row tiles with at least MIN_STAGES
    stages: fewer waves, a fuller last wave, less area past the edges, larger tiles, 128 rows, wider N."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if min(m, n, num_groups, num_sms) <= 0:
        raise ValueError(f"m, n, num_groups and num_sms must be positive, got {(m, n, num_groups, num_sms)}")
    groups = num_groups if layout == "k_grouped" else 1
    best = None
    for bm in (64, 128):
        for bn in BLOCK_NS:
            config = make_config(layout, n, num_groups, bm, bn)
            if config.stages < MIN_STAGES:
                continue
            tiles = ceil_div(m, bm) * ceil_div(n, bn) * groups
            waves = ceil_div(tiles, num_sms)
            last = tiles - (waves - 1) * num_sms
            waste = ceil_div(m, bm) * bm * ceil_div(n, bn) * bn
            score = (waves, -min(last, math.ceil(FULL_WAVE * num_sms)), waste, -(bm * bn), bm != 128, -bn)
            if best is None or score < best[0]:
                best = (score, config, tiles)
    assert best is not None
    return _plan(best[1], best[2], num_sms)

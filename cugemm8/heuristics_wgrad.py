"""Pick the weight gradients' configuration (``wgrad_matmul``, ``k_grouped_wgrad_matmul``): deterministic and pure,
like ``heuristics.choose``, by a time model of the weight gradient's tiles.

D[M, N] += A[M, K] B[N, K]^T with 1x128 scales on both operands, FP32 D added into by TMA reduce-add, or loaded
into shared memory, added to there and stored where the tiles span few rows (the dense form and the k-grouped MoE
form). K is a run-time value (the tokens), so one kernel serves every K, and K does not
enter the choice.
"""
from __future__ import annotations

import functools
import math

from .heuristics import (MAX_STAGES, SMEM_CAPACITY, WGRAD_OUT, KernelConfig, LaunchPlan, ceil_div, plan_for,
                         swizzle_for, wgrad_smem_bytes)

LAYOUTS = ("normal", "k_grouped")   # one GEMM, or K grouped (MoE)
# The entry points' names for them (the command line's and precompile's --layout), and the layout of each.
ENTRY_LAYOUTS = {"wgrad": "normal", "k_grouped_wgrad": "k_grouped"}
# Tiles are one 64-row slab per math warpgroup: the sums, one accumulator and B's per-column scales fill the
# math threads' registers up to BLOCK_N = 160 (the CPU tier's SASS check: no local memory).
BLOCK_NS = tuple(range(16, 161, 16))
# The choice ranks tiles by modelled time: waves x the tile's FLOPs / its rate, within 2% (a model's reach) the
# wider tile. TILE_RATES: TFLOPS of the 128-row tiles on the H200 sweeps (bench/results/v23, NOTES.md v23), over
# each shape's wave quantization; 160 columns lead, with 4 stages beside 4 of their 5 FP32 output atoms. Narrower
# tiles than measured take the 96-wide rate scaled by their width (a k-block's fixed costs dominate there), 64-row
# tiles (one math warpgroup) ROWS64_RATE so scaled. 144 and 160 were 890 and 952 until their loops took the
# warp-uniform A descriptors (2.1-3.3% faster on the H200; the narrower tiles had them already: NOTES.md v48).
TILE_RATES = {96: 907, 112: 809, 128: 882, 144: 916, 160: 976}
ROWS64_RATE = 680
MIN_STAGES = 3
STAGE_TARGET = 4
# D^T's tiles take longer than the same tiles of D: their output goes out in two rounds of transposed atoms
# (1.024-1.032x on the H200 at 4096x7168, NOTES.md v47).
TRANSPOSED_COST = 1.03
# D of 2 to 4 m-blocks (129 to LOAD_D_ROWS rows), computed untransposed in 128-row tiles at least LOAD_D_COLS wide,
# is loaded into shared memory, added to there and stored (load_d) instead of added into by TMA reduce-add: each B
# tile read by a few CTAs, many CTAs streaming B. There it took 0.85-0.98x the reduce-add's time (M 200 to 512, N
# 2112 to 32768, K 4096 and 8192, dense and k-grouped; one shape 1.003x); with one m-block 1.02-1.03x, in tiles 96
# wide 1.04-1.14x, from M = 768 up and computing D^T over 512 rows (32768x512) 1.03-1.08x (NOTES.md v49).
LOAD_D_ROWS = 512
LOAD_D_COLS = 112


def tile_rate(block_m: int, block_n: int) -> float:
    """The modelled TFLOPS of a whole wave of one tile shape."""
    narrow = min(1.0, block_n / 96)
    return TILE_RATES.get(block_n, TILE_RATES[96] * narrow) if block_m == 128 else ROWS64_RATE * narrow


def make_config(layout: str, n: int, num_groups: int, block_m: int, block_n: int, stages: int = 0,
                d_atoms: int = 0, transpose_d: bool = False, load_d: bool = False) -> KernelConfig:
    """The weight-gradient configuration of one tile shape: one math warpgroup per 64 rows, the widest FP32 output
    swizzle; of the output tile's atoms, `d_atoms` in shared memory (0: as many as fit beside STAGE_TARGET stages,
    all if they do); `stages` stages (0: the most that fit beside them). `transpose_d`: the kernel computes D^T
    (its N, `n`, is D's rows), its tile stored transposed in atoms of 32 of the tile's rows, at least half of
    them held (config.cuh)."""
    k_groups = num_groups if layout == "k_grouped" else 0
    span = block_m if transpose_d else block_n   # D's columns of one tile
    swizzle = swizzle_for(span, 4)
    atoms = span * 4 // swizzle
    least = max(2, -(-atoms // 2)) if transpose_d else 2

    def fits(s: int, held: int) -> bool:
        return wgrad_smem_bytes(block_m, block_n, s, k_groups, swizzle, held % atoms, transpose_d,
                                load_d) <= SMEM_CAPACITY

    if 0 < d_atoms < min(least, atoms):
        raise ValueError(f"d_atoms must be 0 (the heuristic's) or at least {min(least, atoms)}: the FP32 tile is "
                         f"held in at least 2 atoms (transposed, half of them); got {d_atoms}")
    if load_d:  # the whole FP32 tile is held
        if d_atoms not in (0, atoms):
            raise ValueError(f"d_atoms must be 0 or {atoms} with load_d (the whole FP32 tile is held); got {d_atoms}")
        d_atoms = atoms
    if not d_atoms:
        d_atoms = next((a for a in range(atoms, 1, -1) if a >= least and fits(STAGE_TARGET, a)),
                       max(least, min(2, atoms)))
    d_atoms = 0 if d_atoms >= atoms else d_atoms  # all of them: 0
    stages = stages or next((s for s in range(MAX_STAGES, 0, -1) if fits(s, d_atoms)), 0)
    return KernelConfig(layout=layout, n=n, k=0, num_groups=num_groups, block_m=block_m, block_n=block_n,
                        stages=stages, num_math_wg=block_m // 64, swizzle_d=swizzle,
                        out_format=WGRAD_OUT, d_atoms=d_atoms, transpose_d=transpose_d, load_d=load_d)


@functools.lru_cache(maxsize=1024)
def choose(layout: str, m: int, n: int, num_groups: int, num_sms: int) -> LaunchPlan:
    """Configuration of the weight gradient D[g] += A_g B_g^T over `num_groups` groups of M x N (the normal
    layout: one), over 64- and 128-row tiles with at least MIN_STAGES stages, computing D or D^T (its tiles
    over N x M: where they fill the SMs' last wave better, as 4096x7168's 11 waves against 7168x4096's 12 in
    128x160 tiles, NOTES.md v47): the least modelled time (waves x tile FLOPs / tile_rate, x TRANSPOSED_COST for
    D^T; K is the same for every tile) in steps of 2%, then D before D^T, then wider N, then less area past the
    edges. D of 2 to 4 m-blocks in 128-row tiles of LOAD_D_COLS or more is then loaded and stored rather than added
    into (load_d)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if min(m, n, num_groups, num_sms) <= 0:
        raise ValueError(f"m, n, num_groups and num_sms must be positive, got {(m, n, num_groups, num_sms)}")
    groups = num_groups if layout == "k_grouped" else 1
    best = None
    for transpose_d, (rows, cols) in ((False, (m, n)), (True, (n, m))):
        for bm in (64, 128):
            for bn in BLOCK_NS:
                if bn - 16 >= cols:
                    break  # a narrower tile covers the columns already
                config = make_config(layout, cols, num_groups, bm, bn, transpose_d=transpose_d)
                if config.stages < MIN_STAGES:
                    continue
                tiles = ceil_div(rows, bm) * ceil_div(cols, bn) * groups
                time = ceil_div(tiles, num_sms) * bm * bn / tile_rate(bm, bn) * (TRANSPOSED_COST if transpose_d else 1)
                waste = ceil_div(rows, bm) * bm * ceil_div(cols, bn) * bn
                score = (round(math.log(time) / math.log(1.02)), transpose_d, -bn, waste)
                if best is None or score < best[0]:
                    best = (score, config, tiles)
    assert best is not None
    config = best[1]
    if 128 < m <= LOAD_D_ROWS and config.block_m == 128 and config.block_n >= LOAD_D_COLS and not config.transpose_d:
        loaded = make_config(layout, config.n, num_groups, 128, config.block_n, load_d=True)
        if loaded.stages >= config.stages:  # the whole FP32 tile held beside as many stages
            config = loaded
    return plan_for(config, best[2], num_sms)

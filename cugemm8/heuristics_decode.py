"""The dense GEMM's configuration at decode-sized M (M <= heuristics.DECODE_M): the tile, K split over a cluster,
B evict-first. heuristics.choose() hands its wave rule's pick to plan(); the rules replace or keep it, each with the
sweep it was measured on."""
from __future__ import annotations

import dataclasses

from .heuristics import (BLOCK_K, FULL_WAVE, L2_BYTES, KernelConfig, LaunchPlan, block_n_candidates,
                         can_share_group, can_split_k, ceil_div, cluster_capacity, even_chunks, fp8_out_ok, make_config,
                         plan_for)

# At M <= DECODE_M a GEMM reads its weights once and does little math: its time is the k-blocks each CTA
# walks, each bounded by the larger of a latency (wait, MMA, promote) and the bytes the CTA loads for it,
# plus, with split K, the exchange of partial sums. The constants are fitted to the H200 decode sweep of
# the kernel that loads at most M rows of A (bench/results/v18: with the rules in choose(), the picks are
# 1.013x the best measured configuration, geometric mean over 60 shapes, 1.08x at worst; NOTES.md v18).
KB_LATENCY_US = 0.15           # one k-block of a CTA when its loads keep up
SM_BYTES_PER_US = 35_000       # what one SM's loads sustain with most SMs loading (after an L2 flush)
DRAM_BYTES_PER_US = 4_300_000  # the whole GPU (reads of A and B once)
SPLIT_US = {1: 0.0, 2: 2.0, 4: 2.0, 8: 5.0}  # a split tile's exchange (DSMEM, the fixed-order sum, the wait
                                             # for the slowest share), by split


def decode_cost(m: int, n: int, k: int, block_m: int, block_n: int, split: int, num_sms: int) -> float:
    """The decode model's time in µs of one tile shape and split: the k-blocks of a CTA's tiles (waves of
    the resident CTAs) x max(latency, bytes per k-block / SM bandwidth), at least the DRAM floor, plus the
    exchange of each split tile."""
    tiles = ceil_div(m, block_m) * ceil_div(n, block_n)
    waves = ceil_div(tiles * split, cluster_capacity(split, num_sms))
    kb = ceil_div(ceil_div(k, BLOCK_K), split)
    rows = min(m, block_m)  # TMA fetches no rows past M
    loop = waves * kb * max(KB_LATENCY_US, (rows + block_n) * BLOCK_K / SM_BYTES_PER_US)
    return max(loop, (m + n) * k / DRAM_BYTES_PER_US) + waves * SPLIT_US[split]


def plan(m: int, n: int, k: int, num_sms: int, wave_config: KernelConfig, wave_tiles: int,
         out_format: str = "bfloat16", bf16: KernelConfig | None = None) -> LaunchPlan:
    """Decode-sized M: three rules in order, each measured on the H200 sweep (NOTES.md v17). B is read once,
    so every pick loads it evict-first in L2 (0.97x the time, geometric mean over the sweep's 60 shapes).
    1. Over 64 rows and deep K (32 k-blocks or more): 128-row tiles split over pairs, at the narrowest tile
       whose pairs fit on the SMs, if they fill them. The sweep's best at its three such shapes, where the
       model misjudges 128-row tiles (128x2112x7168: 11.8 against 14.0 us).
    2. From 64 rows: the wave rule's tile (`wave_config`), if it fills the GPU with tiles at least 32 wide.
       As fast as any split there, where the model's picks lost up to 17%.
    3. Otherwise the decode model's cheapest tile and split (decode_cost; refitted to the v18 sweep, NOTES.md
       v18).
    e4m3 output (`bf16`, required there: bf16's pick for the same shape) first takes bf16's tile where its CTAs can
    share each scale group (shared_group_plan), else the same rules over its tiles (fp8_out_ok: 128 wide). Every
    pick then keeps B's reuse in the L2 (b_reuse_stages)."""
    return b_reuse_stages(_rules(m, n, k, num_sms, wave_config, wave_tiles, out_format, bf16), m)


def _rules(m: int, n: int, k: int, num_sms: int, wave_config: KernelConfig, wave_tiles: int, out_format: str,
           bf16: KernelConfig | None) -> LaunchPlan:
    fp8 = out_format != "bfloat16"
    if fp8 and (shared := shared_group_plan(m, n, k, num_sms, out_format, bf16)) is not None:
        return shared
    if m > 64 and ceil_div(k, BLOCK_K) >= 32:
        pairs = cluster_capacity(2, num_sms)
        for bn in block_n_candidates(128):
            tiles = ceil_div(m, 128) * ceil_div(n, bn)
            if bn % 32 or 2 * tiles > pairs or not can_split_k(bn, k, 2) or (fp8 and not fp8_out_ok(bn)):
                continue
            config = make_config("normal", n, k, 1, 128, bn, split_k=2, stream_b=True, out_format=out_format)
            if 2 * tiles >= FULL_WAVE * pairs and config.stages >= 2:
                return plan_for(config, tiles, num_sms)
            break  # the narrowest tile that fits leaves SMs idle: wider ones would leave more
    if m >= 64 and FULL_WAVE * num_sms <= wave_tiles <= num_sms and wave_config.block_n >= 32:
        return plan_for(dataclasses.replace(wave_config, stream_b=True), wave_tiles, num_sms)
    modeled = model_plan(m, n, k, num_sms, out_format)
    if fp8 and modeled.config.split_k > 1 and ceil_div(k, BLOCK_K) >= 32:
        return fp8_split_plan(m, n, k, num_sms, out_format) or modeled
    return modeled


# Where 64x128 tiles split over pairs leave two or more m-blocks reading each B tile, the later CTA finds the lines the
# first loaded in the L2 only while the grid's loads in flight stay well inside it: at most this many bytes of stages
# over the grid (fitted on the H200: NOTES.md v45).
IN_FLIGHT_BYTES = 2 * L2_BYTES // 5


def b_reuse_stages(launch: LaunchPlan, m: int) -> LaunchPlan:
    """`launch` with no more stages than keep IN_FLIGHT_BYTES over its grid, where it splits 64x128 tiles over pairs
    and M is more than 64 rows: at M = 96 and 128, N 3584 to 4096, K 2048 to 16384 (grids of 112 to 128 CTAs), 6 or 7
    stages took 0.85-1.00x the time of 8; on grids of 96 or fewer, 8 were as fast or faster. Narrower bf16 tiles
    (unsplit, 48 to 112 wide) and splits over 4 did not gain from fewer stages (0.97-1.07x), so keep theirs
    (bench/results/v45)."""
    config = launch.config
    if (config.block_m, config.block_n, config.split_k) != (64, 128, 2) or m <= 64:
        return launch
    most = max(2, IN_FLIGHT_BYTES // (launch.grid * (config.block_m + config.block_n) * BLOCK_K))
    if config.stages <= most:
        return launch
    return dataclasses.replace(launch, config=dataclasses.replace(config, stages=most))


FP8_KB_US = 0.22  # fp8_split_plan's k-block, and its exchange by split (splits of 5 to 7 were never the fastest)
FP8_SPLIT_US = {2: 0.0, 3: 0.4, 4: 0.7, 8: 1.6}


def fp8_split_plan(m: int, n: int, k: int, num_sms: int, out_format: str) -> LaunchPlan | None:
    """e4m3 output at decode-sized M and deep K, where the decode model splits 128-wide tiles: 64x128 tiles (128-row
    ones took 4-15% longer at M = 128) split over S CTAs, every cluster resident at once, at the least of max(a CTA's
    k-blocks x FP8_KB_US, the bytes at DRAM_BYTES_PER_US) + FP8_SPLIT_US[S] (None: no split fits). Fitted to the H200
    sweep of M 64 and 128, N 512 to 4096, K 7168, splits 1 to 8 (NOTES.md v44): its picks are the sweep's fastest, or
    within 2% of it."""
    units = ceil_div(m, 64) * ceil_div(n, 128)
    dram_us = (m + n) * k / DRAM_BYTES_PER_US
    best = None
    for split, exchange_us in FP8_SPLIT_US.items():
        kb = ceil_div(ceil_div(k, BLOCK_K), split)
        if not can_split_k(128, k, split, out_fp8=True) or units * split > cluster_capacity(split, num_sms):
            continue
        config = make_config("normal", n, k, 1, 64, 128, split_k=split, stream_b=True, out_format=out_format)
        cost = max(kb * FP8_KB_US, dram_us) + exchange_us
        if config.stages >= 2 and (best is None or cost < best[0] - 1e-9):
            best = (cost, config)
    return plan_for(best[1], units, num_sms) if best else None


def shared_group_plan(m: int, n: int, k: int, num_sms: int, out_format: str, bf16: KernelConfig) -> LaunchPlan | None:
    """e4m3 output at decode-sized M: bf16's pick where its tiles are narrower than a scale group (64 or 32
    wide) and unsplit, with the group's 2 or 4 CTAs in a cluster sharing each row's amax, if those clusters
    fit on the SMs at once (pairs: every SM; clusters of 4: 120 of 132). Elsewhere None: the 128-wide rules.
    With 128-wide tiles these shapes took up to 1.17x bf16's time (NOTES.md v24)."""
    group_ctas = 128 // bf16.block_n
    if bf16.split_k != 1 or not can_share_group(bf16.block_n, group_ctas):
        return None
    config = make_config("normal", n, k, 1, bf16.block_m, bf16.block_n, stream_b=bf16.stream_b,
                         out_format=out_format, group_ctas=group_ctas)
    tiles = ceil_div(m, config.block_m) * ceil_div(config.num_n_blocks, group_ctas) * group_ctas
    if tiles > cluster_capacity(group_ctas, num_sms) or config.stages < min(2, ceil_div(k, BLOCK_K)):
        return None
    return plan_for(config, tiles, num_sms)


def model_plan(m: int, n: int, k: int, num_sms: int, out_format: str = "bfloat16") -> LaunchPlan:
    """The decode model's cheapest tile shape and split K (ties: less split, then fewer CTAs, wider tiles),
    over tiles at least 32 wide (16-wide wgmmas are too short to hide their issue and wait, choose()'s rule 5)."""
    best = None
    for bm in (64, 128) if m > 64 else (64,):
        for bn in block_n_candidates(bm):
            if bn < 32 or (out_format != "bfloat16" and not fp8_out_ok(bn)):
                continue
            for split in (1, 2, 4, 8):
                fits = can_split_k(bn, k, split) and split <= cluster_capacity(split, num_sms)
                if not fits or not even_chunks(bn, split):
                    continue  # (the model was fitted to even column chunks)
                cost = decode_cost(m, n, k, bm, bn, split, num_sms)
                config = make_config("normal", n, k, 1, bm, bn, split_k=split, stream_b=True, out_format=out_format)
                if config.stages < min(2, ceil_div(ceil_div(k, BLOCK_K), split)):
                    continue
                tiles = ceil_div(m, bm) * ceil_div(n, bn)
                key = (round(cost, 3), split, tiles * split, -bn)
                if best is None or key < best[0]:
                    best = (key, config, tiles)
    assert best is not None  # split 1 always fits
    config, tiles = best[1], best[2]
    if (config.block_m, config.block_n, config.split_k) == (128, 128, 8) and out_format == "bfloat16":
        # The model underrates what 8 CTAs exchanging 128x128 partial sums cost: 128x64 tiles over 4, on the same
        # CTAs, took 0.84-0.99x the time on every shape of the H200 sweep where it picked these (NOTES.md v44).
        config = make_config("normal", n, k, 1, 128, 64, split_k=4, stream_b=True)
        tiles = ceil_div(m, 128) * ceil_div(n, 64)
    return plan_for(config, tiles, num_sms)

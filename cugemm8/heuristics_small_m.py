"""When a dense GEMM runs on the small-M kernel (cugemm8/small_m.py), and with which configuration.
Deterministic and pure: the same (M, N, K, SMs) always gives the same answer."""
from __future__ import annotations

import contextlib

from .heuristics import cluster_capacity
from .small_m import MAX_TOKENS, SmallMConfig

BLOCK_K = 128
STATIC_SMEM_LIMIT = 48 * 1024   # the sums and barriers (static shared memory)
SMEM_CAPACITY = 232_448         # with the rings (dynamic), what a Hopper CTA may opt into
SPLITS = (1, 2, 4, 8)       # CTAs of a cluster (8: the portable cluster size)
DEPTHS = (2, 4)             # chunks a warp has in flight
CHUNKS = (1, 2, 4)          # k-blocks a bulk copy carries
BUFFER_REGS = 96
NARROW_N = 512              # the rule's bounds (choose_small_m)
NARROW_MIN_K = 4096
MAX_M = 8
_enabled = [True]


def token_tiles_for(m: int) -> int:
    """8-token tiles for M rows of A: 1, 2 or 4."""
    tiles = -(-m // 8)
    return 1 if tiles <= 1 else 2 if tiles <= 2 else 4


def fits(token_tiles: int, row_tiles: int, warps: int, split: int, k: int, depth: int = 2, chunk: int = 1) -> bool:
    """The kernel's rules (cuda_src/small_m.cuh): one pair of outputs a thread, its shared memory, every CTA of a
    cluster with chunks; and the registers a chunk in flight holds (A's pieces and the scales: 10 a token tile and
    1, a k-block) at most BUFFER_REGS, past which ptxas spills."""
    outputs = 8 * token_tiles * 16 * row_tiles
    static = 4 * outputs * (warps + (split if split > 1 else 1)) + 8 * warps * depth
    ring = SmallMConfig(8, k, token_tiles, row_tiles, warps, split, depth, chunk).smem_bytes
    chunks = -(-(-(-k // BLOCK_K)) // chunk)
    return (outputs // 2 <= 32 * warps and static <= STATIC_SMEM_LIMIT and static + ring <= SMEM_CAPACITY
            and split <= chunks and depth * chunk * (10 * token_tiles + 1) <= BUFFER_REGS)


def configs_for(m: int, n: int, k: int) -> list[SmallMConfig]:
    """Every configuration that can run M x N x K (the probes' candidates)."""
    t = token_tiles_for(m)
    return [SmallMConfig(n, k, t, r, w, s, d, c) for r in (1, 2) for w in (4, 8) for s in SPLITS for d in DEPTHS
            for c in CHUNKS if fits(t, r, w, s, k, d, c)]


def choose_small_m(m: int, n: int, k: int, num_sms: int) -> SmallMConfig | None:
    """The small-M kernel's configuration for a dense bf16 GEMM, or None where the WGMMA kernel runs.

    It runs where it measured faster than the WGMMA kernel's pick (H200, bench/results/v30 and v31, NOTES.md v30,
    v31): narrow N (at most NARROW_N) with K >= NARROW_MIN_K and M <= MAX_M (one token tile), where few rows of B
    must be spread over the SMs by splitting K. There 32 rows of B a CTA, 8 warps, single k-block chunks, the
    deepest ring that fits and the largest split whose clusters are resident at once led the probes. Wider N
    streams B slower than the WGMMA kernel's TMA loads, and from M = 16 the conversions and MMAs of more token tiles
    cost more than the split saves."""
    if not _enabled[0] or not 1 <= m <= MAX_M or n > NARROW_N or k < NARROW_MIN_K:
        return None
    t = token_tiles_for(m)
    r = 2 if t <= 2 else 1
    row_blocks = -(-n // (16 * r))
    # a GPU capped below the grid (set_num_sms) keeps the persistent WGMMA kernel, which honours the cap
    splits = [s for s in SPLITS if row_blocks * s <= cluster_capacity(s, num_sms) and fits(t, r, 8, s, k)]
    if not splits:
        return None
    split = max(splits)
    depth = max(d for d in DEPTHS if fits(t, r, 8, split, k, d))
    return SmallMConfig(n, k, t, r, 8, split, depth, 1)


def enabled() -> bool:
    return _enabled[0]


@contextlib.contextmanager
def disabled():
    """Calls made inside run on the WGMMA kernel (for probes comparing the two)."""
    _enabled[0] = False
    try:
        yield
    finally:
        _enabled[0] = True

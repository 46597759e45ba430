"""When a dense GEMM runs on the small-M kernel (cugemm8/small_m.py), and with which configuration.
Deterministic and pure: the same (M, N, K, SMs) always gives the same answer."""
from __future__ import annotations

import contextlib

from .small_m import MAX_TOKENS, SmallMConfig

BLOCK_K = 128
SMEM_LIMIT = 48 * 1024      # the kernel's shared memory is static
SPLITS = (1, 2, 4, 8)       # CTAs of a cluster (8: the portable cluster size)
DEPTHS = (2, 4)             # k-blocks a warp has in flight
BUFFER_REGS = 96
NARROW_MIN_K = 4096         # the rule's bounds (in_bounds): one token tile (MAX_M rows of A) up to NARROW_N
NARROW_N = 512              # rows of B, two token tiles (TWO_TILES_MAX_M) up to TWO_TILES_N
MAX_M = 8
TWO_TILES_MAX_M = 16
TWO_TILES_N = 256
TARGET_CTAS = 64
_enabled = [True]


def token_tiles_for(m: int) -> int:
    """8-token tiles for M rows of A: 1, 2 or 4."""
    tiles = -(-m // 8)
    return 1 if tiles <= 1 else 2 if tiles <= 2 else 4


def fits(token_tiles: int, row_tiles: int, warps: int, split: int, k: int, depth: int = 2) -> bool:
    """The kernel's rules (cuda_src/small_m.cuh): one pair of outputs a thread, its static shared memory, every
    CTA of a cluster with k-blocks; and the registers of the k-blocks in flight (16 a row tile, 8 a token tile,
    each) at most BUFFER_REGS, past which ptxas spills."""
    outputs = 8 * token_tiles * 16 * row_tiles
    smem = 4 * outputs * (warps + (split if split > 1 else 1))
    return (outputs // 2 <= 32 * warps and smem <= SMEM_LIMIT and split <= -(-k // BLOCK_K)
            and depth * (16 * row_tiles + 8 * token_tiles) <= BUFFER_REGS)


def configs_for(m: int, n: int, k: int) -> list[SmallMConfig]:
    """Every configuration that can run M x N x K (the probes' candidates)."""
    t = token_tiles_for(m)
    return [SmallMConfig(n, k, t, r, w, s, d) for r in (1, 2) for w in (4, 8) for s in SPLITS for d in DEPTHS
            if fits(t, r, w, s, k, d)]


def in_bounds(m: int, n: int, k: int) -> bool:
    """Whether M x N x K is a shape the small-M kernel measured faster on than the WGMMA kernel's pick (H200):
    narrow N with K >= NARROW_MIN_K, where few rows of B must be spread over the SMs by splitting K; one token tile
    (M <= MAX_M) up to NARROW_N rows of B (bench/results/v30, NOTES.md v30), two (M <= TWO_TILES_MAX_M) up to
    TWO_TILES_N (0.85-0.99x the WGMMA kernel's time at N = 256, 0.98-1.06x at 512: bench/results/v38, NOTES.md v38).
    Wider N streams B slower than the WGMMA kernel's TMA loads (2.8 against 3.3 TB/s), and more token tiles' conversions
    and MMAs cost more than the split saves."""
    if k < NARROW_MIN_K or m < 1:
        return False
    return (m <= MAX_M and n <= NARROW_N) or (m <= TWO_TILES_MAX_M and n <= TWO_TILES_N)


def choose_small_m(m: int, n: int, k: int, num_sms: int) -> SmallMConfig | None:
    """The small-M kernel's configuration for a dense bf16 GEMM, or None where the WGMMA kernel runs: on the shapes
    of in_bounds, about 64 CTAs, 32 rows of B a CTA, 8 warps and 2 k-blocks in flight, which led every shape probed
    (NOTES.md v30, v38)."""
    if not _enabled[0] or not in_bounds(m, n, k):
        return None
    t = token_tiles_for(m)
    r = 2 if t <= 2 else 1
    row_blocks = -(-n // (16 * r))
    split = 1
    while split < 8 and row_blocks * split * 2 <= TARGET_CTAS and fits(t, r, 8, split * 2, k):
        split *= 2
    cfg = SmallMConfig(n, k, t, r, 8, split, 2)
    # a GPU capped below the grid (set_num_sms) keeps the persistent WGMMA kernel, which honours the cap
    return cfg if fits(t, r, 8, split, k) and cfg.grid <= num_sms else None


def for_call(layout: str, m: int, n: int, k: int, num_sms: int, out_format: str = "bfloat16") -> SmallMConfig | None:
    """The small-M kernel's configuration for a call (the API's route and precompile's), or None where the WGMMA
    kernel runs: it takes dense GEMMs with bf16 output and something to compute."""
    if layout != "normal" or out_format != "bfloat16" or min(m, n, k) < 1:
        return None
    return choose_small_m(m, n, k, num_sms)


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

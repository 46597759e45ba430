"""When a dense GEMM runs on the small-M kernel (cugemm8/small_m.py), and with which configuration.
Deterministic and pure: the same (M, N, K, SMs) always gives the same answer."""
from __future__ import annotations

import contextlib

from .small_m import MAX_TOKENS, SmallMConfig

BLOCK_K = 128
SMEM_LIMIT = 48 * 1024      # the kernel's shared memory is static
SPLITS = (1, 2, 4, 8)       # CTAs of a cluster (8: the portable cluster size)
_enabled = [True]


def token_tiles_for(m: int) -> int:
    """8-token tiles for M rows of A: 1, 2 or 4."""
    tiles = -(-m // 8)
    return 1 if tiles <= 1 else 2 if tiles <= 2 else 4


def fits(token_tiles: int, row_tiles: int, warps: int, split: int, k: int) -> bool:
    """The kernel's rules (cuda_src/small_m.cuh): one pair of outputs a thread, its static shared memory, every
    CTA of a cluster with k-blocks."""
    outputs = 8 * token_tiles * 16 * row_tiles
    smem = 4 * outputs * (warps + (split if split > 1 else 1))
    return outputs // 2 <= 32 * warps and smem <= SMEM_LIMIT and split <= -(-k // BLOCK_K)


def configs_for(m: int, n: int, k: int) -> list[SmallMConfig]:
    """Every configuration that can run M x N x K (the probes' candidates)."""
    t = token_tiles_for(m)
    return [SmallMConfig(n, k, t, r, w, s) for r in (1, 2) for w in (4, 8) for s in SPLITS if fits(t, r, w, s, k)]


def choose_small_m(m: int, n: int, k: int, num_sms: int) -> SmallMConfig | None:
    """The small-M kernel's configuration for a dense bf16 GEMM, or None where the WGMMA kernel runs."""
    if not _enabled[0] or not 1 <= m <= MAX_TOKENS:
        return None
    t = token_tiles_for(m)
    row_blocks = -(-n // 16)
    split = 1
    while split < 8 and row_blocks * split * 2 <= num_sms and fits(t, 1, 8, split * 2, k):
        split *= 2
    return SmallMConfig(n, k, t, 1, 8, split)


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

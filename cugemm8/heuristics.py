"""Pick the kernel configuration for a problem: block sizes, pipeline depth, grid. Deterministic and
pure (no GPU needed): the same (layout, M, N, K, groups, SMs) always gives the same answer."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

SMEM_CAPACITY = 232_448          # bytes of dynamic shared memory a Hopper CTA may opt into
BLOCK_K = 128
MAX_STAGES = 16               # running stage counters: no unrolling cost per stage
RECORD_SLOTS = 4                 # contiguous: tile records the record warp may run ahead (rendered as kRecordSlots)
FULL_WAVE = 0.8                  # a last wave this full counts as full (tile efficiency matters more)
RASTER_GROUP = 8                 # n-blocks per rasterization band (8 beat 16: NOTES.md v5)
LAYOUTS = ("normal", "contiguous", "masked")
CONTIGUOUS_M_ALIGNMENT = 64      # expert segments start at multiples of this (contiguous layout):
                                 # the kernel reads an expert per 64-row slab, whatever BLOCK_M is
SPLIT_MIN_K_BLOCKS = 8           # masked: split the last wave only from this many k-blocks, where half a
                                 # tile pays for the exchange (NOTES.md v10)
WIDE_ROWS = 2048                 # rows per group from which a grouped layout uses 256-row tiles:
                                 # contiguous, the mean per expert (a tile spanning two experts costs
                                 # about one more pass); masked, the expected count (a group's last
                                 # tile is on average half empty)


@dataclass(frozen=True)
class KernelConfig:
    """Everything compiled into one cubin (M and the grid are run-time values)."""
    layout: str
    n: int
    k: int
    num_groups: int
    block_m: int
    block_n: int
    stages: int
    num_math_wg: int
    swizzle_d: int      # bytes of the output tile's TMA swizzle span (0: none)
    raster_group: int = RASTER_GROUP
    cluster: int = 1    # 2: CTA pairs share each A tile through TMA multicast
    tail_split: bool = False  # masked: a last wave that would leave half the SMs idle is split in k
                              # over CTA pairs (launched as clusters of 2)

    @property
    def threads(self) -> int:
        return 128 * (self.num_math_wg + 1)

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.block_m, self.block_n, self.stages, self.k, self.masked_groups, self.tail_split,
                          self.record_slots)

    @property
    def cluster_dims(self) -> int:
        """CTAs per cluster as launched (the grid is a multiple of it)."""
        return 2 if self.cluster > 1 or self.tail_split else 1

    @property
    def record_slots(self) -> int:
        """Slots of the contiguous layout's tile-record ring (kRecordSlots; 0 elsewhere)."""
        return record_slots_for(self.layout)

    @property
    def masked_groups(self) -> int:
        """Groups whose valid-row counts the kernel keeps in shared memory (masked layout only)."""
        return self.num_groups if self.layout == "masked" else 0

    @property
    def num_n_blocks(self) -> int:
        return -(-self.n // self.block_n)


@dataclass(frozen=True)
class LaunchPlan:
    config: KernelConfig
    grid: int           # CTAs (persistent: at most one per SM)
    num_tiles: int      # tiles the heuristic expected (masked: from expected_m)


def record_slots_for(layout: str) -> int:
    return RECORD_SLOTS if layout == "contiguous" else 0


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def smem_bytes(block_m: int, block_n: int, stages: int, k: int, masked_groups: int = 0,
               tail_split: bool = False, record_slots: int = 0) -> int:
    """Bytes of the kernel's shared-memory map (cuda_src/gemm/smem.cuh; every rendered kernel asserts the
    two agree): the D tile; per stage A, B and A's scales; the tile's B scales (every k-block, one or two
    scale rows, 16-byte rounded); the masked layout's rows and running tile totals per group, or the
    contiguous layout's ring of tile records (16-byte rounded); 2 barriers a stage, 2 more for the split
    tail, 2 per record slot."""
    sb_rows = 1 if 128 % block_n == 0 else 2
    sb = -(-(ceil_div(k, BLOCK_K) * sb_rows * 4) // 16) * 16
    rows = -(-(masked_groups * 8) // 16) * 16
    if record_slots:  # records of one id per 64-row slab and one bit per row, and their barriers
        rows = -(-(record_slots * (block_m // 64 + block_m // 32) * 4) // 16) * 16 + record_slots * 16
    return (block_m * block_n * 2 + stages * (block_m * BLOCK_K + block_n * BLOCK_K + block_m * 4 + 16) + sb + rows
            + (16 if tail_split else 0))


def can_split_tail(block_n: int, k: int) -> bool:
    """What the kernel's split last wave needs: two halves of k-blocks, and column halves of whole
    8-column fragments (each CTA of the pair stores one)."""
    return ceil_div(k, BLOCK_K) >= 2 and block_n % 16 == 0


def tail_split_for(layout: str, block_n: int, k: int) -> bool:
    """Whether the heuristic splits a configuration's last wave (KernelConfig.tail_split): masked layout
    only (its tile count is only known on the GPU), and K long enough to pay for it (see
    SPLIT_MIN_K_BLOCKS)."""
    return layout == "masked" and ceil_div(k, BLOCK_K) >= SPLIT_MIN_K_BLOCKS and can_split_tail(block_n, k)


def swizzle_for(block_n: int) -> int:
    for span in (128, 64, 32):
        if (block_n * 2) % span == 0:
            return span
    return 0


def block_n_candidates(block_m: int) -> list[int]:
    """BLOCK_N values the heuristic considers for this BLOCK_M: multiples of 16 (odd multiples of 8
    measured markedly slower), the FP32 accumulators of one 64-row slab (two for BLOCK_M=256) within
    the math threads' 232 registers, and a tile wider than 128 spanning at most two 128-row blocks
    of B's scales."""
    small = list(range(16, 129, 16))
    return small if block_m == 256 else small + [144, 160, 192]


def _stages(block_m: int, block_n: int, k: int, masked_groups: int = 0, tail_split: bool = False,
            record_slots: int = 0) -> int:
    limit = min(MAX_STAGES, max(1, ceil_div(k, BLOCK_K)))
    for s in range(limit, 0, -1):
        if smem_bytes(block_m, block_n, s, k, masked_groups, tail_split, record_slots) <= SMEM_CAPACITY:
            return s
    return 0


def make_config(layout: str, n: int, k: int, num_groups: int, block_m: int, block_n: int,
                cluster: int = 1, tail_split: bool | None = None) -> KernelConfig:
    """The configuration of one tile shape as the heuristic builds it (most stages that fit, one math
    warpgroup per 64-row tile, the widest output swizzle, the masked split where it pays, unless
    `tail_split` says otherwise): for the heuristic itself, and for sweeps and tools that name a tile."""
    if tail_split is None:
        tail_split = cluster == 1 and tail_split_for(layout, block_n, k)
    stages = _stages(block_m, block_n, k, num_groups if layout == "masked" else 0, tail_split,
                     record_slots_for(layout))
    return KernelConfig(layout=layout, n=n, k=k, num_groups=num_groups, block_m=block_m, block_n=block_n,
                        stages=stages, num_math_wg=1 if block_m == 64 else 2, swizzle_d=swizzle_for(block_n),
                        cluster=cluster, tail_split=tail_split)


@functools.lru_cache(maxsize=4096)
def choose(layout: str, m: int, n: int, k: int, num_groups: int, num_sms: int) -> LaunchPlan:
    """Configuration for D[m, n] = A[m, k] B[n, k]^T (per group). `m` is the rows per group for the
    masked layout (the expected count) and the total rows otherwise."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if min(m, n, k, num_groups, num_sms) <= 0:
        raise ValueError(f"m, n, k, num_groups and num_sms must be positive, got {(m, n, k, num_groups, num_sms)}")
    block_ms = (64, 128, 256)
    if layout == "contiguous" and m < WIDE_ROWS * num_groups:
        block_ms = (64, 128)
    groups = num_groups if layout == "masked" else 1   # the contiguous layout's rows are already summed

    def candidate(bm: int, bn: int) -> KernelConfig:
        # No TMA multicast: these kernels are not L2-bound, and a pair advances at the pace of its slower
        # CTA; it measured slower on every large shape (NOTES.md v5, v11). (KernelConfig.cluster=2 stays
        # available and tested.) The masked split needs CTA pairs.
        return make_config(layout, n, k, num_groups, bm, bn, tail_split=num_sms >= 2 and tail_split_for(layout, bn, k))

    if layout == "masked" and m > 64:
        # The rows per group are only expected, so the wave arithmetic below, exact for the dense GEMM,
        # turns into guesswork: a group with a few rows more than planned adds a block and can add a wave.
        # The tile with the best steady-state throughput per area (128x128, two accumulators; 256 rows for
        # large groups) stayed closest to the best tile across the masked benchmark's draws, where the wave
        # rule's picks lost far more (NOTES.md v7). It is used when it fills the GPU at the expected rows.
        bm = 256 if m >= WIDE_ROWS else 128
        bn = min(128, ceil_div(n, 16) * 16)
        config = candidate(bm, bn)
        tiles = ceil_div(m, bm) * ceil_div(n, bn) * groups
        if tiles >= num_sms and config.stages >= min(3, ceil_div(k, BLOCK_K)):
            return _plan(config, tiles, num_sms)

    best = None
    for bm in block_ms:
        if bm > 64 and m <= 64 and layout != "contiguous":
            continue  # a 64-row block already covers M
        for bn in block_n_candidates(bm):
            if layout == "contiguous" and bn > 128:
                # Its problems are large: with tens of waves, the two-accumulator 128-row tiles
                # (BLOCK_N <= 128) beat wider single-accumulator ones (NOTES.md v6).
                continue
            config = candidate(bm, bn)
            if config.stages < min(3, ceil_div(k, BLOCK_K)):
                continue
            tiles = ceil_div(m, bm) * ceil_div(n, bn) * groups
            waves = ceil_div(tiles, num_sms)
            last = tiles - (waves - 1) * num_sms
            waste = ceil_div(m, bm) * bm * ceil_div(n, bn) * bn
            # In order (each step measured on the H200 sweep, NOTES.md v5):
            # 1. fewer waves; 2. a fuller last wave, any wave FULL_WAVE full counting as full;
            # 3. less area computed past the problem's edges; 4. larger tiles (fewer operand
            # re-reads per FLOP); 5. no 16-wide wgmmas (too short to hide their issue and wait);
            # 6. BLOCK_M=128: each math warpgroup has one 64-row slab and two accumulators;
            # 7. wider N: a slab's wgmma re-reads its A rows per n-block, so wider moves fewer bytes.
            score = (waves, -min(last, math.ceil(FULL_WAVE * num_sms)), waste, -(bm * bn), bn < 32, bm != 128, -bn)
            if best is None or score < best[0]:
                best = (score, config, tiles)
    assert best is not None
    return _plan(best[1], best[2], num_sms)


def _plan(config: KernelConfig, tiles: int, num_sms: int) -> LaunchPlan:
    return LaunchPlan(config=config, grid=grid_for(config, tiles, num_sms), num_tiles=tiles)


def grid_for(config: KernelConfig, tiles: int, num_sms: int) -> int:
    """CTAs to launch for `tiles` tiles: as few as give the same number of waves (the idle SMs save
    power, so the busy ones clock higher: the GPU runs power-limited under FP8 load), a multiple of the
    cluster size. Masked: every SM, since the tile count is only known on the GPU."""
    dims = config.cluster_dims
    if config.layout == "masked":
        return num_sms - num_sms % dims
    waves = ceil_div(tiles, num_sms)
    return min(ceil_div(ceil_div(tiles, waves), dims) * dims, num_sms - num_sms % dims)

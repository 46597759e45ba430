"""Pick the kernel configuration for a problem: block sizes, pipeline depth, grid. Deterministic and
pure (no GPU needed): the same (layout, M, N, K, groups, SMs) always gives the same answer.

Here: what a configuration is (KernelConfig, make_config and the shared-memory sums the kernels' static_asserts
mirror) and the forward GEMMs' choice over it, which needs all of that; past 400 lines for it. The rules for
decode-sized M are in heuristics_decode.py, the weight gradient's choice in heuristics_wgrad.py, the small-M
kernel's in heuristics_small_m.py."""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

SMEM_CAPACITY = 232_448          # bytes of dynamic shared memory a Hopper CTA may opt into
BLOCK_K = 128
MAX_STAGES = 16               # running stage counters: no unrolling cost per stage
RECORD_SLOTS = 4                 # contiguous: tile records the record warp may run ahead (rendered as kRecordSlots)
FULL_WAVE = 0.8                  # a last wave this full counts as full (tile efficiency matters more)
RASTER_GROUP = 8                 # n-blocks per rasterization band (8 beat 16: NOTES.md v5)
L2_BYTES = 50 << 20              # the H100's L2 (the H200 reports 60 MiB): wide_bands' thresholds are fractions
                                 # of it, fitted on the H200 (NOTES.md v40)
WIDE_RASTER_GROUP = 32           # n-blocks per band where A would come from DRAM once a band (wide_bands)
LAYOUTS = ("normal", "contiguous", "masked")
# What D holds (cuda_src/gemm/config.cuh, OutFormat, in this order): bf16, or e4m3 with one float32 scale per
# row and 128 columns, the scale amax / 448 or that rounded up to a power of two (UE8M0); "float32" is the
# weight gradient's (FP32 added into D, with 1x128 scales on B and K at run time: KernelConfig.wgrad).
OUT_FORMATS = ("bfloat16", "float8_e4m3", "float8_e4m3_ue8m0")
WGRAD_OUT = "float32"
CONTIGUOUS_M_ALIGNMENT = 64      # expert segments start at multiples of this (contiguous layout):
                                 # the kernel reads an expert per 64-row slab, whatever BLOCK_M is
SPLIT_MIN_K_BLOCKS = 8           # masked: split the last wave only from this many k-blocks, where half a
                                 # tile pays for the exchange (NOTES.md v10)
PREFILL_M = 2048                 # normal and contiguous layouts: from this many rows, tiles are ranked by estimated time
# Each single-CTA tile's rate: the TFLOPS its tiles sustain when every wave is full, the median over an H200 sweep
# (benchmarks.tune.tile_rates; bench/results/v26, NOTES.md v25, v26). Dense: M 2048-16384 on DeepGEMM's six (N, K)
# pairs; 256x128 and the 128x128 tiles' two accumulators lead, widths that do not divide 128 straddle two rows of
# B's scales.
TILE_RATES = {(128, 64): 948, (128, 96): 1093, (128, 112): 1147, (128, 128): 1290, (128, 144): 1114,
              (128, 160): 1199, (128, 192): 1266, (256, 64): 1133, (256, 96): 1039, (256, 112): 982,
              (256, 128): 1369}
# Contiguous, experts of 0.5-1.5 x 256 or 1024 rows (issue 22's uneven experts, 8-64 of them): each expert's B
# tiles serve few m-blocks, so wide tiles (fewer A re-reads per output) lead. Tiles of 256 rows, which often span
# two experts there, are left to experts of WIDE_ROWS and more, ranked by the dense rates. 128x256 tiles (column
# halves: 256x128's registers and shared-memory traffic) lead (bench/results/v39 tune-uneven, NOTES.md v39).
PREFILL_EXPERT_ROWS = 256
CONTIGUOUS_TILE_RATES = {(128, 96): 1000, (128, 112): 1066, (128, 128): 1160, (128, 144): 1132, (128, 160): 1180,
                         (128, 192): 1239, (128, 256): 1325}
# ... where the larger tile is taken when its estimate is within this of the fastest: at 8 experts of ~1024 rows,
# 5120x8192, 128x192 (13 waves, the last of 9 tiles) was estimated 1.4% slower than 128x128 (18 waves) and measured
# 1.05-1.06x faster in two sweeps and the v27 table; the dense rates keep no tie (NOTES.md v28).
CONTIGUOUS_RATE_TIE = 0.02
# Contiguous, small experts (PREFILL_EXPERT_ROWS to SHARE_B_ROWS rows on average), at least SHARE_B_GROUPS of them,
# K >= SHARE_B_K, bf16 output: each expert's B serves few rows, and CTA pairs sharing it (KernelConfig.share_b) read
# it once for two m-blocks. 128x192 pairs were the fastest tile on all 9 such shapes of two H200 sweeps (1.05x single
# 128x192, geometric mean, 1.01x at least); elsewhere pairs cost 3% (bench/results/v27, NOTES.md v27). 128x256 pairs
# (column halves) took 0.94-0.98x 128x192 pairs' time on 8 of the 9, 1.02x on the ninth (bench/results/v39).
SHARE_B_ROWS = 512
SHARE_B_GROUPS = 16
SHARE_B_K = 4096
SHARE_B_BLOCK_N = 256
WIDE_ROWS = 2048                 # rows per group from which a grouped layout uses 256-row tiles:
                                 # contiguous, the mean per expert (a tile spanning two experts costs
                                 # about one more pass); masked, the expected count (a group's last
                                 # tile is on average half empty)


@dataclass(frozen=True)
class KernelConfig:
    """Everything compiled into one cubin (M and the grid are run-time values; K too where k == 0, the
    weight gradient's)."""
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
    split_k: int = 1    # normal: every tile's k-blocks divided over a cluster of this many CTAs
    stream_b: bool = False  # B's tiles loaded evict-first in L2 (read once: decode-sized M)
    out_format: str = "bfloat16"  # one of OUT_FORMATS
    d_atoms: int = 0    # the weight gradient: atoms of its FP32 output tile held in shared memory (0: all)
    group_ctas: int = 1  # e4m3 output, normal layout: CTAs of a cluster whose block_n-wide tiles make up one
                         # 128-column scale group and share each row's amax (block_n * group_ctas == 128)
    share_b: bool = False  # contiguous, cluster=2: the pair holds adjacent m-blocks of one n-block and shares
                           # each B tile instead of A (where both are one expert's)
    col_halves: int = 1  # 2: a 128x256 tile as two 128-column halves of each math warpgroup's slab (can_halve)
    transpose_d: bool = False  # the weight gradient computing D^T = B A^T: B is the kernel's A (its rows are the
                               # kernel's M) and n is D's rows; each tile is stored transposed (heuristics_wgrad)
    load_d: bool = False  # the weight gradient: each tile's D loaded into shared memory, added to there and stored,
                          # in place of a TMA reduce-add (its whole FP32 tile held: d_atoms 0)

    @property
    def out_fp8(self) -> bool:
        return self.out_format in ("float8_e4m3", "float8_e4m3_ue8m0")

    @property
    def wgrad(self) -> bool:
        """The weight gradient's kernel: 1x128 scales on B, K at run time, FP32 output added into D."""
        return self.out_format == WGRAD_OUT

    @property
    def threads(self) -> int:
        return 128 * (self.num_math_wg + 1)

    @property
    def smem_bytes(self) -> int:
        if self.wgrad:
            return wgrad_smem_bytes(self.block_m, self.block_n, self.stages, self.k_groups, self.swizzle_d,
                                    self.d_atoms, self.transpose_d, self.load_d)
        return smem_bytes(self.block_m, self.block_n, self.stages, self.k, self.masked_groups, self.tail_split,
                          self.record_slots, self.split_k, self.out_fp8, self.group_ctas, self.share_b,
                          scales_by_warp(self.layout, self.block_m, self.num_math_wg, self.out_fp8, self.k))

    @property
    def cluster_dims(self) -> int:
        """CTAs per cluster as launched (the grid is a multiple of it)."""
        return max(self.splits, self.cluster, self.group_ctas)

    @property
    def splits(self) -> int:
        """CTAs a split tile's k-blocks are divided over (kSplits; 1: tiles are not split)."""
        return 2 if self.tail_split else self.split_k

    @property
    def record_slots(self) -> int:
        """Slots of the contiguous layout's tile-record ring (kRecordSlots; 0 elsewhere)."""
        return record_slots_for(self.layout)

    @property
    def masked_groups(self) -> int:
        """Groups whose valid-row counts the kernel keeps in shared memory (masked layout only)."""
        return self.num_groups if self.layout == "masked" else 0

    @property
    def k_groups(self) -> int:
        """Groups whose K the kernel keeps in shared memory (k-grouped layout only)."""
        return self.num_groups if self.layout == "k_grouped" else 0

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
               tail_split: bool = False, record_slots: int = 0, split_k: int = 1, out_fp8: bool = False,
               group_ctas: int = 1, share_b: bool = False, by_warp: bool = False) -> int:
    """Bytes of the kernel's shared-memory map (cuda_src/gemm/smem.cuh; every rendered kernel asserts the
    two agree): the D tile, or a split tile's inbox where larger; per stage A, B and A's scales; the
    tile's B scales (every k-block, one or two scale rows, 16-byte rounded); the masked layout's rows and
    running tile totals per group, or the contiguous layout's ring of tile records (16-byte rounded; pairs
    sharing B add the peer tile's pass count);
    2 barriers a stage, 2 more for split tiles (or CTAs sharing a scale group), 2 per record slot; with
    e4m3 output those add their peers' row amax and its barrier; with `by_warp` (scales_by_warp) 2 barriers for
    the B scales."""
    splits = 2 if tail_split else split_k
    peers = splits if splits > 1 else group_ctas   # CTAs of a cluster that exchange (kExchangeCtas)
    inbox = (splits - 1) * block_m * max_chunk_cols(block_n, splits, out_fp8) * 4
    sb_rows = 1 if 128 % block_n == 0 else 2
    sb = -(-(ceil_div(k, BLOCK_K) * sb_rows * 4) // 16) * 16
    rows = -(-(masked_groups * 8) // 16) * 16
    if record_slots:  # records of one id per 64-row slab and one bit per row, and their barriers
        rows = -(-(record_slots * (block_m // 64 + block_m // 32 + share_b) * 4) // 16) * 16 + record_slots * 16
    amax = (peers - 1) * block_m * 4 + 8 if out_fp8 and peers > 1 else 0
    return (max(block_m * block_n * 2, inbox) + stages * (block_m * BLOCK_K + block_n * BLOCK_K + block_m * 4 + 16)
            + sb + rows + (16 if peers > 1 else 0) + amax + (16 if by_warp else 0))


def scales_by_warp(layout: str, block_m: int, num_math_wg: int, out_fp8: bool, k: int) -> bool:
    """Whether a producer warp stages each tile's B scales (cuda_src/gemm/config.cuh, kScalesByWarp): the normal
    layout's e4m3 tiles of two 64-row slabs a math warpgroup and at most 16 k-blocks (NOTES.md v43)."""
    return layout == "normal" and out_fp8 and block_m // 64 > num_math_wg and ceil_div(k, BLOCK_K) <= 16


def can_split_tail(block_n: int, k: int) -> bool:
    """What the heuristic's split last wave takes: what any split tile needs (can_split_k), over a pair, in even
    column chunks (as measured, NOTES.md v10)."""
    return can_split_k(block_n, k, 2) and even_chunks(block_n, 2)


def tail_split_for(layout: str, block_n: int, k: int) -> bool:
    """Whether the heuristic splits a configuration's last wave (KernelConfig.tail_split): masked layout
    only (its tile count is only known on the GPU), and K long enough to pay for it (see
    SPLIT_MIN_K_BLOCKS)."""
    return layout == "masked" and ceil_div(k, BLOCK_K) >= SPLIT_MIN_K_BLOCKS and can_split_tail(block_n, k)


def swizzle_for(block_n: int, out_bytes: int = 2) -> int:
    """The output tile's TMA swizzle span: the widest that divides a tile row of `out_bytes` elements."""
    for span in (128, 64, 32):
        if (block_n * out_bytes) % span == 0:
            return span
    return 0


def fp8_out_ok(block_n: int) -> bool:
    """What e4m3 output needs of a tile (config.cuh), unless CTAs share a scale group (can_share_group): each
    128-column scale group within one tile, so that its amax is taken there (a split tile's CTAs share
    theirs: split.cuh)."""
    return block_n % 128 == 0


def block_n_candidates(block_m: int) -> list[int]:
    """BLOCK_N values the heuristic considers for this BLOCK_M: multiples of 16 (odd multiples of 8
    measured markedly slower), the FP32 accumulators of one 64-row slab (two for BLOCK_M=256) within
    the math threads' 232 registers, and a tile wider than 128 spanning at most two 128-row blocks
    of B's scales."""
    small = list(range(16, 129, 16))
    return small if block_m == 256 else small + [144, 160, 192]


def _stages(block_m: int, block_n: int, k: int, masked_groups: int = 0, tail_split: bool = False,
            record_slots: int = 0, split_k: int = 1, out_fp8: bool = False, group_ctas: int = 1,
            share_b: bool = False, by_warp: bool = False) -> int:
    limit = min(MAX_STAGES, max(1, ceil_div(ceil_div(k, BLOCK_K), split_k)))  # a CTA's k-blocks fill the ring
    for s in range(limit, 0, -1):
        if smem_bytes(block_m, block_n, s, k, masked_groups, tail_split, record_slots, split_k,
                      out_fp8, group_ctas, share_b, by_warp) <= SMEM_CAPACITY:
            return s
    return 0


def make_config(layout: str, n: int, k: int, num_groups: int, block_m: int, block_n: int,
                cluster: int = 1, tail_split: bool | None = None, split_k: int = 1,
                stream_b: bool = False, out_format: str = "bfloat16", group_ctas: int = 1,
                share_b: bool = False, col_halves: int | None = None) -> KernelConfig:
    """The configuration of one tile shape as the heuristic builds it (most stages that fit, one math
    warpgroup per 64-row tile, the widest output swizzle, the masked split where it pays, unless
    `tail_split` says otherwise; never with e4m3 output): for the heuristic itself, and for sweeps and
    tools that name a tile. `group_ctas` > 1 (e4m3 output, normal layout, unsplit): that many CTAs of a
    cluster hold a 128-column scale group's tiles (can_share_group). `share_b` (contiguous, cluster=2): the pair
    shares B (can_share_b). A 128x256 tile is computed in column halves (`col_halves` 2: can_halve)."""
    fp8 = out_format != "bfloat16"  # e4m3 output: swizzle of its 1-byte rows
    if group_ctas != 1 and not (fp8 and layout == "normal" and can_share_group(block_n, group_ctas)
                                and split_k == 1 and cluster == 1):
        raise ValueError(f"group_ctas={group_ctas} needs e4m3 output, the normal layout, no split or multicast and "
                         f"block_n * group_ctas == 128 (group_ctas 2 or 4); got {out_format}, {layout}, "
                         f"split_k={split_k}, cluster={cluster}, block_n={block_n}")
    if share_b and not (cluster == 2 and can_share_b(layout, block_m, block_n)):
        raise ValueError(f"share_b needs cluster=2, the contiguous layout, block_m=128 and block_n a multiple of 16; "
                         f"got cluster={cluster}, {layout}, block_m={block_m}, block_n={block_n}")
    if col_halves is None:  # a 128x256 tile is only ever computed in column halves (registers)
        col_halves = 2 if (block_m, block_n) == (128, 256) else 1
    if col_halves != 1 and not (col_halves == 2 and can_halve(layout, block_m, block_n, out_format)
                                and split_k == 1 and (cluster == 1 or share_b)):
        raise ValueError(f"col_halves={col_halves} needs 2, the normal or contiguous layout, a 128x256 tile, bf16 "
                         f"output, no split and no pairs but pairs sharing B; got {layout}, {block_m}x{block_n}, "
                         f"{out_format}, split_k={split_k}, cluster={cluster}, share_b={share_b}")
    if tail_split is None:
        tail_split = cluster == 1 and split_k == 1 and tail_split_for(layout, block_n, k)
    num_math_wg = 1 if block_m == 64 else 2
    stages = _stages(block_m, block_n, k, num_groups if layout == "masked" else 0, tail_split,
                     record_slots_for(layout), split_k, fp8, group_ctas, share_b,
                     scales_by_warp(layout, block_m, num_math_wg, fp8, k))
    return KernelConfig(layout=layout, n=n, k=k, num_groups=num_groups, block_m=block_m, block_n=block_n,
                        stages=stages, num_math_wg=num_math_wg,
                        swizzle_d=swizzle_for(block_n, 1 if fp8 else 2), cluster=cluster, tail_split=tail_split,
                        split_k=split_k, stream_b=stream_b, out_format=out_format, group_ctas=group_ctas,
                        share_b=share_b, col_halves=col_halves)


def can_halve(layout: str, block_m: int, block_n: int, out_format: str) -> bool:
    """What column halves need (cuda_src/gemm/config.cuh, kColHalves): a 128x256 tile of the normal or contiguous
    layout with bf16 output, each math warpgroup's slab by two 128-column halves (256x128's registers and shared-
    memory traffic in 128-row tiles)."""
    return layout in ("normal", "contiguous") and block_m == 128 and block_n == 256 and out_format == "bfloat16"


def can_share_b(layout: str, block_m: int, block_n: int) -> bool:
    """What CTA pairs sharing B need (cuda_src/gemm/config.cuh, kShareB): the contiguous layout (a pair's
    m-blocks of one expert read one B tile), 128-row tiles (those the GPU tier runs), and half a B tile starting on
    the 128-byte swizzle's 8-row period."""
    return layout == "contiguous" and block_m == 128 and block_n % 16 == 0


def can_share_group(block_n: int, group_ctas: int) -> bool:
    """What CTAs sharing an e4m3 scale group need (cuda_src/gemm/config.cuh, kGroupCtas): 2 or 4 of them,
    whose tiles make up the group's 128 columns."""
    return group_ctas in (2, 4) and block_n * group_ctas == 128


def permutes_b(cfg: KernelConfig) -> bool:
    """Whether `cfg`'s kernel loads B's rows in the accumulator's fragment order (cuda_src/gemm/config.cuh, kPermuteB:
    e4m3 output of unsplit tiles of whole 64-column blocks, N too; fp8_gemm.tensor_maps builds B's 5-D map)."""
    return cfg.out_fp8 and cfg.splits == 1 and not cfg.share_b and cfg.block_n % 64 == 0 and cfg.n % 64 == 0


def chunk_unit_cols(out_fp8: bool) -> int:
    """Columns of a split tile's 16-byte output unit, which its column chunks are made of (config.cuh, kChunkUnit)."""
    return 16 if out_fp8 else 8


def max_chunk_cols(block_n: int, splits: int, out_fp8: bool) -> int:
    """Columns of a split tile's largest column chunk: its units dealt out as evenly as they go (kMaxChunkFrags)."""
    unit = chunk_unit_cols(out_fp8)
    return ceil_div(block_n // unit, splits) * unit


def even_chunks(block_n: int, splits: int, out_fp8: bool = False) -> bool:
    """Whether a split tile's column chunks are all one size (config.cuh, kEvenChunks)."""
    return (block_n // chunk_unit_cols(out_fp8)) % splits == 0


def can_split_k(block_n: int, k: int, split_k: int, out_fp8: bool = False) -> bool:
    """What split K needs (cuda_src/gemm/config.cuh): a cluster of at most 8 CTAs (the portable size), a
    k-block for each, and for each a column chunk of at least one 16-byte output unit."""
    return 1 <= split_k <= 8 and ceil_div(k, BLOCK_K) >= split_k and block_n // chunk_unit_cols(out_fp8) >= split_k


@functools.lru_cache(maxsize=4096)
def choose(layout: str, m: int, n: int, k: int, num_groups: int, num_sms: int,
           out_format: str = "bfloat16") -> LaunchPlan:
    """Configuration for D[m, n] = A[m, k] B[n, k]^T (per group). `m` is the rows per group for the
    masked layout (the expected count) and the total rows otherwise. e4m3 output (`out_format`) takes the
    same rules over the tiles it can use (fp8_out_ok: multiples of 128 wide), except at decode-sized M, where it
    takes bf16's narrow unsplit tiles with their CTAs sharing each scale group where those clusters fit
    (heuristics_decode.shared_group_plan)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if out_format not in OUT_FORMATS:
        raise ValueError(f"out_format must be one of {OUT_FORMATS}, got {out_format!r}")
    fp8 = out_format != "bfloat16"
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
        return make_config(layout, n, k, num_groups, bm, bn, out_format=out_format,
                           tail_split=num_sms >= 2 and tail_split_for(layout, bn, k))

    if layout == "masked" and m > 64:
        # The rows per group are only expected, so the wave arithmetic below, exact for the dense GEMM,
        # turns into guesswork: a group with a few rows more than planned adds a block and can add a wave.
        # The tile with the best steady-state throughput per area (128x128, two accumulators; 256 rows for
        # large groups) stayed closest to the best tile across the masked benchmark's draws, where the wave
        # rule's picks lost far more (NOTES.md v7). It is used when it fills the GPU at the expected rows.
        bm = 256 if m >= WIDE_ROWS else 128
        bn = 128 if fp8 else min(128, ceil_div(n, 16) * 16)
        config = candidate(bm, bn)
        tiles = ceil_div(m, bm) * ceil_div(n, bn) * groups
        if tiles >= num_sms and config.stages >= min(3, ceil_div(k, BLOCK_K)):
            return plan_for(config, tiles, num_sms)

    rates = prefill_rates(layout, m, num_groups)
    best = None
    timed = []  # with rates: (estimated time, config, tiles) of each candidate
    tile_shapes = [(bm, bn) for bm in block_ms for bn in block_n_candidates(bm)]
    if rates is not None and (128, 256) in rates and can_halve(layout, 128, 256, out_format):
        tile_shapes.append((128, 256))  # in column halves, where a rate table has it
    for bm, bn in tile_shapes:
        if bm > 64 and m <= 64 and layout != "contiguous":
            continue  # a 64-row block already covers M
        if fp8 and not fp8_out_ok(bn):
            continue
        if rates is not None and (bm, bn) not in rates:
            continue
        if layout == "contiguous" and bn > 128 and rates is None:
            # Below PREFILL_M rows, the two-accumulator 128-row tiles (BLOCK_N <= 128) beat wider single-
            # accumulator ones (NOTES.md v6).
            continue
        config = candidate(bm, bn)
        if config.stages < min(3, ceil_div(k, BLOCK_K)):
            continue
        tiles = ceil_div(m, bm) * ceil_div(n, bn) * groups
        waves = ceil_div(tiles, num_sms)
        last = tiles - (waves - 1) * num_sms
        waste = ceil_div(m, bm) * bm * ceil_div(n, bn) * bn
        if rates is not None:
            # Large M: the time a CTA takes for its waves of tiles at each tile's measured rate. Waves first
            # had taken 256x112 (4 waves) over 128x128 (7 waves of half the work) at 2048x7168x16384: 1.39x
            # the time (NOTES.md v25).
            timed.append((waves * bm * bn / rates[bm, bn], config, tiles))
            continue
        # Otherwise, in order (each step measured on the H200 sweep, NOTES.md v5):
        # 1. fewer waves; 2. a fuller last wave, any wave FULL_WAVE full counting as full;
        # 3. less area computed past the problem's edges; 4. larger tiles (fewer operand
        # re-reads per FLOP); 5. no 16-wide wgmmas (too short to hide their issue and wait);
        # 6. BLOCK_M=128: each math warpgroup has one 64-row slab and two accumulators;
        # 7. wider N: a slab's wgmma re-reads its A rows per n-block, so wider moves fewer bytes.
        score = (waves, -min(last, math.ceil(FULL_WAVE * num_sms)), waste, -(bm * bn), bn < 32, bm != 128, -bn)
        if best is None or score < best[0]:
            best = (score, config, tiles)
    if timed:  # the largest tile (then the widest) among those estimated within the tie of the fastest
        tie = CONTIGUOUS_RATE_TIE if rates is CONTIGUOUS_TILE_RATES else 0.0
        fastest = min(est for est, _, _ in timed)
        best = min((((-(c.block_m * c.block_n), -c.block_n, est), c, t) for est, c, t in timed
                    if est <= fastest * (1 + tie)), key=lambda x: x[0])
    assert best is not None
    config, tiles = best[1], best[2]
    if (layout == "contiguous" and not fp8 and rates is CONTIGUOUS_TILE_RATES and shares_b(m, k, num_groups)
            and num_sms >= 2):  # a pair of CTAs needs two SMs
        config = make_config(layout, n, k, num_groups, 128, SHARE_B_BLOCK_N, cluster=2, share_b=True)
        tiles = ceil_div(m, 128) * ceil_div(n, SHARE_B_BLOCK_N)
    if layout == "normal" and m <= DECODE_M:
        from . import heuristics_decode  # (not at the top: its rules are built from this module's)

        bf16 = choose(layout, m, n, k, 1, num_sms).config if fp8 else None
        return heuristics_decode.plan(m, n, k, num_sms, config, tiles, out_format, bf16)
    # Grouped decode (masked: at most 64 expected rows a group; contiguous: at most one 64-row segment an
    # expert on average): each group's weights are read once. Evict-first paid with 8 groups (masked 0.91-0.99x
    # the time, contiguous 0.88-0.98x); with 32 it cost masked up to 4% and gained contiguous 1-5%, with 128
    # neither moved (NOTES.md v17, v18). One rule for both: while the groups' weights are small.
    grouped_decode = ((layout == "masked" and m <= 64)
                      or (layout == "contiguous" and m <= CONTIGUOUS_M_ALIGNMENT * num_groups))
    if grouped_decode and num_groups * n * k <= GROUPED_STREAM_B_BYTES:
        config = dataclasses.replace(config, stream_b=True)
    if layout == "normal" and not fp8 and wide_bands(m, n, k, config.block_n):
        # (e4m3 output, half the bytes, measured no faster in wide bands: its epilogue bounds it, NOTES.md v40;
        # the contiguous layout's experts each keep their B tiles in one band already, NOTES.md v27)
        config = dataclasses.replace(config, raster_group=WIDE_RASTER_GROUP)
    return plan_for(config, tiles, num_sms)


def wide_bands(m: int, n: int, k: int, block_n: int) -> bool:
    """Whether a dense bf16 GEMM walks its tiles in bands of WIDE_RASTER_GROUP n-blocks rather than RASTER_GROUP.
    A band's tiles read all of A; A's blocks come from DRAM again in the next band if they left the L2 meanwhile,
    so fewer bands read A fewer times. That happens (1) where one band's output (RASTER_GROUP x BLOCK_N columns
    of every row, bf16) is more than a third of L2_BYTES: 0.90-1.01x the time (0.97x geometric mean)
    on 15 shapes from M = 12288 up, where a band of 16.8 MB (8192x32768x512) gained nothing and below it wide bands
    lost up to 1.18x; and (2) where A is more than half L2_BYTES and B at most a third, and all of N fits in one
    wide band: A streams once past B held in the L2, 0.95x the time at 8192x2112x4096 and 8192x2112x7168 (bands of
    8 leave a last band one n-block wide there), 0.995-0.998x on the three other such shapes probed
    (bench/results/v40, NOTES.md v40)."""
    out_evicts_a = RASTER_GROUP * block_n * m * 2 > L2_BYTES // 3
    a_streams_once = m * k > L2_BYTES // 2 and n * k <= L2_BYTES // 3 and ceil_div(n, block_n) <= WIDE_RASTER_GROUP
    return out_evicts_a or a_streams_once


def prefill_rates(layout: str, m: int, num_groups: int) -> dict | None:
    """The measured tile rates that rank tiles at prefill-sized M (None: the waves-first rules). Contiguous experts of
    WIDE_ROWS and more rows on average are dense GEMMs one after another; smaller ones down to the sweep's smallest
    mean (PREFILL_EXPERT_ROWS) have their own rates."""
    if m < PREFILL_M or layout == "masked":
        return None
    if layout == "contiguous" and m < WIDE_ROWS * num_groups:
        return CONTIGUOUS_TILE_RATES if m >= PREFILL_EXPERT_ROWS * num_groups else None
    return TILE_RATES


def shares_b(m: int, k: int, num_groups: int) -> bool:
    """Whether contiguous experts of m rows in all (at least PREFILL_EXPERT_ROWS each on average) take CTA pairs
    sharing B: small experts (SHARE_B_ROWS on average at most), many of them, deep K."""
    return m <= SHARE_B_ROWS * num_groups and num_groups >= SHARE_B_GROUPS and k >= SHARE_B_K


# ----------------------------------------------------------------------------- decode-sized M
# At M <= DECODE_M (dense) the rules of heuristics_decode.py pick the tile and its split K.
DECODE_M = 128
GROUPED_STREAM_B_BYTES = 256 << 20  # grouped decode: B evict-first up to this many bytes of weights in all


# CTAs of clusters of each size resident at once on a 132-SM H200 (cuOccupancyMaxActiveClusters on a split-K kernel,
# scripts/cluster_capacity.py; NOTES.md v17, v32): clusters are placed within a GPC, so above pairs some SMs stay out.
CLUSTER_CAPACITY_132 = {1: 132, 2: 132, 3: 117, 4: 120, 5: 110, 6: 102, 7: 105, 8: 120}


def cluster_capacity(split: int, num_sms: int) -> int:
    """CTAs of `split`-CTA clusters resident at once: CLUSTER_CAPACITY_132, scaled to other SM counts."""
    usable = num_sms if split <= 2 else num_sms * CLUSTER_CAPACITY_132[split] // 132
    return usable - usable % split


def plan_for(config: KernelConfig, tiles: int, num_sms: int) -> LaunchPlan:
    """The launch of `config` for `tiles` tiles (its grid: grid_for)."""
    return LaunchPlan(config=config, grid=grid_for(config, tiles, num_sms), num_tiles=tiles)


def grid_for(config: KernelConfig, tiles: int, num_sms: int) -> int:
    """CTAs to launch for `tiles` tiles: as few as give the same number of waves (the idle SMs save
    power, so the busy ones clock higher: the GPU runs power-limited under FP8 load), a multiple of the
    cluster size. Masked: every SM, since the tile count is only known on the GPU."""
    dims = config.cluster_dims
    if config.layout == "masked":
        return num_sms - num_sms % dims
    ctas = tiles * config.split_k   # split K: a cluster of split_k CTAs per tile
    if config.share_b:  # tiles = m-blocks x n-blocks, walked in pairs of m-blocks (an odd last one's peer idle);
        # sized by single m-blocks, 64 experts of ~256 rows took 23 rounds where 22 fit (NOTES.md v51)
        ctas = 2 * ceil_div(tiles // config.num_n_blocks, 2) * config.num_n_blocks
    waves = ceil_div(ctas, num_sms)
    return min(ceil_div(ceil_div(ctas, waves), dims) * dims, num_sms - num_sms % dims)


# The weight gradient's shared-memory map (KernelConfig.wgrad); its configuration choice is heuristics_wgrad.py's.
def wgrad_smem_bytes(block_m: int, block_n: int, stages: int, k_groups: int, swizzle_d: int, d_atoms: int,
                     transpose_d: bool = False, load_d: bool = False) -> int:
    """Bytes of the weight-gradient kernel's shared-memory map (cuda_src/gemm/smem.cuh): the FP32 D tile (or
    d_atoms of its atoms where nonzero, block_m rows of swizzle_d bytes; transposed, block_n rows); per stage A, B,
    A's and B's scales (B's rounded up to 128 bytes, a TMA destination's alignment) and 2 barriers; the k-grouped
    layout's words (each group's k-blocks, a count, and (group, first, end) per group, 16-byte rounded); with load_d
    (the whole D tile held) D's 3 barriers."""
    words = -(-((4 * k_groups + 1) * 4) // 16) * 16 if k_groups else 0
    sb = -(-(block_n * 4) // 128) * 128
    d = (block_n if transpose_d else block_m) * swizzle_d * d_atoms if d_atoms else block_m * block_n * 4
    return d + stages * (block_m * BLOCK_K + block_n * BLOCK_K + block_m * 4 + sb + 16) + words + (3 * 8 if load_d else 0)

"""Pick the kernel configuration for a problem: block sizes, pipeline depth, grid. Deterministic and
pure (no GPU needed): the same (layout, M, N, K, groups, SMs) always gives the same answer."""
from __future__ import annotations

import functools
from dataclasses import dataclass

SMEM_CAPACITY = 232_448          # bytes of dynamic shared memory a Hopper CTA may opt into
BLOCK_K = 128
MAX_STAGES = 16               # running stage counters: no unrolling cost per stage
RASTER_GROUP = 16                # n-blocks per rasterization band
LAYOUTS = ("normal", "contiguous", "masked")
GEMM_TYPE_CODE = {"normal": 0, "contiguous": 1, "masked": 2}
CONTIGUOUS_M_ALIGNMENT = 128     # expert segments start at multiples of this (contiguous layout)
MULTICAST_MIN_ROWS = 512         # rows (per group) from which CTA pairs may multicast A


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

    @property
    def threads(self) -> int:
        return 128 * (self.num_math_wg + 1)

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.block_m, self.block_n, self.stages, self.k)

    @property
    def num_n_blocks(self) -> int:
        return -(-self.n // self.block_n)


@dataclass(frozen=True)
class LaunchPlan:
    config: KernelConfig
    grid: int           # CTAs (persistent: at most one per SM)
    num_tiles: int      # tiles the heuristic expected (masked: from expected_m)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def smem_bytes(block_m: int, block_n: int, stages: int, k: int) -> int:
    """Must mirror the layout in cuda_src/fp8_gemm.cuh: the D tile; per stage A, B and A's scales;
    the tile's B scales (every k-block, one or two scale rows, 16-byte rounded); 2 barriers a stage."""
    sb_rows = 1 if 128 % block_n == 0 else 2
    sb = -(-(ceil_div(k, BLOCK_K) * sb_rows * 4) // 16) * 16
    return block_m * block_n * 2 + stages * (block_m * BLOCK_K + block_n * BLOCK_K + block_m * 4 + 16) + sb


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


def _stages(block_m: int, block_n: int, k: int) -> int:
    limit = min(MAX_STAGES, max(1, ceil_div(k, BLOCK_K)))
    for s in range(limit, 0, -1):
        if smem_bytes(block_m, block_n, s, k) <= SMEM_CAPACITY:
            return s
    return 0


# Cost model. Its constants are effective rates fitted (least squares on log time) to a sweep of
# ~450 (shape, configuration) timings on an H200 (bench/results/tune-h200-*.json, NOTES.md); on that
# sweep its choices are 4% slower than the best measured configuration (geometric mean). The
# predicted time is a soft maximum of three limits, plus a fixed launch and ramp cost:
#   * a CTA's critical path: per k-block, the largest of the tensor-core time, the shared-memory
#     traffic through the SM (each 64-row slab's wgmma reads its A rows and all of B; TMA writes A
#     and B) and the latency chain MMA -> wait -> promotion; times k-blocks, times waves of tiles;
#   * L2 -> SM traffic: A re-read once per n-block (halved by multicast), B once per m-block;
#   * DRAM traffic: each operand once and the output.
COST_MMA_RATE = 16e12         # FLOP/s of one SM's tensor cores
COST_SMEM_BW = 165e9          # bytes/s through one SM's shared memory
COST_LAT_ONE_ACC = 0.20e-6    # s per k-block and slab: MMA latency + promotion, one accumulator
COST_LAT_PING_PONG = 0.21e-6  # the same with two accumulators, for one warpgroup alone
COST_WIDE_TILE = 1.2          # BLOCK_N > 128 (one accumulator per warpgroup) runs this much slower
COST_L2_BW = 11e12            # bytes/s, L2 -> SMs
COST_DRAM_BW = 2.6e12         # bytes/s, effective
COST_FIXED = 5e-6             # s
COST_SOFTMAX_POWER = 6        # limits combine as (a^p + b^p + c^p)^(1/p): close limits both count


def predicted_seconds(m: int, n: int, k: int, groups: int, bm: int, bn: int, cluster: int, num_sms: int) -> float:
    """The cost model's time for `groups` GEMMs of [m, k] x [n, k]^T with this tiling."""
    m_blocks, n_blocks, k_blocks = ceil_div(m, bm), ceil_div(n, bn), ceil_div(k, BLOCK_K)
    waves = ceil_div(m_blocks * n_blocks * groups, num_sms)
    math_wgs = 1 if bm == 64 else 2
    slabs = bm // 64
    ping_pong = slabs == math_wgs and bn <= 128
    mma = bm * bn * BLOCK_K * 2 / COST_MMA_RATE
    smem = (slabs * (64 + bn) + bm + bn) * BLOCK_K / COST_SMEM_BW
    latency = COST_LAT_PING_PONG if ping_pong else COST_LAT_ONE_ACC
    if math_wgs == 1 and not ping_pong:
        per_kblock = max(mma + latency, smem)  # one warpgroup, one accumulator: MMA, then promotion
    else:
        per_kblock = max(mma, smem, latency * (slabs // math_wgs))
        if bn > 128:
            per_kblock *= COST_WIDE_TILE
    critical_path = waves * k_blocks * per_kblock
    l2 = groups * k * (n_blocks * m_blocks * bm / cluster + m_blocks * n_blocks * bn) / COST_L2_BW
    dram = groups * (m * k + n * k + 2 * m * n) / COST_DRAM_BW
    p = COST_SOFTMAX_POWER
    return (critical_path ** p + l2 ** p + dram ** p) ** (1 / p) + COST_FIXED


@functools.lru_cache(maxsize=4096)
def choose(layout: str, m: int, n: int, k: int, num_groups: int, num_sms: int) -> LaunchPlan:
    """Configuration for D[m, n] = A[m, k] B[n, k]^T (per group). `m` is the rows per group for the
    masked layout (the expected count) and the total rows otherwise."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if min(m, n, k, num_groups, num_sms) <= 0:
        raise ValueError(f"m, n, k, num_groups and num_sms must be positive, got {(m, n, k, num_groups, num_sms)}")
    block_ms = (64, 128) if layout == "contiguous" else (64, 128, 256)
    groups = num_groups if layout == "masked" else 1   # the contiguous layout's rows are already summed

    best = None
    for bm in block_ms:
        if bm > 64 and m <= 64 and layout != "contiguous":
            continue  # a 64-row block already covers M
        for bn in block_n_candidates(bm):
            stages = _stages(bm, bn, k)
            if stages < min(3, ceil_div(k, BLOCK_K)):
                continue
            # Multicast pairs need an even number of n-blocks (every rasterization band is then even).
            # Measured (and worth it) only from MULTICAST_MIN_ROWS rows per group.
            multicast_ok = m >= MULTICAST_MIN_ROWS and ceil_div(n, bn) % 2 == 0 and num_sms >= 2
            for cluster in ((1, 2) if multicast_ok else (1,)):
                t = predicted_seconds(m, n, k, groups, bm, bn, cluster, num_sms)
                score = (t, bm, bn, cluster)
                if best is None or score < best[0]:
                    best = (score, bm, bn, stages, cluster)
    assert best is not None
    _, bm, bn, stages, cluster = best
    tiles = ceil_div(m, bm) * ceil_div(n, bn) * groups
    config = KernelConfig(layout=layout, n=n, k=k, num_groups=num_groups, block_m=bm, block_n=bn,
                          stages=stages, num_math_wg=1 if bm == 64 else 2, swizzle_d=swizzle_for(bn),
                          cluster=cluster)
    # As few CTAs as give the same number of waves: the idle SMs save power, so the busy ones clock
    # higher (the GPU runs power-limited under FP8 load).
    waves = ceil_div(tiles, num_sms)
    grid = min(ceil_div(ceil_div(tiles, waves), cluster) * cluster, num_sms - num_sms % cluster)
    return LaunchPlan(config=config, grid=grid, num_tiles=tiles)

"""The benchmark's problems: shape tables, DeepGEMM's H200 numbers for them, the grouped layouts' row
draws, and the FLOP and byte counts. Pure Python and NumPy (no GPU)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SEED = 20261122
MASKED_MAX_M = 4096


@dataclass(frozen=True)
class Shape:
    kind: str       # "normal" | "contiguous" | "masked" | "uneven" (contiguous, rows drawn per expert)
    groups: int
    m: int          # rows (normal); rows per expert (contiguous); expected rows per group (masked); mean (uneven)
    n: int
    k: int

    @property
    def label(self) -> str:
        if self.kind == "normal":
            return f"{self.m}x{self.n}x{self.k}"
        return f"{self.kind[0]}{self.groups}x{self.m}x{self.n}x{self.k}"


def parse_mnk(text: str) -> tuple[int, int, int]:
    """"MxNxK" (positive integers) as (M, N, K), for the tools' --shapes options."""
    dims = text.lower().split("x")
    if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
        raise ValueError(f"--shapes: expected MxNxK with positive integers, got {text!r}")
    return int(dims[0]), int(dims[1]), int(dims[2])


DENSE_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
DENSE_SHAPES = tuple(Shape("normal", 1, m, n, k) for m in (64, 128, 4096) for n, k in DENSE_NK)
CONTIGUOUS_SHAPES = tuple(Shape("contiguous", g, m, n, k) for g, m, n, k in
                          ((4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168), (8, 4096, 7168, 2048)))
MASKED_SHAPES = tuple(Shape("masked", g, m, n, k) for g, m in ((1, 1024), (2, 512), (4, 256))
                      for n, k in ((4096, 7168), (7168, 2048)))
TABLES = {"dense": DENSE_SHAPES, "contiguous": CONTIGUOUS_SHAPES, "masked": MASKED_SHAPES}
# Decode (M <= 128): DeepGEMM's (N, K) at every small M, narrow-N layers, and masked MoE decode with many
# groups of a few rows each, some of them empty. Tables are (table name, shape) pairs.
DECODE_M = (1, 2, 4, 8, 16, 32, 64, 128)
DECODE_DENSE_SHAPES = tuple(Shape("normal", 1, m, n, k) for m in DECODE_M for n, k in DENSE_NK)
DECODE_NARROW_SHAPES = tuple(Shape("normal", 1, m, n, k) for m in (1, 16, 64, 128) for n in (256, 512, 1024)
                             for k in (4096, 7168))
DECODE_MASKED_SHAPES = tuple(Shape("masked", g, e, n, k) for g in (8, 32, 128) for e in (1, 4, 16, 32)
                             for n, k in ((4096, 7168), (7168, 2048)))
DECODE_TABLES = {"dense": DECODE_DENSE_SHAPES, "narrow": DECODE_NARROW_SHAPES, "masked": DECODE_MASKED_SHAPES}
DECODE_QUICK = {"dense": (Shape("normal", 1, 1, 4096, 7168), Shape("normal", 1, 64, 2112, 7168)),
                "narrow": (Shape("normal", 1, 16, 512, 7168),),
                "masked": (Shape("masked", 8, 1, 4096, 7168), Shape("masked", 128, 16, 7168, 2048))}
# Prefill (issue 22): dense at large M, and the contiguous layout with uneven experts, some of them empty
# (rows per expert drawn by uneven_expert_rows, each segment padded to PREFILL_ALIGN rows).
PREFILL_DENSE_SHAPES = tuple(Shape("normal", 1, m, n, k) for m in (2048, 8192, 16384) for n, k in DENSE_NK)
PREFILL_UNEVEN_NK = ((4096, 7168), (7168, 2048), (16384, 5120), (5120, 8192))
PREFILL_UNEVEN_SHAPES = tuple(Shape("uneven", g, mean, n, k) for g in (8, 16, 32, 64) for mean in (256, 1024)
                              for n, k in PREFILL_UNEVEN_NK)
PREFILL_TABLES = {"dense": PREFILL_DENSE_SHAPES, "uneven": PREFILL_UNEVEN_SHAPES}
PREFILL_QUICK = {"dense": (Shape("normal", 1, 8192, 4096, 7168),),
                 "uneven": (Shape("uneven", 16, 1024, 4096, 7168),)}
PREFILL_ALIGN = 128             # DeepGEMM 8dfa329's contiguous alignment (cugemm8's, 64, divides it)
PREFILL_EMPTY_P = 1 / 8         # each expert empty with this probability (at least one, never all)
QUICK_SHAPES = {
    "dense": (DENSE_SHAPES[0], DENSE_SHAPES[11], DENSE_SHAPES[16]),   # 64x2112x7168, 128x7168x2048, 4096x4096x7168
    "contiguous": (CONTIGUOUS_SHAPES[3],),
    "masked": (MASKED_SHAPES[3],),
}

# DeepGEMM TFLOPS (public repository at 8dfa329, built with nvcc 13.0) measured on an NVIDIA H200 (132 SMs)
# with this protocol on 2026-11-22, rounded to 0.1; grouped shapes timed one kernel at a time ("alone").
# Only comparable with runs on an H200.
ANCHOR_GPU = "NVIDIA H200"
ANCHOR_SOURCE = "DeepGEMM 8dfa329 TFLOPS measured on an NVIDIA H200 with this protocol, 2026-11-22"
DEEPGEMM_H200_TFLOPS = {
    Shape("normal", 1, 64, 2112, 7168): 142.7, Shape("normal", 1, 64, 24576, 1536): 261.7,
    Shape("normal", 1, 64, 32768, 512): 193.4, Shape("normal", 1, 64, 7168, 16384): 363.6,
    Shape("normal", 1, 64, 4096, 7168): 215.1, Shape("normal", 1, 64, 7168, 2048): 185.8,
    Shape("normal", 1, 128, 2112, 7168): 263.9, Shape("normal", 1, 128, 24576, 1536): 481.3,
    Shape("normal", 1, 128, 32768, 512): 348.6, Shape("normal", 1, 128, 7168, 16384): 606.7,
    Shape("normal", 1, 128, 4096, 7168): 404.6, Shape("normal", 1, 128, 7168, 2048): 312.3,
    Shape("normal", 1, 4096, 2112, 7168): 1114.8, Shape("normal", 1, 4096, 24576, 1536): 1299.3,
    Shape("normal", 1, 4096, 32768, 512): 969.4, Shape("normal", 1, 4096, 7168, 16384): 1449.5,
    Shape("normal", 1, 4096, 4096, 7168): 1401.4, Shape("normal", 1, 4096, 7168, 2048): 1221.9,
    Shape("contiguous", 4, 8192, 4096, 7168): 1328.7, Shape("contiguous", 4, 8192, 7168, 2048): 1228.4,
    Shape("contiguous", 8, 4096, 4096, 7168): 1287.6, Shape("contiguous", 8, 4096, 7168, 2048): 1202.0,
    Shape("masked", 1, 1024, 4096, 7168): 1208.9, Shape("masked", 1, 1024, 7168, 2048): 707.8,
    Shape("masked", 2, 512, 4096, 7168): 661.4, Shape("masked", 2, 512, 7168, 2048): 810.1,
    Shape("masked", 4, 256, 4096, 7168): 666.8, Shape("masked", 4, 256, 7168, 2048): 623.9,
}
# Valid rows (all groups) of DeepGEMM's own masked_m draw behind each masked number: its TFLOPS count these
# rows, which differ from our draw (recovered as TFLOPS * time / (2 N K) from the same measurement).
DEEPGEMM_H200_MASKED_ROWS = {
    Shape("masked", 1, 1024, 4096, 7168): 1006, Shape("masked", 1, 1024, 7168, 2048): 778,
    Shape("masked", 2, 512, 4096, 7168): 1037, Shape("masked", 2, 512, 7168, 2048): 1293,
    Shape("masked", 4, 256, 4096, 7168): 1085, Shape("masked", 4, 256, 7168, 2048): 973,
}


def shapes_for(section: str, quick: bool) -> tuple[Shape, ...]:
    return QUICK_SHAPES[section] if quick else TABLES[section]


def decode_shapes(quick: bool) -> list[tuple[str, Shape]]:
    """The decode section's rows in order: (table, shape) with table "dense", "narrow" or "masked"."""
    tables = DECODE_QUICK if quick else DECODE_TABLES
    return [(table, shape) for table, table_shapes in tables.items() for shape in table_shapes]


def prefill_shapes(quick: bool) -> list[tuple[str, Shape]]:
    """The prefill section's rows in order: (table, shape) with table "dense" or "uneven"."""
    tables = PREFILL_QUICK if quick else PREFILL_TABLES
    return [(table, shape) for table, table_shapes in tables.items() for shape in table_shapes]


def uneven_expert_rows(groups: int, mean: int, seed: int = SEED) -> list[int]:
    """Rows per expert for the prefill section, fixed seed per (groups, mean): each uniform over the integers
    from ceil(mean / 2) to floor(3 * mean / 2), then each expert emptied with probability PREFILL_EMPTY_P;
    at least one expert is empty and at least one is not."""
    if groups < 2 or mean < 1:
        raise ValueError(f"need groups >= 2 and mean >= 1; got groups={groups}, mean={mean}")
    rng = np.random.default_rng([seed, groups, mean, 0x9EF1])
    rows = rng.integers((mean + 1) // 2, 3 * mean // 2, size=groups, endpoint=True)
    empty = rng.random(groups) < PREFILL_EMPTY_P
    if empty.all():
        empty[rng.integers(groups)] = False
    if not empty.any():
        empty[rng.integers(groups)] = True
    rows[empty] = 0
    return [int(r) for r in rows]


def decode_max_m(expected: int) -> int:
    """A masked decode array's rows per group: room for the largest draw (2 * expected), at least 64, in
    whole 64-row blocks (any max_m is valid; whole blocks keep the groups' A rows 64-row aligned)."""
    return max(64, -(-2 * expected // 64) * 64)


def decode_masked_m(groups: int, expected: int, seed: int = SEED) -> np.ndarray:
    """Valid rows per group for masked decode, fixed seed per (groups, expected): uniform over 0..2*expected,
    then groups // 4 groups (drawn) forced to 0; never all empty."""
    rng = np.random.default_rng([seed, groups, expected, 0xDEC])
    m = rng.integers(0, 2 * expected, size=groups, endpoint=True)
    empty = rng.choice(groups, size=groups // 4, replace=False)
    m[empty] = 0
    if not m.any():
        m[min(set(range(groups)) - set(empty.tolist()))] = expected
    return m.astype(np.int32)


def masked_decode_bytes(masked_m, n: int, k: int) -> int:
    """Bytes a masked call must move: the valid rows' A and D, and the weights of the non-empty groups only
    (an empty group's B need not be read)."""
    rows = int(sum(int(v) for v in masked_m))
    return gemm_bytes(rows, n, k, groups=sum(1 for v in masked_m if int(v) > 0))


def rescale_rows(masked_m, total: int) -> list[int]:
    """Our per-group draw scaled to `total` valid rows (proportions kept; the remainder to the first
    groups): DeepGEMM's total with our split, for a like-for-like count of valid rows."""
    m = [int(v) for v in masked_m]
    out = [v * total // sum(m) for v in m]
    for i in range(total - sum(out)):
        out[i % len(out)] += 1
    return out


def gemm_flops(rows: int, n: int, k: int) -> int:
    """2*M*N*K over the rows actually computed (grouped: the valid rows of all groups)."""
    return 2 * rows * n * k


def gemm_bytes(rows: int, n: int, k: int, groups: int = 1) -> int:
    """FP8 A (M*K) + FP8 B (G*N*K) + bf16 D (2*M*N); scales are not counted."""
    return rows * k + groups * n * k + 2 * rows * n


def roofline_fraction(nbytes: int, seconds: float, copy_bytes_per_s: float, empty_kernel_s: float) -> float:
    """Memory-bound floor over the measured time: (bytes / copy bandwidth + empty-kernel time) / time."""
    return (nbytes / copy_bytes_per_s + empty_kernel_s) / seconds


def draw_masked_m(groups: int, expected: int, max_m: int = MASKED_MAX_M, seed: int = SEED) -> np.ndarray:
    """Valid rows per group, int(U(0.7, 1.3) * expected), fixed seed per (groups, expected)."""
    rng = np.random.default_rng([seed, groups, expected])
    m = (rng.uniform(0.7, 1.3, size=groups) * expected).astype(np.int64)
    return np.clip(m, 1, max_m).astype(np.int32)


def contiguous_m_indices(groups: int, m: int, align: int) -> tuple[np.ndarray, int]:
    """Expert id per row with every expert's m rows padded to a multiple of `align` (-1 on padding)."""
    seg = -(-m // align) * align
    idx = np.full((groups, seg), -1, dtype=np.int32)
    idx[:, :m] = np.arange(groups, dtype=np.int32)[:, None]
    return idx.reshape(-1), seg


def uneven_rows(groups: int, mean: int, seed: int = SEED) -> list[int]:
    """Rows per expert, int(mean * U(0.7, 1.3)) each (fixed seed per (groups, mean)), rescaled to sum to
    groups * mean exactly (the same valid total as the even shape)."""
    rng = np.random.default_rng([seed, groups, mean])
    rows = (rng.uniform(0.7, 1.3, size=groups) * mean).astype(np.int64)
    target = groups * mean
    rows = np.floor(rows * (target / rows.sum())).astype(np.int64)
    rows[:target - int(rows.sum())] += 1
    return [int(r) for r in rows]


def uneven_m_indices(groups: int, mean: int) -> np.ndarray:
    """The prefill section's m_indices for uneven experts: uneven_expert_rows, each padded to PREFILL_ALIGN."""
    return contiguous_layout(uneven_expert_rows(groups, mean), PREFILL_ALIGN)[0]


def contiguous_layout(rows: list[int], align: int) -> tuple[np.ndarray, list[int]]:
    """(m_indices, segment start offsets): expert g's rows[g] rows at a multiple of `align`, its segment
    padded to a multiple of `align` with -1."""
    segs = [-(-r // align) * align for r in rows]
    idx = np.full(sum(segs), -1, dtype=np.int32)
    offsets, off = [], 0
    for g, (r, s) in enumerate(zip(rows, segs)):
        idx[off:off + r] = g
        offsets.append(off)
        off += s
    return idx, offsets


def geomean(values) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None

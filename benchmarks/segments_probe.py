"""Where do contiguous tiles lose time to uneven experts? Times tiles on expert layouts that differ in one thing at a
time (segments padded to shapes.PREFILL_ALIGN rows):

    python -m benchmarks.segments_probe [--groups 64] [--nk 5120x8192] [--tiles 256x128,128x192] [--reps 20]
                                        [--layouts 1024,896,960,uneven1024]

Layouts (--layouts): R, every expert R rows (1024: no tile spans two experts; 896: every other expert boundary splits
a 256-row tile; 960: 64 padding rows an expert); RxS, experts of R and S rows alternating; R-empty, R rows with every
8th expert empty; unevenR, issue 22's uneven draw about R (shapes.uneven_expert_rows); unevenR-full, that draw with
its empty experts given R rows; unevenR-r256, that draw with each expert rounded up to 256 rows (no tile spans two
experts); unevenR-paired, that draw with the experts of an odd number of 128-row blocks moved next to each other, so
that more CTA pairs (m-blocks 2p, 2p + 1) hold two blocks of one expert. Prints per layout the share of BLOCK_M-row
tiles spanning two experts and of CTA pairs within one expert, and per tile the median µs, TFLOPS over the valid rows
and the time over the first tile's (--across: all layouts' calls timed together, against the first layout's first
tile); with --check, whether each tile's output equals the first tile's bit for bit. --experts E < G gives segment g
expert g % E: the same layout with E experts' weights, which stay in L2 when E is small."""
from __future__ import annotations

import argparse
import re
import statistics

import numpy as np

from . import shapes
from .env import poison_bf16
from .protocol import Timer
from .tile_probe import with_band, with_stages

TILE = re.compile(r"(\d+)x(\d+)(?:s(\d+))?(p)?(?:r(\d+))?")


def spanning(idx, block_m: int) -> float:
    """Share of block_m-row tiles whose rows hold more than one expert."""
    tiles = [set(idx[i:i + block_m].tolist()) - {-1} for i in range(0, len(idx), block_m)]
    return sum(len(t) > 1 for t in tiles) / len(tiles)


def sharing_pairs(idx, block_m: int = 128) -> float:
    """Share of CTA pairs (m-blocks 2p, 2p + 1 of block_m rows) that share B: each block one pass of the same expert
    (the kernel's rule: a 64-row slab's expert is its first row's, padding slabs idle)."""
    def experts(b):
        return {int(idx[r]) for r in range(b * block_m, min((b + 1) * block_m, len(idx)), 64)} - {-1}
    blocks = -(-len(idx) // block_m)
    pairs = [(experts(b), experts(b + 1) if b + 1 < blocks else set()) for b in range(0, blocks, 2)]
    return sum(a == b and len(a) == 1 for a, b in pairs) / len(pairs)


def pair_odd_experts(rows: list[int], align: int = 128) -> list[int]:
    """`rows` reordered: each expert of an odd number of align-row blocks held back until the next such expert,
    then both together, so that the pair of blocks each leaves over shares a CTA pair (order otherwise kept)."""
    out, held = [], None
    for r in rows:
        if -(-r // align) % 2 == 0:
            out.append(r)
        elif held is None:
            held = r
        else:
            out += [held, r]
            held = None
    return out + ([held] if held is not None else [])


def layout_rows(spec: str, groups: int) -> list[int]:
    """Rows per expert of one --layouts entry."""
    if spec.startswith("uneven"):
        mean = int(spec[6:].removesuffix("-full").removesuffix("-r256").removesuffix("-paired"))
        rows = shapes.uneven_expert_rows(groups, mean)
        if spec.endswith("-r256"):
            return [-(-r // 256) * 256 for r in rows]
        if spec.endswith("-paired"):
            return pair_odd_experts(rows)
        return [r or mean for r in rows] if spec.endswith("-full") else rows
    if spec.endswith("-empty"):
        r = int(spec.removesuffix("-empty"))
        return [0 if g % 8 == 7 else r for g in range(groups)]
    if "x" in spec:
        r, q = (int(v) for v in spec.split("x"))
        return [r if g % 2 == 0 else q for g in range(groups)]
    return [int(spec)] * groups


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=64)
    p.add_argument("--nk", default="5120x8192", help="NxK")
    p.add_argument("--experts", type=int, default=0, help="distinct experts (segment g gets g %% E; 0: --groups)")
    p.add_argument("--layouts", default="1024,896,960,uneven1024", help="comma-separated (see above)")
    p.add_argument("--tiles", default="256x128,128x192",
                   help="BLOCK_MxBLOCK_N[sSTAGES][p][rBAND], comma-separated (p: CTA pairs sharing B; rBAND: bands "
                        "of BAND n-blocks)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--dense", action="store_true", help="also the dense kernel's pick on the same rows")
    p.add_argument("--check", action="store_true", help="each tile's output compared with the first tile's (bitwise)")
    p.add_argument("--across", action="store_true",
                   help="time every layout's calls together (interleaved), each against the first layout's first tile")
    args = p.parse_args(argv)
    n, k = (int(v) for v in args.nk.split("x"))
    tiles = []
    for tile in args.tiles.split(","):
        match = TILE.fullmatch(tile)
        if match is None:
            p.error(f"--tiles: expected BLOCK_MxBLOCK_N[sSTAGES][p][rBAND], e.g. 128x256s2p or 128x256pr16; "
                    f"got {tile!r}")
        tiles.append((int(match[1]), int(match[2]), int(match[3] or 0), bool(match[4]), int(match[5] or 0)))
    layouts = {spec: layout_rows(spec, args.groups) for spec in args.layouts.split(",") if spec}

    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm, heuristics

    timer = Timer(settle_s=0.5, warmup=3)
    rng = cupy.random.default_rng(0)
    experts = args.experts or args.groups
    b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal((experts, n, k), dtype=cupy.float32))
    timed, flops = {}, {}   # --across: every layout's calls, timed together

    def report(times: dict, flops_of: dict) -> None:
        base = statistics.median(next(iter(times.values())))
        for label, samples in times.items():
            med = statistics.median(samples)
            print(f"    {label:32s} {med * 1e6:9.1f} us {flops_of[label] / med / 1e12:7.0f} TFLOPS  {med / base:.3f}x",
                  flush=True)

    for name, rows in layouts.items():
        idx, _ = shapes.contiguous_layout(rows, shapes.PREFILL_ALIGN)
        idx = np.where(idx >= 0, idx % experts, idx).astype(np.int32)
        m, valid = len(idx), sum(rows)
        a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cupy.float32))
        sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
        m_indices = cupy.asarray(idx)
        fns, outs = {}, []
        for tile, (bm, bn, stages, pairs, band) in zip(args.tiles.split(","), tiles):
            cfg = with_stages(heuristics.make_config("contiguous", n, k, experts, bm, bn, cluster=2 if pairs else 1,
                                                     share_b=pairs), stages, tile, k)
            cfg = with_band(cfg, band)
            out = cupy.empty((m, n), dtype=cugemm8.api.BF16)
            poison_bf16(cupy, out)
            outs.append(out)
            run = fp8_gemm.bind(cfg, a, sa, b, sb, out, layout=m_indices)
            fns[f"{bm}x{bn} s{cfg.stages}" + (" pairs" if pairs else "") + (f" r{band}" if band else "")] = run
            run()
        if args.check:
            for tile, out in zip(args.tiles.split(",")[1:], outs[1:]):
                same = bool((out.view(cupy.uint16) == outs[0].view(cupy.uint16)).all())
                print(f"    {tile} bitwise equal to {args.tiles.split(',')[0]}: {same}", flush=True)
        if args.dense:  # the dense kernel's pick on the same rows, with expert 0's weights
            dense_out = cupy.empty_like(outs[0])
            fns["dense pick"] = lambda a=a, sa=sa, out=dense_out: cugemm8.matmul(a, sa, b[0], sb[0], out=out)
            fns["dense pick"]()
        spans = ", ".join(f"{bm}-row tiles spanning two experts {spanning(idx, bm):.1%}"
                          for bm in sorted({t[0] for t in tiles}))
        spans += f"; 128-row CTA pairs within one expert {sharing_pairs(idx):.1%}"
        print(f"{args.groups} segments of {experts} experts, layout {name}: {m} rows ({valid} valid), N={n} K={k}; "
              f"{spans}", flush=True)
        if args.across:  # timed with the other layouts' calls at the end
            timed.update({f"{name}: {label}": fn for label, fn in fns.items()})
            flops.update({f"{name}: {label}": 2 * valid * n * k for label in fns})
        else:
            report(timer.interleaved(fns, args.reps, rotate=True), {label: 2 * valid * n * k for label in fns})
    if args.across:
        report(timer.interleaved(timed, args.reps, rotate=True), flops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

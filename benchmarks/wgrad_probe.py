"""What bounds the weight gradient's main loop: the same configuration built whole and with parts taken out, timed
interleaved on the same operands (the variants of benchmarks.ablation_probe; wrong results, timing only):

    python -m benchmarks.wgrad_probe [--shapes 7168x2112x4096,...] [--tiles 128x160,128x128s5]
                                     [--variants base,no-promote,...]

- `base`; `no-promote` (one product a k-block kept); `no-loads` (the producer declares each stage full without
  loading it); `mma-only` (both); `no-mma`; `loads-only` (no MMAs, promotion cut: the stage ring's pace alone).
Tiles are BLOCK_MxBLOCK_N[sSTAGES][dATOMS][t][rRASTER] (heuristics_wgrad.make_config; t: computing D^T) or
pick[rRASTER], with bands of RASTER n-blocks. NOTES.md v32 has what this measured, and the
main-loop forms it timed before they were taken out of the sources (commits 15dbba1 and 1ec97db:
the two math warpgroups taking turns at the tensor cores, two accumulators a warpgroup, two column-half MMA
chains)."""
from __future__ import annotations

import re

from .ablation_probe import build_all, probe_args, time_variants
from .protocol import Timer
from .tile_probe import with_band
from .tune import provenance_line

TILE = re.compile(r"(?:pick|(\d+)x(\d+)(?:s(\d+))?(?:d(\d+))?(t)?)(L)?(?:r(\d+))?")


def tile_config(tile: str, n: int, m: int | None = None):
    """BMxBN[sSTAGES][dATOMS][t][L][rRASTER], or pick[L][rRASTER] (the heuristic's tile at M, N), with bands of
    RASTER n-blocks; ATOMS of the FP32 output tile held; `t`: computing D^T (the kernel's rows are N's, its N is M);
    `L`: D loaded into shared memory, added to and stored (load_d) in place of the TMA reduce-add."""
    from cugemm8 import heuristics_wgrad

    match = TILE.fullmatch(tile)
    if match is None or (match[1] is None and m is None) or (match[5] and m is None):
        raise SystemExit(f"tile {tile!r}: expected BMxBN[sSTAGES][dATOMS][t][rRASTER] or pick[rRASTER], e.g. "
                         "128x160, 128x128s5r16, 128x160s3d4t or pickr16")
    if match[1] is None:
        cfg = heuristics_wgrad.choose("normal", m, n, 1, 132).config
        if match[6]:
            cfg = heuristics_wgrad.make_config("normal", cfg.n, 1, cfg.block_m, cfg.block_n, transpose_d=cfg.transpose_d,
                                               load_d=True)
    else:
        cfg = heuristics_wgrad.make_config("normal", m if match[5] else n, 1, int(match[1]), int(match[2]),
                                           int(match[3] or 0), int(match[4] or 0), transpose_d=bool(match[5]),
                                           load_d=bool(match[6]))
    return with_band(cfg, match[7])


def main(argv=None) -> int:
    args, shapes, tiles, variants = probe_args(argv, __doc__, "7168x2112x4096,2048x7168x4096,512x32768x4096",
                                               "128x160,128x128", "BLOCK_MxBLOCK_N[sSTAGES][dATOMS][t][rRASTER] or pick[rRASTER]")

    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm

    configs = {(m, n, tile): tile_config(tile, n, m) for m, n, _ in shapes for tile in tiles}
    build_all(configs.values(), variants)

    print(provenance_line(), flush=True)
    timer = Timer(settle_s=0.5, warmup=3)
    rng = cupy.random.default_rng(0)
    for m, n, k in shapes:
        a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cupy.float32))
        b, sb = cugemm8.per_token_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32))
        sa, sb = cugemm8.get_col_major_tma_aligned_tensor(sa), cugemm8.get_col_major_tma_aligned_tensor(sb)
        binders = {}
        for tile in tiles:
            cfg = configs[m, n, tile]
            label = (f"{cfg.block_m}x{cfg.block_n}{'t' if cfg.transpose_d else ''}{'L' if cfg.load_d else ''} "
                     f"s{cfg.stages} d{cfg.d_atoms} r{cfg.raster_group}")
            binders[label] = lambda cfg=cfg: fp8_gemm.bind_wgrad(
                cfg, a, sa, b, sb, cupy.zeros((m, n), cupy.float32))
        time_variants(timer, (m, n, k), binders, variants, args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

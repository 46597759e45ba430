"""One GEMM call (after warm-up) for a profiler to catch:

    python -m benchmarks.profile_one M N K [BM BN CLUSTER] [--groups G [--uneven MEAN]] [--masked G] [--share-b]
                                     [--out-dtype float8_e4m3] [--deepgemm]

--groups G: the contiguous layout, G experts of M/G rows each (M a multiple of 64*G), B [G, N, K].
--uneven MEAN (with --groups G): instead, issue 22's uneven experts about MEAN rows (shapes.uneven_expert_rows), each
segment padded to 128 rows with m_indices -1; M is then ignored.
--masked G: the masked layout, G groups of M valid rows each in a [G, max_m, K] A (max_m: M rounded
up to a multiple of the benchmark's MASKED_MAX_M), expected_m = M.
--share-b: with CLUSTER 2, the contiguous layout's pairs share B (KernelConfig.share_b) instead of A.
--out-dtype float8_e4m3: cugemm8 writes e4m3 with 1x128 scales (its pick for that output; DeepGEMM stays bf16).
--tile T: the configuration benchmarks.tile_probe names by T (dense only; e.g. 64x128k2, 128x128k3n, pick).
--deepgemm: then DeepGEMM (8dfa329, importable) three times on the same operands (dense and contiguous), so that
`-k regex:fp8_gemm --launch-skip 2 -c 4` catches cugemm8's third call and DeepGEMM's three.
Run under e.g. `ncu --clock-control none -k cugemm8_fp8_gemm --launch-skip 2 -c 1 ...` (scripts/ncu_pair.sh)."""
import argparse
import sys

import cupy
import numpy as np

import cugemm8

from . import library
from .shapes import MASKED_MAX_M, uneven_m_indices


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", type=int, nargs="+", help="M N K [BM BN CLUSTER]")
    ap.add_argument("--groups", type=int, default=0)
    ap.add_argument("--masked", type=int, default=0)
    ap.add_argument("--uneven", type=int, default=0)
    ap.add_argument("--share-b", action="store_true")
    ap.add_argument("--deepgemm", action="store_true")
    ap.add_argument("--tile", default="")
    ap.add_argument("--out-dtype", default="bfloat16", choices=("bfloat16", "float8_e4m3"))
    args = ap.parse_args(argv)
    m, n, k = args.shape[:3]
    g = args.groups or args.masked
    uneven = None
    if args.uneven:
        if not args.groups:
            ap.error("--uneven needs --groups")
        uneven = uneven_m_indices(g, args.uneven)
        m = len(uneven)
    layout = "masked" if args.masked else "contiguous" if g else "normal"
    rng = cupy.random.default_rng(0)
    a_shape = (g, -(-m // MASKED_MAX_M) * MASKED_MAX_M, k) if args.masked else (m, k)
    a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal(a_shape, dtype=cupy.float32))
    b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal((g, n, k) if g else (n, k), dtype=cupy.float32))
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    out = cupy.empty(a_shape[:-1] + (n,), dtype=cugemm8.api.BF16)
    fp8 = args.out_dtype != "bfloat16"
    d = cupy.empty(out.shape, dtype=cupy.uint8) if fp8 else out
    d_scale = cugemm8.empty_scale(out.shape[:-1] + (-(-n // 128),)) if fp8 else None
    if args.masked:
        idx = cupy.full((g,), m, dtype=cupy.int32)
    elif uneven is not None:
        idx = cupy.asarray(uneven)
    else:
        idx = cupy.asarray(np.repeat(np.arange(g, dtype=np.int32), m // g)) if g else None
    lib = library.current()
    cfg = lib.choose(layout, m, n, k, max(g, 1), cugemm8.get_num_sms(), *((args.out_dtype,) if fp8 else ())).config
    if len(args.shape) > 3:
        bm, bn, cl = args.shape[3:6]
        cfg = lib.make_config(layout, n, k, max(g, 1), bm, bn, cluster=cl,
                              **({"share_b": True} if args.share_b else {}),
                              **({"out_format": args.out_dtype} if fp8 else {}))
    if args.tile:
        from .tile_probe import tile_config

        if g:
            ap.error("--tile names dense configurations only")
        cfg = tile_config(args.tile, n, k, args.out_dtype, m)
    grid = cugemm8.get_num_sms() if args.masked else None
    run = lib.bind(cfg, a, sa, b, sb, d, layout=idx, grid=grid, out_scale=d_scale)
    print(cfg, "grid", run.launcher.grid, flush=True)
    for _ in range(3):
        run()
    cupy.cuda.Device().synchronize()
    if args.deepgemm and not args.masked:
        import torch
        import deep_gemm

        lhs = (torch.from_dlpack(a).view(torch.float8_e4m3fn),
               deep_gemm.get_col_major_tma_aligned_tensor(torch.from_dlpack(sa).contiguous()))
        rhs = (torch.from_dlpack(b).view(torch.float8_e4m3fn), torch.from_dlpack(sb).contiguous())
        d = torch.from_dlpack(out)
        for _ in range(3):
            if g:
                deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, d, torch.from_dlpack(idx))
            else:
                deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, d)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One weight-gradient call of cugemm8 and one of DeepGEMM (8dfa329) on the same operands, each after warm-up, for
a profiler to catch side by side:

    ncu --clock-control none -k regex:wgrad --launch-skip 4 -c 2 ... python -m benchmarks.profile_wgrad M N K [BM BN]

The launches are, in order: cugemm8 twice (warm-up), DeepGEMM twice (compile, warm-up), then the two profiled ones.
Without deep_gemm importable only cugemm8's run (then use --launch-skip 2 -c 1)."""
from __future__ import annotations

import argparse
import sys

import cupy

import cugemm8
from cugemm8 import fp8_gemm, heuristics_wgrad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", type=int, nargs="+", help="M N K [BM BN]")
    args = ap.parse_args(argv)
    m, n, k = args.shape[:3]
    rng = cupy.random.default_rng(0)
    a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cupy.float32))
    b, sb = cugemm8.per_token_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32))
    sa, sb = cugemm8.get_col_major_tma_aligned_tensor(sa), cugemm8.get_col_major_tma_aligned_tensor(sb)
    out = cupy.zeros((m, n), cupy.float32)
    cfg = heuristics_wgrad.choose("normal", m, n, 1, cugemm8.get_num_sms()).config
    if len(args.shape) > 3:
        cfg = heuristics_wgrad.make_config("normal", n, 1, *args.shape[3:5])
    ours = fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out)
    print(cfg, "grid", ours.launcher.grid, flush=True)
    theirs = None
    try:
        import torch
        import deep_gemm

        f8 = torch.float8_e4m3fn
        lhs = (torch.from_dlpack(a).view(f8), torch.from_dlpack(sa))
        rhs = (torch.from_dlpack(b).view(f8), torch.from_dlpack(sb))
        d = torch.from_dlpack(out)

        def theirs():
            deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, d)
    except Exception as exc:  # noqa: BLE001 - profile ours alone
        print(f"deep_gemm not run: {type(exc).__name__}: {exc}", flush=True)
    for _ in range(2):
        ours()
    cupy.cuda.Device().synchronize()
    if theirs:
        for _ in range(2):
            theirs()
        torch.cuda.synchronize()
    ours()
    cupy.cuda.Device().synchronize()
    if theirs:
        theirs()
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where does a decode GEMM with few rows lose time? For a fixed configuration, times M = 1 .. 64 and, at
the same M, the same call with A (and its scales) padded to BLOCK_M rows of zeros, so that no TMA box of A
or of its scales reaches past the tensor's rows (the output rows past M are computed and discarded).

    python -m benchmarks.rows_probe [--reps 30] [--out FILE.json]

Prints, per shape and M, the median µs of the plain call and of the padded one (interleaved, protocol.py).
"""
from __future__ import annotations

import argparse
import statistics
import sys

from .protocol import Timer
from .tune import dense_inputs, gpu_props, provenance, write

# (N, K, block_m, block_n, split_k): decode picks whose time rose below M = 4 or 64 in the v17 table.
CASES = ((7168, 2048, 64, 64, 1), (4096, 7168, 64, 64, 2), (4096, 7168, 64, 32, 1), (32768, 512, 64, 128, 1),
         (256, 7168, 64, 64, 4), (2112, 7168, 64, 96, 4))
ROWS = (1, 2, 3, 4, 8, 16, 32, 64)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cupy

    import cugemm8
    from cugemm8 import fp8_gemm, heuristics

    timer = Timer()
    rows_out = []
    for n, k, bm, bn, split in CASES:
        cfg = heuristics.make_config("normal", n, k, 1, bm, bn, split_k=split, stream_b=True)
        for m in ROWS:
            a, sa, b, sb = dense_inputs(m, n, k)
            pa = cupy.zeros((bm, k), dtype=a.dtype)
            pa[:m] = a
            psa = cugemm8.get_col_major_tma_aligned_tensor(cupy.ones((bm, sa.shape[1]), dtype=cupy.float32))
            psa[:m] = sa
            out = cupy.empty((m, n), dtype=cugemm8.api.BF16)
            pout = cupy.empty((bm, n), dtype=cugemm8.api.BF16)
            plain = fp8_gemm.bind(cfg, a, sa, b, sb, out)
            padded = fp8_gemm.bind(cfg, pa, psa, b, sb, pout, grid=plain.launcher.grid)
            plain(), padded()
            same = bool((out.view(cupy.uint16) == pout[:m].view(cupy.uint16)).all())
            t = timer.interleaved({"plain": plain, "padded": padded}, args.reps, rotate=True)
            med = {key: statistics.median(v) * 1e6 for key, v in t.items()}
            row = {"n": n, "k": k, "block_m": bm, "block_n": bn, "split_k": split, "m": m, "grid": plain.launcher.grid,
                   "plain_us": med["plain"], "padded_us": med["padded"], "bitwise_equal": same}
            rows_out.append(row)
            print(f"{m:3d}x{n}x{k} {bm}x{bn} s{split}: plain {med['plain']:6.2f} us, padded {med['padded']:6.2f} us"
                  f"{'' if same else '  (outputs differ)'}", flush=True)
    write(args.out, {"gpu": gpu_props(), "info": {**provenance(), "reps": args.reps}, "rows": rows_out})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A/B of the evict-first L2 policy on B's loads (KernelConfig.stream_b) at the heuristic's decode picks:

    python -m benchmarks.stream_ab [--masked | --contiguous] [--reps 20] [--out FILE]

For each decode shape of the sweep (tune.DECODE; --masked: the masked decode shapes, with the decode
table's draws of masked_m; --contiguous: the same groups and draws as small experts of the contiguous
layout, each expert's rows padded to the layout's alignment, empty experts absent) the picked configuration
runs with and without the policy, timed by the sweep protocol (flushed, median) in alternating rounds;
outputs must agree bitwise (the policy changes caching, not arithmetic)."""
from __future__ import annotations

import argparse
import dataclasses
import math


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--masked", action="store_true", help="the masked decode shapes instead of the dense ones")
    mode.add_argument("--contiguous", action="store_true", help="the masked decode draws as contiguous small experts")
    args = ap.parse_args(argv)
    import cupy

    import cugemm8

    from . import library
    from .shapes import DECODE_MASKED_SHAPES, decode_masked_m, decode_max_m
    from .tune import DECODE, SweepTimer, compile_all, dense_inputs, gpu_props, provenance, write

    lib = library.current()
    sms = cugemm8.get_num_sms()
    grouped = args.masked or args.contiguous
    layout_name = "masked" if args.masked else "contiguous" if args.contiguous else "normal"
    align = cugemm8.get_m_alignment_for_contiguous_layout()
    shapes = ([(s.m, s.n, s.k, s.groups) for s in DECODE_MASKED_SHAPES] if grouped
              else [(m, n, k, 1) for m, n, k in DECODE])

    def expert_ids(g, m):  # contiguous: each non-empty expert's rows, padded to `align` with -1
        ids = []
        for e, rows in enumerate(decode_masked_m(g, m).tolist()):
            if rows:
                ids += [e] * rows + [-1] * (-rows % align)
        return ids

    pairs = {}
    for m, n, k, g in shapes:
        rows = len(expert_ids(g, m)) if args.contiguous else m
        cfg = lib.choose(layout_name, rows, n, k, g, sms).config
        pairs[(m, n, k, g)] = (dataclasses.replace(cfg, stream_b=False), dataclasses.replace(cfg, stream_b=True))
    compile_all({c for p in pairs.values() for c in p}, 16)
    timer = SweepTimer(args.reps)
    rows, ratios = [], []
    for (m, n, k, g), (off, on) in pairs.items():
        rng = cupy.random.default_rng(0)
        layout = None
        if grouped:   # G groups' B, quantized one group at a time
            b = cupy.empty((g, n, k), dtype=cupy.uint8)
            sb = cupy.empty((g, -(-n // 128), -(-k // 128)), dtype=cupy.float32)
            for i in range(g):
                b[i], sb[i] = cugemm8.per_block_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32))
        if args.masked:   # G groups of max_m rows, the decode table's masked_m
            max_m = decode_max_m(m)
            layout = cupy.asarray(decode_masked_m(g, m))
            a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((g, max_m, k), dtype=cupy.float32))
            sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
            out_shape = (g, max_m, n)
        elif args.contiguous:   # the same draws, concatenated as padded expert segments
            ids = expert_ids(g, m)
            layout = cupy.asarray(ids, dtype=cupy.int32)
            a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((len(ids), k), dtype=cupy.float32))
            sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
            out_shape = (len(ids), n)
        else:
            a, sa, b, sb = dense_inputs(m, n, k, rng)
            out_shape = (m, n)
        outs = [cupy.zeros(out_shape, dtype=cugemm8.api.BF16) for _ in range(2)]
        calls = [lib.bind(c, a, sa, b, sb, o, layout=layout) for c, o in zip((off, on), outs)]
        for c in calls:
            c()
        same = bool((outs[0].view(cupy.uint16) == outs[1].view(cupy.uint16)).all())
        t = {"off": [], "on": []}
        for _ in range(args.rounds):
            t["off"].append(timer(calls[0]))
            t["on"].append(timer(calls[1]))
        us = {key: min(v) for key, v in t.items()}
        ratios.append(us["on"] / us["off"])
        rows.append({"m": m, "n": n, "k": k, "groups": g, "block_m": off.block_m, "block_n": off.block_n,
                     "split_k": off.split_k, "us_off": us["off"], "us_on": us["on"], "same": same})
        print(f"g{g:<3d} {m:4d} {n:6d} {k:6d} {off.block_m}x{off.block_n} s{off.split_k}: off {us['off']:6.2f} us  "
              f"on {us['on']:6.2f} us  on/off {us['on'] / us['off']:.3f}{'' if same else '  OUTPUTS DIFFER'}",
              flush=True)
    g = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"geomean on/off {g:.3f} over {len(ratios)} shapes; min {min(ratios):.3f} max {max(ratios):.3f}")
    write(args.out, {"gpu": gpu_props(), "info": {**provenance(), "reps": args.reps, "rounds": args.rounds,
                                                  "masked": args.masked, "contiguous": args.contiguous},
                     "geomean_on_over_off": g, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

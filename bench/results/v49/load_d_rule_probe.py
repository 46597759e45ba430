"""The load_d rule (heuristics_wgrad.LOAD_D_ROWS) against the same picks without it, timed interleaved on the same
operands (the library's Timer), dense and k-grouped; results compared bitwise."""
import cupy

import cugemm8
from cugemm8 import fp8_gemm, heuristics_wgrad as hw
from benchmarks.protocol import Timer
from benchmarks.tune import provenance_line
from benchmarks.wgrad import k_sizes_for

CASES = [("normal", 1, 128, 16384, 4096), ("normal", 1, 200, 7168, 4096), ("normal", 1, 384, 7168, 4096),
         ("normal", 1, 300, 4096, 4096), ("normal", 1, 128, 24576, 4096), ("normal", 1, 512, 4096, 4096),
         ("normal", 1, 512, 32768, 4096), ("normal", 1, 384, 24576, 8192),
         ("k_grouped", 4, 256, 4096, 4096), ("k_grouped", 8, 512, 2112, 4096), ("k_grouped", 4, 384, 7168, 4096),
         ("k_grouped", 8, 128, 4096, 4096), ("k_grouped", 4, 512, 4096, 8192)]


def pick(layout, m, n, g, rule):
    saved = hw.LOAD_D_ROWS
    hw.LOAD_D_ROWS = saved if rule else 0
    try:
        return hw.choose.__wrapped__(layout, m, n, g, 132).config
    finally:
        hw.LOAD_D_ROWS = saved


def main():
    print(provenance_line(), flush=True)
    timer = Timer(settle_s=0.5, warmup=3)
    rng = cupy.random.default_rng(0)
    for layout, g, m, n, k in CASES:
        sizes = k_sizes_for(g, k, seed=1) if layout == "k_grouped" else [k]
        ktot = sum(sizes)
        a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, ktot), dtype=cupy.float32))
        b, sb = cugemm8.per_token_cast_to_fp8(rng.standard_normal((n, ktot), dtype=cupy.float32))
        sa, sb = cugemm8.get_col_major_tma_aligned_tensor(sa), cugemm8.get_col_major_tma_aligned_tensor(sb)
        ks = cupy.asarray(sizes, dtype=cupy.int32) if layout == "k_grouped" else None
        shape = (g, m, n) if layout == "k_grouped" else (m, n)
        fns, outs = {}, {}
        for rule in (True, False):
            cfg = pick(layout, m, n, g, rule)
            out = cupy.zeros(shape, cupy.float32)
            run = fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out, k_sizes=ks)
            label = f"{'rule' if rule else 'no rule'} {cfg.block_m}x{cfg.block_n}{'L' if cfg.load_d else ''} s{cfg.stages}"
            fns[label] = run
            run()
            outs[label] = out
        cupy.cuda.Device().synchronize()
        same = len({bytes(o.get().tobytes()) for o in outs.values()}) == 1
        times = timer.interleaved(fns, 15, rotate=True)
        med = {name: sorted(t)[len(t) // 2] * 1e6 for name, t in times.items()}
        names = list(med)
        name = f"{layout} G{g} {m}x{n}x{k}" if layout == "k_grouped" else f"{m}x{n}x{k}"
        print(f"{name:28s} " + "  ".join(f"{x}: {med[x]:8.1f} us" for x in names)
              + f"  rule/no-rule {med[names[0]] / med[names[1]]:.3f}  outputs bitwise equal {same}", flush=True)


if __name__ == "__main__":
    main()

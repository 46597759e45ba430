"""The transpose section: `transpose_fp8` (the data gradient's Wᵀ) on weight shapes, bytes read + written per
second against a device-to-device copy measured in the same run: the 1 GiB copy's rate, and a copy of the same
bytes (payload and scales) timed the same way, interleaved with the transpose, which carries the same fixed
cost of a launch."""
from __future__ import annotations

import statistics

from .decode import calibrate
from .env import Env

# (G, N, K): the dense table's weights, and a grouped MoE weight stack
SHAPES = [(1, 2112, 7168), (1, 24576, 1536), (1, 32768, 512), (1, 7168, 16384), (1, 4096, 7168), (1, 7168, 2048),
          (8, 4096, 7168)]


def run_transpose(env: Env, args) -> dict:
    floor = calibrate(env, args.reps)
    copy_bw = floor.get("copy_bytes_per_s")
    cp, cg = env.cp, env.cg
    print("\n== transpose (transpose_fp8: the payload's bytes and the scale grid) ==")
    print(f"copy {copy_bw / 1e12:.2f} TB/s (read + written)" if copy_bw else "copy: not measured")
    rows = []
    for shape in (SHAPES[:2] if args.quick else SHAPES):
        g, n, k = shape
        b = cp.random.randint(0, 255, size=(g, n, k) if g > 1 else (n, k), dtype=cp.uint8)
        s = cp.ones(b.shape[:-2] + (-(-n // 128), -(-k // 128)), dtype=cp.float32)
        src = cp.empty(b.size + s.size * 4, dtype=cp.uint8)
        dst = cp.empty_like(src)
        samples = env.timer.interleaved({"transpose": lambda: cg.transpose_fp8(b, s),
                                         "copy": lambda: cp.copyto(dst, src)}, args.reps)
        t, t_copy = statistics.median(samples["transpose"]), statistics.median(samples["copy"])
        nbytes = 2 * b.size + 2 * s.size * 4
        row = {"g": g, "n": n, "k": k, "median_s": t, "bytes": nbytes, "bytes_per_s": nbytes / t,
               "fraction_of_copy": nbytes / t / copy_bw if copy_bw else None,
               "same_size_copy_s": t_copy, "fraction_of_same_size_copy": t_copy / t}
        rows.append(row)
        frac = f"{row['fraction_of_copy']:.2f}" if copy_bw else "-"
        print(f"  [{g}, {n}, {k}]: {t * 1e6:9.1f} us  {row['bytes_per_s'] / 1e12:.2f} TB/s  fraction of the 1 GiB copy "
              f"{frac}; same-size copy {t_copy * 1e6:.1f} us, fraction {t_copy / t:.2f}")
        del b, s, src, dst
        env.free()
    fracs = [r["fraction_of_copy"] for r in rows if r["fraction_of_copy"]]
    summary = {"min_fraction_of_copy": min(fracs, default=None),
               "min_fraction_of_same_size_copy": min((r["fraction_of_same_size_copy"] for r in rows), default=None)}
    return {"floor": floor, "rows": rows, "summary": summary}

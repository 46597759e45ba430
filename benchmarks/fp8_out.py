"""The FP8-output table: each GEMM with e4m3 output and 1x128 scales from the epilogue ("fused") against the
same GEMM in bf16 followed by the standalone quantizer ("unfused") and against the bf16 GEMM alone, all three
timed interleaved by the protocol; and each answer's error against the exact product of the quantized
operands. Also the standalone quantizer's bandwidth against a device-to-device copy.

Shapes: the dense table at M = 64, 128 and 4096, and the contiguous and masked tables (shapes.py).
Error: ||dequantized - exact|| / ||exact|| over the valid rows (exact: float64 product of the dequantized
A and B, on the GPU)."""
from __future__ import annotations

import statistics

import numpy as np

from .decode import calibrate, same_size_copy
from .env import Env, quantize_a, quantize_b
from .shapes import MASKED_MAX_M, Shape, contiguous_m_indices, draw_masked_m, geomean, shapes_for

QUANT_SHAPES = ((4096, 7168), (4096, 24576), (16384, 7168), (128, 7168))   # [M, N] bf16 inputs, per token
BLOCK_QUANT_SHAPES = ((7168, 16384), (24576, 1536), (4096, 7168))          # [N, K] bf16 weights, per block
TRANSPOSED_QUANT_SHAPES = ((7168, 4096), (7168, 16384), (2048, 8192))      # [C, T]: activations y [T, C] as yᵀ


def _dequant(cp, q, s, cols):
    lut = cp.asarray(np.arange(256, dtype=np.uint8).view(_e4m3()).astype(np.float64))
    return lut[q] * cp.repeat(s.astype(cp.float64), 128, axis=-1)[..., :cols]


def _e4m3():
    import ml_dtypes

    return ml_dtypes.float8_e4m3fn


def _rel_error(cp, pairs) -> float:
    num = sum(float(cp.sum((y - r) ** 2)) for y, r in pairs)
    den = sum(float(cp.sum(r * r)) for _, r in pairs)
    return (num / den) ** 0.5 if den else 0.0


def _problem(env: Env, shape: Shape):
    """(call(**kw), exact rows as [(row selector, float64 product)], output shape, label extras)."""
    cp, cg = env.cp, env.cg
    g, n, k = shape.groups, shape.n, shape.k
    if shape.kind == "normal":
        x, w = env.randn((shape.m, k)), env.randn((n, k))
        a, _, sa, _ = quantize_a(cg, x)
        b, sb = quantize_b(cg, w)
        call = lambda **kw: cg.matmul(a, sa, b, sb, **kw)  # noqa: E731
        rows, out_shape, extra = [slice(None)], (shape.m, n), {}
        exact = [_dequant(cp, a, sa, k) @ _dequant_b(cp, b, sb, n, k).T]
    elif shape.kind == "contiguous":
        idx, seg = contiguous_m_indices(g, shape.m, cg.get_m_alignment_for_contiguous_layout())
        x, w = env.randn((g * seg, k)), env.randn((g, n, k))
        a, _, sa, _ = quantize_a(cg, x)
        b, sb = quantize_b(cg, w)
        m_indices = cp.asarray(idx)
        call = lambda **kw: cg.m_grouped_matmul_contiguous(a, sa, b, sb, m_indices, **kw)  # noqa: E731
        rows = [slice(i * seg, i * seg + shape.m) for i in range(g)]
        da = _dequant(cp, a, sa, k)
        exact = [da[r] @ _dequant_b(cp, b[i], sb[i], n, k).T for i, r in enumerate(rows)]
        out_shape, extra = (g * seg, n), {"segment_rows": seg}
    else:
        mm = draw_masked_m(g, shape.m)
        x, w = env.randn((g, MASKED_MAX_M, k)), env.randn((g, n, k))
        a, _, sa, _ = quantize_a(cg, x)
        b, sb = quantize_b(cg, w)
        masked_m = cp.asarray(mm)
        call = lambda **kw: cg.m_grouped_matmul_masked(a, sa, b, sb, masked_m, shape.m, **kw)  # noqa: E731
        rows = [(i, slice(0, int(mm[i]))) for i in range(g)]
        exact = [_dequant(cp, a[i, :mm[i]], sa[i, :mm[i]], k) @ _dequant_b(cp, b[i], sb[i], n, k).T for i in range(g)]
        out_shape, extra = (g, MASKED_MAX_M, n), {"masked_m": mm.tolist()}
    return call, list(zip(rows, exact)), out_shape, extra


def _dequant_b(cp, q, s, n, k):
    s = cp.repeat(cp.repeat(s.astype(cp.float64), 128, axis=-2), 128, axis=-1)[..., :n, :k]
    lut = cp.asarray(np.arange(256, dtype=np.uint8).view(_e4m3()).astype(np.float64))
    return lut[q] * s


def _fused_config(env: Env, shape: Shape) -> dict | None:
    import dataclasses

    rows = shape.m if shape.kind == "masked" else shape.m * shape.groups
    if shape.kind == "contiguous":
        rows = contiguous_m_indices(shape.groups, shape.m, env.cg.get_m_alignment_for_contiguous_layout())[0].size
    try:
        plan = env.cg.heuristics.choose(shape.kind, rows, shape.n, shape.k, shape.groups, env.num_sms, "float8_e4m3")
        return {"config": dataclasses.asdict(plan.config), "grid": plan.grid}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def bench_shape(env: Env, shape: Shape, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    call, exact, out_shape, extra = _problem(env, shape)
    n = shape.n
    bf16 = cp.empty(out_shape, dtype=cg.api.BF16)
    q = cp.empty(out_shape, dtype=cp.uint8)
    s = cg.empty_scale(out_shape[:-1] + (-(-n // 128),))
    row = {"layout": shape.kind, "groups": shape.groups, "m": shape.m, "n": n, "k": shape.k, **extra,
           "fused_config": _fused_config(env, shape)}

    def fused():
        call(out=q, out_scale=s, out_dtype="float8_e4m3")

    def plain():
        call(out=bf16)

    def unfused():
        call(out=bf16)
        return cg.per_token_cast_to_fp8(bf16)

    # Errors (valid rows only).
    fused()
    q_u, s_u = unfused()
    env.sync()
    deq_f = _dequant(cp, q, s, n)
    deq_u = _dequant(cp, q_u, s_u, n)
    row["fused_error"] = _rel_error(cp, [(deq_f[r], e) for r, e in exact])
    row["unfused_error"] = _rel_error(cp, [(deq_u[r], e) for r, e in exact])
    row["bf16_error"] = _rel_error(cp, [(bf16[r].astype(cp.float64), e) for r, e in exact])
    del deq_f, deq_u, q_u, s_u, exact
    env.free()
    times = env.timer.interleaved({"fused": fused, "unfused": unfused, "bf16": plain}, reps)
    for name, samples in times.items():
        row[f"{name}_s"] = statistics.median(samples)
    row["speedup_over_unfused"] = row["unfused_s"] / row["fused_s"]
    row["fused_over_bf16"] = row["fused_s"] / row["bf16_s"]
    return row


def bench_quantizer(env: Env, reps: int, copy_bytes_per_s: float | None) -> list[dict]:
    """Each standalone quantizer on bf16 input: bytes read + written per second, against the 1 GiB copy's rate and
    against a device-to-device copy moving as many bytes, timed interleaved with it (the same launch and the same
    dirty L2 after the protocol's flush: a copy of 88 MB moves ~0.8 of the 1 GiB copy's rate, NOTES.md v29).
    `per_token_transposed` quantizes yᵀ for row-major activations y [T, C] (the weight gradient's operands) in
    one pass, timed also against the copy of yᵀ followed by the quantizer (`copy_then_quantize_s`)."""
    cg, cp = env.cg, env.cp
    rows = []
    kinds = (("per_token", QUANT_SHAPES, cg.per_token_cast_to_fp8, 1, False),
             ("per_block", BLOCK_QUANT_SHAPES, cg.per_block_cast_to_fp8, 128, False),
             ("per_token_transposed", TRANSPOSED_QUANT_SHAPES, cg.per_token_cast_to_fp8, 1, True))
    for kind, shapes, fn, scale_rows, transposed in kinds:
        for m, n in shapes:   # the quantized matrix's [M, N]; transposed: y is [N, M]
            y = env.randn((n, m) if transposed else (m, n)).astype(cg.api.BF16)
            x = y.T if transposed else y
            nbytes = m * n * 2 + m * n + -(-m // scale_rows) * (-(-n // 128)) * 4
            fns = {"quantizer": lambda: fn(x), "copy": same_size_copy(env, nbytes)}
            if transposed:
                fns["copy_then_quantize"] = lambda: fn(cp.ascontiguousarray(x))
            samples = env.timer.interleaved(fns, reps)
            t, t_copy = statistics.median(samples["quantizer"]), statistics.median(samples["copy"])
            row = {"quantizer": kind, "m": m, "n": n, "dtype": "bfloat16", "median_s": t, "bytes": nbytes,
                   "bytes_per_s": nbytes / t,
                   "fraction_of_copy": nbytes / t / copy_bytes_per_s if copy_bytes_per_s else None,
                   "same_size_copy_s": t_copy, "fraction_of_same_size_copy": t_copy / t}
            if transposed:
                row["copy_then_quantize_s"] = statistics.median(samples["copy_then_quantize"])
            rows.append(row)
            del x, y, fns
            env.free()
    return rows


def run_fp8_out(env: Env, args) -> dict:
    floor = calibrate(env, args.reps)
    copy_bw = floor.get("copy_bytes_per_s")
    print("\n== fp8out (fused e4m3 output vs bf16 GEMM + per_token_cast_to_fp8; vs bf16 GEMM) ==")
    quant = bench_quantizer(env, args.reps, copy_bw)
    print(f"copy {copy_bw / 1e12:.2f} TB/s (read + written)" if copy_bw else "copy: not measured")
    for r in quant:
        frac = f"{r['fraction_of_copy']:.2f}" if r["fraction_of_copy"] else "-"
        print(f"  {r['quantizer']}_cast_to_fp8 bf16 [{r['m']}, {r['n']}]: {r['median_s'] * 1e6:8.1f} us "
              f"{r['bytes_per_s'] / 1e12:.2f} TB/s  fraction of the 1 GiB copy {frac}; same-size copy "
              f"{r['same_size_copy_s'] * 1e6:.1f} us, fraction {r['fraction_of_same_size_copy']:.2f}"
              + (f"; copy, then quantize {r['copy_then_quantize_s'] * 1e6:.1f} us" if "copy_then_quantize_s" in r else ""))
    shapes = [s for s in shapes_for("dense", args.quick) if s.m in (64, 128, 4096)]
    shapes += list(shapes_for("contiguous", args.quick)) + list(shapes_for("masked", args.quick))
    rows = []
    print(f"{'shape':>34} | {'fused us':>9} {'unfused':>9} {'bf16':>9} | {'unf/fused':>9} {'fused/bf16':>10} |"
          f" {'err fused':>9} {'err unf':>9}")
    for shape in shapes:
        try:
            r = bench_shape(env, shape, args.reps)
            print(f"{shape.label:>34} | {r['fused_s'] * 1e6:9.1f} {r['unfused_s'] * 1e6:9.1f} "
                  f"{r['bf16_s'] * 1e6:9.1f} | {r['speedup_over_unfused']:9.3f} {r['fused_over_bf16']:10.3f} | "
                  f"{r['fused_error']:9.2e} {r['unfused_error']:9.2e}", flush=True)
        except Exception as exc:
            r = {"shape": shape.label, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(f"{shape.label:>34} | error: {r['error']}", flush=True)
        rows.append(r)
        env.free()
    ok = [r for r in rows if "error" not in r]
    summary = {"speedup_over_unfused_geomean": geomean([r["speedup_over_unfused"] for r in ok]),
               "fused_over_bf16_geomean": geomean([r["fused_over_bf16"] for r in ok]),
               "fused_error_not_above_unfused": all(r["fused_error"] <= r["unfused_error"] for r in ok),
               "per_token_fraction_of_copy_over_64MiB": min(
                   ((r["fraction_of_copy"] or 0) for r in quant if r["quantizer"] == "per_token" and r["bytes"] >= 64 << 20),
                   default=None),
               "quantizers_fraction_of_same_size_copy_over_64MiB": min(
                   (r["fraction_of_same_size_copy"] for r in quant if r["bytes"] >= 64 << 20), default=None)}
    print("summary: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
    return {"floor": floor, "quantizer": quant, "rows": rows, "summary": summary}

"""The training section: the weight gradient (wgrad_matmul) on DeepGEMM's shapes, its k-grouped MoE form
(k_grouped_wgrad_matmul), DeepGEMM (8dfa329) side by side, and a sweep of explicit tiles on three shapes.

Inputs are random normal, quantized 1x128 along K by cugemm8's quantizer; every answer is checked (calc_diff
against the float64 product of the unquantized inputs, over every group) before it is timed by the protocol
(L2 flush, CUDA events, median, implementations interleaved). Each call adds into its own out. TFLOPS = 2MNK/t
(k-grouped: K summed over the groups); GB/s counts A, B and out read and written in FP32."""
from __future__ import annotations

import random
import statistics

from .env import Env, calc_diff_gpu
from .report import fmt
from .shapes import ratio
from .tables import Candidate, measure

WGRAD_SHAPES = [(m, n, k) for k in (4096, 8192)
                for m, n in ((7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168))]
K_GROUPED_SHAPES = [(g, base, m, n) for g in (4, 8) for base in (4096, 8192) for m, n in ((7168, 4096), (2048, 7168))]
SWEEP_SHAPES = [(7168, 2112, 4096), (2048, 7168, 4096), (512, 32768, 4096)]
# (BLOCK_M, BLOCK_N[, stages[, FP32 output atoms held]]): heuristics_wgrad.make_config's arguments (0: its choice).
SWEEP_TILES = [(128, 96), (128, 112), (128, 128), (128, 144), (128, 160), (128, 160, 5, 2), (128, 160, 3, 5), (64, 160)]


def k_sizes_for(groups: int, base: int, seed: int) -> list[int]:
    """DeepGEMM's test draw: each group base ± 128 (or base), the last one taking what keeps the mean at base."""
    rng = random.Random(seed)
    sizes = [base + rng.randint(-1, 1) * 128 for _ in range(groups - 1)]
    return sizes + [base * groups - sum(sizes)]


def _operands(env: Env, m: int, n: int, k: int):
    x, w = env.randn((m, k)), env.randn((n, k))
    a, sa = env.cg.per_token_cast_to_fp8(x)
    b, sb = env.cg.per_token_cast_to_fp8(w)
    return x, w, a, env.cg.get_col_major_tma_aligned_tensor(sa), b, env.cg.get_col_major_tma_aligned_tensor(sb)


def _candidate(env: Env, name: str, make_run, diff_of, shape: tuple, timed_if_wrong: bool = False) -> Candidate:
    """A call that adds into its own out: checked on a zeroed out, then timed adding into it."""
    state = {}

    def check():
        out = env.cp.zeros(shape, env.cp.float32)
        state["run"] = make_run(out)
        state["run"]()
        env.sync()
        return diff_of(out)

    return Candidate(name, lambda: state["run"](), check, timed_if_wrong=timed_if_wrong)


def _row(entries: dict, row: dict) -> dict:
    row["results"] = entries
    t = entries.get("cugemm8", {}).get("median_s")
    row["ratio_deepgemm"] = ratio(entries.get("deepgemm", {}).get("median_s"), t)
    return row


def bench_wgrad(env: Env, m: int, n: int, k: int, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    plan = env.lib.wgrad_heuristics.choose("normal", m, n, 1, env.num_sms)
    row = {"label": f"{m}x{n}x{k}", "m": m, "n": n, "k": k, "config": str(plan.config), "grid": plan.grid}
    x, w, a, sa, b, sb = _operands(env, m, n, k)
    ref = x.astype(cp.float64) @ w.astype(cp.float64).T
    del x, w

    def diff_of(out):
        return calc_diff_gpu(cp, [(out, ref)])

    cands = [_candidate(env, "cugemm8", lambda out: lambda: cg.wgrad_matmul(a, sa, b, sb, out), diff_of, (m, n),
                        timed_if_wrong=True)]
    if env.deepgemm is not None and hasattr(env.deepgemm.dg, "wgrad_gemm_fp8_fp8_fp32_nt"):
        cands.append(_candidate(env, "deepgemm", lambda out: env.deepgemm.wgrad(a, sa, b, sb, out)[0], diff_of, (m, n)))
    flops, nbytes = 2 * m * n * k, m * k + n * k + 8 * m * n
    return _row(measure(env, cands, reps, flops, nbytes), row)


def bench_k_grouped(env: Env, groups: int, base: int, m: int, n: int, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    sizes = k_sizes_for(groups, base, seed=groups * base + m)
    k = sum(sizes)
    plan = env.lib.wgrad_heuristics.choose("k_grouped", m, n, groups, env.num_sms)
    row = {"label": f"G{groups} K~{base} {m}x{n}", "groups": groups, "base_k": base, "k_sizes": sizes, "m": m, "n": n,
           "config": str(plan.config), "grid": plan.grid}
    x, w, a, sa, b, sb = _operands(env, m, n, k)
    offsets = [sum(sizes[:g]) for g in range(groups)]
    refs = [x[:, o:o + s].astype(cp.float64) @ w[:, o:o + s].astype(cp.float64).T for o, s in zip(offsets, sizes)]
    del x, w
    k_sizes = cp.asarray(sizes, dtype=cp.int32)

    def diff_of(out):
        return calc_diff_gpu(cp, [(out[g], refs[g]) for g in range(groups)])

    shape = (groups, m, n)
    cands = [_candidate(env, "cugemm8", lambda out: lambda: cg.k_grouped_wgrad_matmul(a, sa, b, sb, k_sizes, out),
                        diff_of, shape, timed_if_wrong=True)]
    if env.deepgemm is not None and hasattr(env.deepgemm.dg, "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt"):
        cands.append(_candidate(env, "deepgemm", lambda out: env.deepgemm.k_grouped_wgrad(a, sa, b, sb, sizes, out)[0],
                                diff_of, shape))
    flops, nbytes = 2 * m * n * k, m * k + n * k + 8 * groups * m * n
    return _row(measure(env, cands, reps, flops, nbytes), row)


def bench_sweep(env: Env, m: int, n: int, k: int, reps: int) -> dict:
    """Explicit tiles of the weight gradient on one shape (the heuristic's data), interleaved."""
    cp, fp8_gemm, h = env.cp, env.lib._mod("fp8_gemm"), env.lib.wgrad_heuristics
    _, _, a, sa, b, sb = _operands(env, m, n, k)
    timed = {}
    for tile in SWEEP_TILES:
        cfg = h.make_config("normal", n, 1, *tile)
        out = cp.zeros((m, n), cp.float32)
        name = f"{cfg.block_m}x{cfg.block_n}s{cfg.stages}" + (f"d{cfg.d_atoms}" if cfg.d_atoms else "")
        timed[name] = fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out)
    row = {"m": m, "n": n, "k": k, "tiles": {}}
    for name, samples in env.timer.interleaved(timed, reps).items():
        t = statistics.median(samples)
        row["tiles"][name] = {"median_s": t, "tflops": 2 * m * n * k / t * 1e-12}
    return row


def _print_rows(title: str, rows: list, label) -> None:
    print(f"\n== {title} ==")
    print(f"{'shape':>28} {'cugemm8 us':>11} {'TFLOPS':>7} {'DeepGEMM us':>12} {'TFLOPS':>7} {'DG/ours':>8}  config")
    for r in rows:
        if "error" in r:
            print(f"{label(r):>28} error: {r['error']}")
            continue
        cg_e, dg_e = r["results"].get("cugemm8", {}), r["results"].get("deepgemm", {})
        t_cg, t_dg = cg_e.get("median_s"), dg_e.get("median_s")
        print(f"{label(r):>28} {fmt(t_cg and t_cg * 1e6, '.1f', 11)} {fmt(cg_e.get('tflops'), '.0f')} "
              f"{fmt(t_dg and t_dg * 1e6, '.1f', 12)} {fmt(dg_e.get('tflops'), '.0f')} "
              f"{fmt(r.get('ratio_deepgemm'), '.3f', 8)}  {cg_e.get('status', '')}/{dg_e.get('status', '-')} "
              f"{r['config'].split('block_m=')[-1][:60] if 'config' in r else ''}")


def _summary(rows: list) -> dict:
    ratios = [r["ratio_deepgemm"] for r in rows if r.get("ratio_deepgemm")]
    ok = all(r.get("results", {}).get("cugemm8", {}).get("status") == "ok" for r in rows)
    geo = statistics.geometric_mean(ratios) if ratios else None
    return {"geomean_deepgemm_over_cugemm8": geo, "min_deepgemm_over_cugemm8": min(ratios, default=None),
            "shapes": len(rows), "with_deepgemm": len(ratios), "all_cugemm8_ok": ok}


def run_wgrad(env: Env, args) -> dict:
    if not hasattr(env.cg, "wgrad_matmul"):
        return {"skipped": "cugemm8.wgrad_matmul does not exist"}
    out = {}
    label = lambda r: r.get("label", str(r.get("shape")))  # noqa: E731
    for name, shapes, bench in (("wgrad", WGRAD_SHAPES, lambda s: bench_wgrad(env, *s, args.reps)),
                                ("k_grouped", K_GROUPED_SHAPES, lambda s: bench_k_grouped(env, *s, args.reps))):
        rows = []
        for shape in (shapes[:2] if args.quick else shapes):
            try:
                rows.append(bench(shape))
            except Exception as exc:
                rows.append({"shape": list(shape), "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            finally:
                env.free()
        _print_rows(f"{name} weight gradient (out += A·Bᵀ, FP32)", rows, label)
        out[name] = {"rows": rows, "summary": _summary(rows)}
        s = out[name]["summary"]
        print(f"  {name}: DeepGEMM time / cugemm8 geomean {fmt(s['geomean_deepgemm_over_cugemm8'], '.3f')}, "
              f"min {fmt(s['min_deepgemm_over_cugemm8'], '.3f')}")
        if hasattr(args, "checkpoint"):
            args.checkpoint(out)
    if not args.quick and not getattr(args, "no_sweep", False):
        sweep = []
        for shape in SWEEP_SHAPES:
            try:
                sweep.append(bench_sweep(env, *shape, args.reps))
            except Exception as exc:
                sweep.append({"shape": list(shape), "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            finally:
                env.free()
        print("\n== wgrad tiles (explicit, interleaved; TFLOPS) ==")
        for r in sweep:
            tiles = ", ".join(f"{k} {v['tflops']:.0f}" for k, v in r.get("tiles", {}).items())
            print(f"  {r.get('m')}x{r.get('n')}x{r.get('k')}: {tiles or r.get('error')}")
        out["tile_sweep"] = sweep
    return out

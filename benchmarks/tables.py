"""The benchmark's tables: dense, contiguous and masked. Per shape, every implementation's answer is
checked before it is timed; the timing is the protocol's (protocol.py), interleaved, and for the grouped
anchors also alone."""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .env import DIFF_LIMIT, Env, bf16_to_f32, calc_diff_gpu, poison_bf16, quantize_a, quantize_b
from .report import print_table, table_summary
from .shapes import (DEEPGEMM_H200_MASKED_ROWS, DEEPGEMM_H200_TFLOPS, MASKED_MAX_M, Shape, contiguous_m_indices,
                     draw_masked_m, gemm_bytes, gemm_flops, ratio, rescale_rows, shapes_for)


# ----------------------------------------------------------------------------- candidates
@dataclass
class Candidate:
    name: str
    run: Callable[[], object]                   # one call exactly as timed
    check: Callable[[], float | None]           # calc_diff of its answer (None: not checked)
    timed_if_wrong: bool = False                 # cugemm8 is timed even when wrong (flagged); peers are not


def cugemm8_candidate(env: Env, call, diff_of) -> Candidate:
    """cugemm8 timed with a preallocated `out=`; the check runs that very path on a NaN-poisoned out."""
    state = {}

    def check():
        state["out"] = env.cp.empty_like(call())
        poison_bf16(env.cp, state["out"])
        call(out=state["out"])
        return diff_of(bf16_to_f32(env.cp, state["out"]))

    return Candidate("cugemm8", lambda: call(out=state["out"]), check, timed_if_wrong=True)


def peer_candidates(env: Env, a, a_scale, b, b_scale, diff_of) -> list[Candidate]:
    peers, cp = env.peers, env.cp
    if peers is None:
        return []

    def lazy(make):  # building the torch views may raise too: report it as the peer's error
        state = {}

        def run():
            if "fn" not in state:
                state["fn"] = make()
            return state["fn"]()
        return run

    bw = lazy(lambda: peers.blockwise(a, a_scale, b, b_scale))
    pt = lazy(lambda: peers.per_tensor(a, b))
    return [Candidate("cublaslt_blockwise", bw, lambda: diff_of(peers.to_cupy_f32(cp, bw()))),
            Candidate("cublaslt_per_tensor", pt, lambda: run_unchecked(pt))]


def run_unchecked(fn) -> None:
    """Per-tensor FP8 runs on the unscaled bytes: its answer is not comparable, only that it runs."""
    fn()


def check_candidates(env: Env, cands: list[Candidate]) -> tuple[dict, dict]:
    """Per candidate {status, diff}; and the callables that go on to be timed."""
    entries, timed = {}, {}
    for c in cands:
        try:
            diff = c.check()
            env.sync()
        except Exception as exc:
            entries[c.name] = {"status": f"error: {type(exc).__name__}: {str(exc)[:300]}"}
            continue
        ok = diff is None or diff < DIFF_LIMIT
        entries[c.name] = {"status": "ok" if ok else "wrong", "diff": diff}
        if ok or c.timed_if_wrong:
            timed[c.name] = c.run
    return entries, timed


def deepgemm_candidate(env: Env, name: str, make, diff_of) -> list[Candidate]:
    """DeepGEMM in the same timing loop (none without it); its call and output are built lazily, inside
    the check, so that a failure is reported as the peer's."""
    if env.deepgemm is None:
        return []
    state = {}

    def check():
        state["run"], out = make(env.deepgemm)
        state["run"]()
        return diff_of(env.peers.to_cupy_f32(env.cp, out)) if diff_of else None

    return [Candidate(name, lambda: state["run"](), check)]


def measure(env: Env, cands: list[Candidate], reps: int, flops: int, nbytes: int, alone=()) -> dict:
    """Times the candidates that pass their check, alternating call by call; then the ones named in `alone`
    once more, each by itself (Timer.alone): `alone_median_s` and `alone_samples_s`."""
    entries, timed = check_candidates(env, cands)
    for name, samples in env.timer.interleaved(timed, reps).items():
        t = statistics.median(samples)
        entries[name].update(median_s=t, min_s=min(samples), max_s=max(samples), tflops=flops / t * 1e-12,
                             gbps=nbytes / t * 1e-9, samples_s=samples)
    solo = {name: timed[name] for name in alone if name in timed}
    for name, samples in env.timer.alone(solo, reps).items():
        entries[name].update(alone_median_s=statistics.median(samples), alone_samples_s=samples)
    return entries


def alone_row(row: dict, entries: dict, cg_name: str, dg_name: str, flops: int) -> None:
    """row["alone"]: cugemm8 and DeepGEMM timed alone, the way the H200 anchors were (Timer.alone)."""
    t_cg = entries.get(cg_name, {}).get("alone_median_s")
    t_dg = entries.get(dg_name, {}).get("alone_median_s")
    if t_cg is None:
        return
    anchor = row.get("deepgemm_h200_tflops")
    tf_cg, tf_dg = flops / t_cg * 1e-12, t_dg and flops / t_dg * 1e-12
    row["alone"] = {"cugemm8_tflops": tf_cg, "deepgemm_tflops": tf_dg,
                    "cugemm8_over_anchor": ratio(tf_cg, anchor), "deepgemm_over_anchor": ratio(tf_dg, anchor),
                    "deepgemm_over_cugemm8_time": ratio(t_dg, t_cg)}


# ----------------------------------------------------------------------------- sections
def base_row(shape: Shape) -> dict:
    return {**dataclasses.asdict(shape), "deepgemm_h200_tflops": DEEPGEMM_H200_TFLOPS.get(shape)}


def finish_row(row: dict, entries: dict) -> dict:
    row["results"] = entries
    cg = entries.get("cugemm8", {})
    t = cg.get("median_s") if cg.get("status") == "ok" else None
    row["ratio_blockwise"] = ratio(entries.get("cublaslt_blockwise", {}).get("median_s"), t)
    row["ratio_per_tensor"] = ratio(entries.get("cublaslt_per_tensor", {}).get("median_s"), t)
    row["vs_deepgemm_h200"] = ratio(cg.get("tflops") if t else None, row["deepgemm_h200_tflops"])
    row["ratio_deepgemm"] = ratio(entries.get("deepgemm", {}).get("median_s"), t)  # same run, same rows
    return row


def bench_dense_shape(env: Env, shape: Shape, reps: int, extra: list[Candidate] = ()) -> dict:
    """cugemm8 and the peers on one dense shape, interleaved; `extra`: more candidates timed with them."""
    cp, cg = env.cp, env.cg
    m, n, k = shape.m, shape.n, shape.k
    row = {**base_row(shape), **env.plan("normal", m, n, k, 1)}
    x, w = env.randn((m, k)), env.randn((n, k))
    a, sa, sa_tma, row["a_scale_layout"] = quantize_a(env.cg, x)
    b, sb = quantize_b(env.cg, w)
    ref = x @ w.T
    del x, w

    def diff_of(y):
        return calc_diff_gpu(cp, [(y, ref)])

    cands = [cugemm8_candidate(env, lambda **kw: cg.matmul(a, sa_tma, b, sb, **kw), diff_of)]
    cands += peer_candidates(env, a, sa, b, sb, diff_of)
    cands += deepgemm_candidate(env, "deepgemm", lambda dg: dg.dense(a, sa, b, sb), diff_of)
    entries = measure(env, cands + list(extra), reps, gemm_flops(m, n, k), gemm_bytes(m, n, k))
    return finish_row(row, entries)


def bench_contiguous_shape(env: Env, shape: Shape, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    g, m, n, k = shape.groups, shape.m, shape.n, shape.k
    align = cg.get_m_alignment_for_contiguous_layout()
    idx, seg = contiguous_m_indices(g, m, align)
    row = {**base_row(shape), **env.plan("contiguous", g * seg, n, k, g), "segment_rows": seg, "valid_rows": g * m}
    x, w = env.randn((g * seg, k)), env.randn((g, n, k))
    a, sa, sa_tma, row["a_scale_layout"] = quantize_a(env.cg, x)
    b, sb = quantize_b(env.cg, w)
    refs = [x[i * seg:i * seg + m] @ w[i].T for i in range(g)]
    del x, w
    m_indices = cp.asarray(idx)

    def diff_of(y):
        return calc_diff_gpu(cp, [(y[i * seg:i * seg + m], refs[i]) for i in range(g)])

    flops = gemm_flops(g * m, n, k)
    entries = measure(env, contiguous_candidates(env, a, sa, sa_tma, b, sb, m_indices, diff_of), reps,
                      flops, gemm_bytes(g * m, n, k, g), alone=("cugemm8", "deepgemm"))
    row = finish_row(row, entries)
    alone_row(row, entries, "cugemm8", "deepgemm", flops)
    row["dense_time_over_contiguous"] = ratio(entries.get("dense_same_mnk", {}).get("median_s"),
                                              entries.get("cugemm8", {}).get("median_s"))
    return row


def contiguous_candidates(env: Env, a, sa, sa_tma, b, sb, m_indices, diff_of) -> list[Candidate]:
    """cugemm8's contiguous GEMM, the dense kernel on the same rows (padding included, all against expert 0's
    weights; timed alongside, unchecked) and DeepGEMM's contiguous GEMM, on the same operands."""
    cp, cg = env.cp, env.cg
    call = lambda **kw: cg.m_grouped_matmul_contiguous(a, sa_tma, b, sb, m_indices, **kw)  # noqa: E731
    dense_out = cp.empty((a.shape[0], b.shape[1]), dtype=cg.api.BF16)
    dense = Candidate("dense_same_mnk", lambda: cg.matmul(a, sa_tma, b[0], sb[0], out=dense_out), lambda: None)
    dg = deepgemm_candidate(env, "deepgemm", lambda dg: dg.contiguous(a, sa, b, sb, m_indices), diff_of)
    return [cugemm8_candidate(env, call, diff_of), dense] + dg


def bench_masked_shape(env: Env, shape: Shape, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    g, n, k = shape.groups, shape.n, shape.k
    mm = draw_masked_m(g, shape.m)
    valid = int(mm.sum())
    row = {**base_row(shape), **env.plan("masked", shape.m, n, k, g), "max_m": MASKED_MAX_M,
           "masked_m": mm.tolist(), "valid_rows": valid}
    x, w = env.randn((g, MASKED_MAX_M, k)), env.randn((g, n, k))
    a, sa, sa_tma, row["a_scale_layout"] = quantize_a(env.cg, x)
    b, sb = quantize_b(env.cg, w)
    refs = [x[i, :mm[i]] @ w[i].T for i in range(g)]
    del x, w
    masked_m = cp.asarray(mm)

    def diff_of(y):
        return calc_diff_gpu(cp, [(y[i, :mm[i]], refs[i]) for i in range(g)])

    call = lambda **kw: cg.m_grouped_matmul_masked(a, sa_tma, b, sb, masked_m, shape.m, **kw)  # noqa: E731
    # All groups but the first empty, against the dense kernel on that one group's rows.
    rows0 = int(mm[0])
    one_m = cp.asarray(np.array([rows0] + [0] * (g - 1), dtype=np.int32))
    out_masked = cp.empty((g, MASKED_MAX_M, n), dtype=cg.api.BF16)
    a0, sa0 = a[0, :rows0], cg.get_col_major_tma_aligned_tensor(cp.ascontiguousarray(sa[0, :rows0]))
    out_dense = cp.empty((rows0, n), dtype=cg.api.BF16)
    one = Candidate("masked_one_group", lambda: cg.m_grouped_matmul_masked(a, sa_tma, b, sb, one_m, shape.m,
                                                                            out=out_masked), lambda: None)
    dense = Candidate("dense_one_group", lambda: cg.matmul(a0, sa0, b[0], sb[0], out=out_dense), lambda: None)
    cands = [cugemm8_candidate(env, call, diff_of), one, dense]
    cands += deepgemm_candidate(env, "deepgemm", lambda dg: dg.masked(a, sa, b, sb, masked_m, shape.m), diff_of)
    anchor_rows = DEEPGEMM_H200_MASKED_ROWS.get(shape)
    if anchor_rows:
        at_anchor = rescale_rows(mm, anchor_rows)
        anchor_m = cp.asarray(np.array(at_anchor, dtype=np.int32))
        cands.append(Candidate("masked_at_anchor_rows", lambda: cg.m_grouped_matmul_masked(
            a, sa_tma, b, sb, anchor_m, shape.m, out=out_masked), lambda: None))
        cands += deepgemm_candidate(env, "deepgemm_at_anchor_rows",
                                    lambda dg: dg.masked(a, sa, b, sb, anchor_m, shape.m), None)
    # The anchor is DeepGEMM alone at its own rows: that pair is also timed alone.
    alone = ("masked_at_anchor_rows", "deepgemm_at_anchor_rows") if anchor_rows else ()
    entries = measure(env, cands, reps, gemm_flops(valid, n, k), gemm_bytes(valid, n, k, g), alone=alone)
    row = finish_row(row, entries)
    if anchor_rows:
        alone_row(row, entries, *alone, gemm_flops(anchor_rows, n, k))
    at = entries.get("masked_at_anchor_rows", {}).get("median_s")
    if anchor_rows and at:
        row["anchor_masked_m"] = at_anchor
        row["tflops_at_anchor_rows"] = gemm_flops(anchor_rows, n, k) / at / 1e12
        if row.get("deepgemm_h200_tflops"):
            row["vs_deepgemm_h200_at_anchor_rows"] = row["tflops_at_anchor_rows"] / row["deepgemm_h200_tflops"]
        row["ratio_deepgemm_at_anchor_rows"] = ratio(entries.get("deepgemm_at_anchor_rows", {}).get("median_s"), at)
    row["one_group_rows"] = rows0
    row["masked_one_group_over_dense"] = ratio(entries.get("masked_one_group", {}).get("median_s"),
                                               entries.get("dense_one_group", {}).get("median_s"))
    return row


def run_table(env: Env, args, section: str, api_name: str | None, bench_shape) -> dict:
    if api_name and not hasattr(env.cg, api_name):
        reason = f"cugemm8.{api_name} does not exist yet"
        print(f"\n== {section} ==\nskipped: {reason}")
        return {"skipped": reason}
    rows = []
    for shape in shapes_for(section, args.quick):
        try:
            rows.append(bench_shape(env, shape, args.reps))
        except Exception as exc:
            rows.append({**base_row(shape), "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        finally:
            env.free()
    print_table(section, rows, env)
    return {"rows": rows, "summary": table_summary(rows)}


def run_dense(env, args):
    return run_table(env, args, "dense", None, bench_dense_shape)


def run_contiguous(env, args):
    return run_table(env, args, "contiguous", "m_grouped_matmul_contiguous", bench_contiguous_shape)


def run_masked(env, args):
    return run_table(env, args, "masked", "m_grouped_matmul_masked", bench_masked_shape)


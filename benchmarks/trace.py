"""Where the time goes inside one GEMM call: per-CTA timelines from a traced build of the kernel.

    python -m benchmarks.trace [--case NAME ...] [--calls 3] [--out DIR]

Builds each case's kernel with CG8_TRACE defined (cuda_src/gemm/trace.cuh: math thread 0 and the producer
thread of every CTA log tile starts, main-loop ends, stores and loads with %globaltimer and clock64),
runs it after an L2 flush, reads the log back (cuModuleGetGlobal) and prints, per case: the call's span,
the CTAs' start spread, time per tile (normal and split halves), the gap between a tile's store and
the next tile's start, the kernel's tail (last store to last exit), and the SM clock (clock64 cycles
over %globaltimer). Raw events go to DIR/<case>.npz; a summary to DIR/trace-summary.json.

With --kblocks the kernel also logs every k-block: when the producer issued its loads and when math thread 0
began to wait for its stage and found it full (clock64, into a slot per k-block; CG8_TRACE_KBLOCKS). The
summary adds each k-block's stall, busy time, issue-to-ready latency and the producer's issue interval.
The regular events cost a global read-modify-write each (~0.2 us on the thread that records them).

A diagnosis tool, not a benchmark: the traced kernel does a few more global stores per tile. Each
case is also timed untraced (the protocol: median of --reps flushed calls) to show how close they are.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics

import numpy as np

from . import library
from .shapes import MASKED_MAX_M

# Event tags: keep in step with cuda_src/gemm/trace.cuh.
START, SET_UP, TILE, MAIN_DONE, EXCHANGED, STORED, LOOP, STAGED, LOADS, LOADS_DONE, END = 1, 2, 10, 11, 12, 13, 14, 15, 20, 21, 30
TRACE_CTAS, TRACE_SLOTS = 264, 512   # kTraceCtas, kTraceSlots (cuda_src/gemm/trace.cuh)
TRACE_KBLOCKS = 256                  # kTraceKBlocks: --kblocks slots per CTA
KB_ISSUED, KB_WAIT, KB_READY = 0, 0, 1   # --kblocks events: the producer's [0]; math thread 0's [0], [1]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    layout: str          # normal | contiguous | masked
    rows: tuple          # normal: (M,); contiguous: rows per expert; masked: masked_m per group
    n: int
    k: int
    tile: tuple | None = None   # (BLOCK_M, BLOCK_N); None: the heuristic's pick
    split: bool | None = None   # masked: force the tail split on/off; None: as the configuration has it
    expected_m: int | None = None


CASES = [
    # The split tail, with and without, at three K (NOTES.md v9, v10).
    Case("masked-276-7168x2048-split", "masked", (276,), 7168, 2048, (128, 128), True),
    Case("masked-276-7168x2048-nosplit", "masked", (276,), 7168, 2048, (128, 128), False),
    Case("masked-642-4096x7168-split", "masked", (642,), 4096, 7168, (128, 128), True),
    Case("masked-642-4096x7168-nosplit", "masked", (642,), 4096, 7168, (128, 128), False),
    Case("masked-276-7168x1024-split", "masked", (276,), 7168, 1024, (128, 128), True),
    Case("masked-276-7168x1024-nosplit", "masked", (276,), 7168, 1024, (128, 128), False),
    # One wave of 256x128 against two of 128x128 at DeepGEMM's 1006 rows.
    Case("masked-1006-4096x7168-128", "masked", (1006,), 4096, 7168, (128, 128)),
    Case("masked-1006-4096x7168-256", "masked", (1006,), 4096, 7168, (256, 128)),
    # The contiguous layout against the dense kernel at the same M, N, K (NOTES.md v10-v13).
    Case("contiguous-4x8192-7168x2048", "contiguous", (8192,) * 4, 7168, 2048),
    Case("dense-32768-7168x2048", "normal", (32768,), 7168, 2048),
    Case("contiguous-4x8192-4096x7168", "contiguous", (8192,) * 4, 4096, 7168),
    Case("dense-32768-4096x7168", "normal", (32768,), 4096, 7168),
    # Large M at the heuristic's pick: does the next tile find its first stages full (issue 22's "no bubbles
    # between tiles")? With --kblocks, the last tile's first k-block stall against the others' (NOTES.md v41).
    Case("dense-4096-7168x2048", "normal", (4096,), 7168, 2048),
    Case("dense-8192-32768x512", "normal", (8192,), 32768, 512),
    Case("dense-4096-7168x16384", "normal", (4096,), 7168, 16384),
    # Decode-sized M at the heuristic's split K: where a call's fixed cost goes (NOTES.md v17).
    Case("decode-1x2112x7168", "normal", (1,), 2112, 7168),
    Case("decode-64x2112x7168", "normal", (64,), 2112, 7168),
    Case("decode-1x256x4096", "normal", (1,), 256, 4096),
    Case("decode-1x256x7168", "normal", (1,), 256, 7168),
    Case("decode-16x7168x16384", "normal", (16,), 7168, 16384),
]

_trace_on = False
_kblocks = False


def _traced(render):
    def render_traced(cfg):
        head = "#define CG8_TRACE 1\n" if _trace_on else ""
        if _trace_on and _kblocks:
            head += "#define CG8_TRACE_KBLOCKS 1\n"
        return head + render(cfg)
    return render_traced


def set_trace(on: bool) -> None:
    """Traced and untraced builds share the loaded-kernel cache keys: drop the loaded kernels between them."""
    global _trace_on
    _trace_on = on
    library.current().forget_loaded()


def config_for(case: Case, sms: int):
    lib = library.current()
    groups = len(case.rows) if case.layout != "normal" else 1
    if case.tile is None:
        m = sum(case.rows) if case.layout != "masked" else (case.expected_m or max(case.rows))
        cfg = lib.choose(case.layout, m, case.n, case.k, groups, sms).config
    else:
        cfg = lib.make_config(case.layout, case.n, case.k, groups, *case.tile)
    if case.split is not None:
        cfg = lib.make_config(cfg.layout, cfg.n, cfg.k, cfg.num_groups, cfg.block_m, cfg.block_n,
                                     cluster=cfg.cluster, tail_split=case.split)
    return cfg


def make_inputs(case: Case):
    import cupy

    import cugemm8

    rng = cupy.random.default_rng(0)
    g = len(case.rows)
    if case.layout == "masked":
        a_shape, layout = (g, MASKED_MAX_M, case.k), cupy.asarray(np.array(case.rows, dtype=np.int32))
    elif case.layout == "contiguous":
        a_shape = (sum(case.rows), case.k)
        layout = cupy.asarray(np.repeat(np.arange(g, dtype=np.int32), case.rows))
    else:
        a_shape, layout = (case.rows[0], case.k), None
    a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal(a_shape, dtype=cupy.float32))
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    b_shape = (g, case.n, case.k) if case.layout != "normal" else (case.n, case.k)
    b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal(b_shape, dtype=cupy.float32))
    out = cupy.empty(a_shape[:-1] + (case.n,), dtype=cugemm8.api.BF16)
    return a, sa, b, sb, out, layout


def read_trace(kern) -> np.ndarray:
    import cupy

    ptr, size = library.current().module_global(kern, "cg8_trace")
    host = np.empty(size // 8, dtype=np.uint64)
    cupy.cuda.runtime.memcpy(host.ctypes.data, int(ptr), size, cupy.cuda.runtime.memcpyDeviceToHost)
    return host.reshape(3, TRACE_CTAS, TRACE_SLOTS, 4)  # [role, cta, slot, (tag, info, ns, clk)]


def clear_trace(kern) -> None:
    library.current().clear_module_global(kern, "cg8_trace")


def summarize(ev: np.ndarray, grid: int) -> dict:
    """ev: [role, cta, slot, (tag, info, ns, clk)]; times in us from the first CTA's start."""
    t0 = min(int(ev[r, c, 0, 2]) for r in range(2) for c in range(grid) if ev[r, c, 0, 0] == START)
    # The second math warpgroup against the first, tile by tile: when each began and ended its main loop.
    skew_start, skew_done = [], []
    for c in range(grid):
        w0 = [(int(e[0]), int(e[2])) for e in ev[0, c] if e[0] in (TILE, MAIN_DONE)]
        w1 = [(int(e[0]), int(e[2])) for e in ev[2, c] if e[0] in (TILE, MAIN_DONE)]
        for (tag0, ns0), (tag1, ns1) in zip(w0, w1):
            if tag0 == tag1:
                (skew_start if tag0 == TILE else skew_done).append((ns1 - ns0) * 1e-3)
    tiles, gaps, clocks, ends, starts, set_up, leads = [], [], [], [], [], [], []
    for c in range(grid):
        math = [e for e in ev[0, c] if e[0] != 0]
        if not math:
            continue
        tags = [int(e[0]) for e in math]
        ns = [(int(e[2]) - t0) * 1e-3 for e in math]
        starts.append(ns[0])
        if tags[-1] == END and ns[-1] > ns[0]:
            clocks.append((int(math[-1][3]) - int(math[0][3])) / ((ns[-1] - ns[0]) * 1e3))  # cycles/ns = GHz
            ends.append(ns[-1])
        if SET_UP in tags:
            set_up.append(ns[tags.index(SET_UP)] - ns[0])
        loads = [(int(e[2]) - t0) * 1e-3 for e in ev[1, c] if e[0] == LOADS]
        heads = [i for i, tag in enumerate(tags) if tag == TILE]
        prev_store = None
        for n_tile, i in enumerate(heads):
            stop = heads[n_tile + 1] if n_tile + 1 < len(heads) else len(tags)
            at = {}
            for j in range(i + 1, stop):   # the first of each (a tile of several passes has several LOOPs)
                if tags[j] in (STAGED, LOOP, MAIN_DONE, EXCHANGED, STORED):
                    at.setdefault(tags[j], ns[j])
            rec = {"cta": c, "half": int(math[i][1]) >> 28, "start": ns[i],
                   "main": at[MAIN_DONE] - ns[i] if MAIN_DONE in at else None,
                   "prologue": at[LOOP] - ns[i] if LOOP in at else None,
                   "staging": at[STAGED] - ns[i] if STAGED in at else None,
                   "loop": at[MAIN_DONE] - at[LOOP] if LOOP in at and MAIN_DONE in at else None,
                   "epilogue": at[STORED] - at.get(EXCHANGED, at[MAIN_DONE]) if STORED in at and MAIN_DONE in at else None,
                   "exchange": at[EXCHANGED] - at[MAIN_DONE] if EXCHANGED in at and MAIN_DONE in at else None,
                   "end": max(at.values()) if at else None}
            rec["total"] = rec["end"] - ns[i] if rec["end"] is not None else None
            if n_tile < len(loads):
                rec["lead"] = ns[i] - loads[n_tile]   # how long before the math started, its loads began
                leads.append(rec)
            tiles.append(rec)
            if prev_store is not None:
                gaps.append(ns[i] - prev_store)
            prev_store = at.get(STORED)

    def stats(xs):
        xs = [x for x in xs if x is not None]
        if not xs:
            return None
        return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    # Split shares: the masked tail's two halves, or split K's shares (1 + the rank in the cluster).
    normal = [t for t in tiles if t["half"] == 0]
    first, second = ([t for t in tiles if t["half"] == h] for h in (1, 2))
    shares = [t for t in tiles if t["half"] > 0]
    return {
        "span_us": max(ends) if ends else None,
        "cta_start_spread_us": stats(starts),
        "set_up_us": stats(set_up),
        "tile_us": stats([t["total"] for t in normal]),
        "tile_main_us": stats([t["main"] for t in normal]),
        "tile_prologue_us": stats([t["prologue"] for t in normal]),
        "tile_staging_us": stats([t["staging"] for t in normal]),
        "tile_loop_us": stats([t["loop"] for t in normal]),
        "tile_epilogue_us": stats([t["epilogue"] for t in normal]),
        "tile_gap_us": stats(gaps),
        "tile_lead_us": stats([t.get("lead") for t in normal]),
        "tiles_per_cta": stats([sum(1 for t in normal if t["cta"] == c) for c in range(grid)]),
        "last_normal_end_us": stats([t["end"] for t in normal]),
        "split_start_us": stats([t["start"] for t in first + second]),
        "split_lead_us": stats([t.get("lead") for t in first + second]),
        "split_main_us": stats([t["main"] for t in first + second]),
        "split_exchange_us": stats([t["exchange"] for t in first + second]),
        "split_end_us": stats([t["end"] for t in second]),
        "share_prologue_us": stats([t["prologue"] for t in shares]),
        "share_loop_us": stats([t["loop"] for t in shares]),
        "share_exchange_us": stats([t["exchange"] for t in shares]),
        "share_epilogue_us": stats([t["epilogue"] for t in shares]),
        "share_end_us": stats([t["end"] for t in shares]),
        "end_us": stats(ends),
        "wg1_minus_wg0_tile_start_us": stats(skew_start),
        "wg1_minus_wg0_main_done_us": stats(skew_done),
        "sm_ghz": stats(clocks),
    }


def read_trace_kb(kern) -> np.ndarray:
    """--kblocks: [role, cta, k-block, event] clock64 (cuda_src/gemm/trace.cuh, trace_mark_kb)."""
    import cupy

    ptr, size = library.current().module_global(kern, "cg8_trace_kb")
    host = np.empty(size // 8, dtype=np.uint64)
    cupy.cuda.runtime.memcpy(host.ctypes.data, int(ptr), size, cupy.cuda.runtime.memcpyDeviceToHost)
    return host.reshape(3, TRACE_CTAS, TRACE_KBLOCKS, 2)


def summarize_kblocks(kb: np.ndarray, ev: np.ndarray, grid: int) -> dict:
    """Per k-block, pooled over CTAs: how long math thread 0 waited for the stage (stall), how long it worked
    between stages (busy), how long after the producer issued a k-block's loads the math thread found it full
    (issue_to_ready: the load's latency where the math thread was already waiting), and the producer's issue
    interval. kb: read_trace_kb's array; ev: read_trace's (for the time origin)."""
    t0 = min(int(ev[r, c, 0, 2]) for r in range(2) for c in range(grid) if ev[r, c, 0, 0] == START)
    stall, busy, latency, first_latency, issue_gap, stall_share, busy_share = [], [], [], [], [], [], []
    for c in range(grid):
        idx = [i for i in range(kb.shape[2]) if kb[0, c, i, KB_READY] != 0 and kb[1, c, i, KB_ISSUED] != 0]
        math = [e for e in ev[0, c] if e[0] != 0]
        if not idx or math[0][0] != START or math[-1][0] != END:
            continue
        # clock64 -> us since t0, through math thread 0's first and last events (same SM as the producer).
        ns0, clk0 = int(math[0][2]), int(math[0][3])
        ghz = (int(math[-1][3]) - clk0) / (int(math[-1][2]) - ns0)
        us = lambda clk: ((int(clk) - clk0) / ghz + (ns0 - t0)) * 1e-3   # ns0 - t0 first: float64 holds ns0 to 256 ns
        wait = [us(kb[0, c, i, KB_WAIT]) for i in idx]
        ready = [us(kb[0, c, i, KB_READY]) for i in idx]
        issued = [us(kb[1, c, i, KB_ISSUED]) for i in idx]
        st = [r - w for w, r in zip(wait, ready)]
        bz = [wait[j + 1] - ready[j] for j in range(len(idx) - 1)]
        stall += st
        busy += bz
        stall_share.append(sum(st))
        busy_share.append(sum(bz))
        first_latency.append(ready[0] - issued[0])
        latency += [r - i for r, i in zip(ready[1:], issued[1:])]
        issue_gap += [issued[j + 1] - issued[j] for j in range(len(idx) - 1)]

    def stats(xs):
        if not xs:
            return None
        return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    return {"kb_stall_us": stats(stall), "kb_busy_us": stats(busy), "kb_first_issue_to_ready_us": stats(first_latency),
            "kb_issue_to_ready_us": stats(latency), "kb_issue_gap_us": stats(issue_gap),
            "share_stall_total_us": stats(stall_share), "share_busy_total_us": stats(busy_share)}


def main(argv=None) -> int:
    import cupy

    import cugemm8

    from .tune import SweepTimer, gpu_props, provenance

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", help="case names (default: all)")
    ap.add_argument("--calls", type=int, default=3, help="traced calls per case (each flushed; all kept)")
    ap.add_argument("--reps", type=int, default=20, help="untraced timed calls per case")
    ap.add_argument("--out", default="trace-out")
    ap.add_argument("--cuda-src", help="build from this copy of cuda_src/ (to trace a variant of the kernel)")
    ap.add_argument("--stress", type=int, default=0,
                    help="instead: time this many back-to-back flushed calls of each case, untraced "
                         "(for watching the clocks under sustained load, e.g. with nvidia-smi -lms)")
    ap.add_argument("--kblocks", action="store_true",
                    help="also log every k-block's issue, wait and ready (CG8_TRACE_KBLOCKS; decode-sized cases)")
    args = ap.parse_args(argv)
    global _kblocks
    _kblocks = args.kblocks
    lib = library.current()
    lib.wrap_render(_traced)
    if args.cuda_src:
        lib.set_source_dir(args.cuda_src)
    os.makedirs(args.out, exist_ok=True)
    sms = cugemm8.get_num_sms()
    timer = SweepTimer(args.reps)
    cases = [c for c in CASES if not args.case or c.name in args.case]
    summary = {"gpu": gpu_props(), **provenance(), "cases": {}}
    for case in cases:
        cfg = config_for(case, sms)
        a, sa, b, sb, out, layout = make_inputs(case)
        grid = sms if case.layout == "masked" else None
        res = {"config": dataclasses.asdict(cfg)}
        if args.stress:
            set_trace(False)
            run = lib.bind(cfg, a, sa, b, sb, out, layout=layout, grid=grid)
            run()
            res["stress_us"] = [t * 1e6 for t in timer.timer.sustained(run, args.stress)]
            print(f"{case.name}: {args.stress} calls, us: " + " ".join(f"{t:.0f}" for t in res["stress_us"]), flush=True)
            summary["cases"][case.name] = res
            continue
        # Untraced timing.
        set_trace(False)
        run = lib.bind(cfg, a, sa, b, sb, out, layout=layout, grid=grid)
        for _ in range(3):
            run()
        res["untraced_us"] = timer(run)
        # Traced calls.
        set_trace(True)
        run = lib.bind(cfg, a, sa, b, sb, out, layout=layout, grid=grid)
        kern = run.launcher.kernel
        res["grid"] = run.launcher.grid
        for _ in range(3):
            run()
        raw, raw_kb, traced = [], [], []
        for _ in range(args.calls):
            clear_trace(kern)
            if args.kblocks:
                lib.clear_module_global(kern, "cg8_trace_kb")
            traced.append(timer.one(run))
            raw.append(read_trace(kern)[:, :res["grid"]])
            if args.kblocks:
                raw_kb.append(read_trace_kb(kern)[:, :res["grid"]])
        res["traced_us"] = traced
        res["calls"] = [summarize(ev, res["grid"]) for ev in raw]
        for call, ev, kb in zip(res["calls"], raw, raw_kb):
            call.update(summarize_kblocks(kb, ev, res["grid"]))
        np.savez_compressed(os.path.join(args.out, f"{case.name}.npz"), events=np.stack(raw),
                            **({"kblocks": np.stack(raw_kb)} if raw_kb else {}))
        summary["cases"][case.name] = res
        s = res["calls"][-1]

        print(f"{case.name} ({cfg.block_m}x{cfg.block_n}, split {int(cfg.tail_split)}, grid {res['grid']}): "
              f"untraced {res['untraced_us']:.2f} us, traced {statistics.median(traced):.2f} us", flush=True)
        print("    per call: " + ", ".join(f"{c['span_us']:.1f} us @ {c['sm_ghz']['median']:.3f} GHz"
                                          for c in res["calls"] if c["span_us"] and c["sm_ghz"]))
        for key, val in s.items():
            if isinstance(val, dict):
                print(f"    {key:22s} median {val['median']:8.2f}  min {val['min']:8.2f}  max {val['max']:8.2f}  n {val['n']}")
            elif val is not None:
                print(f"    {key:22s} {val:8.2f}")
        del a, sa, b, sb, out, layout, run
        cupy.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(args.out, "trace-summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

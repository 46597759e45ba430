"""The decode section (M <= 128): dense rows at every small M, narrow-N rows, masked MoE decode with many
small and some empty groups, and cugemm8 replayed from a CUDA graph. Decode GEMMs are memory-bound, so
each implementation is scored by its fraction of the memory floor (shapes.roofline_fraction), whose two
constants, a device-to-device copy's bandwidth and an empty kernel's time, are measured in the same run by
the same protocol (L2 flush, CUDA events, median). Beside the implementations, every row times a kernel that
only reads the row's bytes (`read`): how close to the floor a kernel can come that does nothing else, so the
table shows where the floor itself is out of reach."""
from __future__ import annotations

import statistics

from .env import Env, bf16_to_f32, calc_diff_gpu, poison_bf16, quantize_a
from .report import config_text, counted_label, fmt, row_label, status_text, us
from .shapes import (SEED, Shape, decode_masked_m, decode_max_m, decode_shapes, gemm_bytes, gemm_flops, geomean,
                     masked_decode_bytes, ratio, roofline_fraction)
from .stream_shape_probe import SMEM as READ_SMEM, SOURCE as READ_SOURCE
from .tables import Candidate, base_row, bench_dense_shape, cugemm8_candidate, deepgemm_candidate, finish_row, measure

COPY_BYTES = 1 << 30                   # large enough that the copy runs at HBM speed, not from L2
EMPTY_KERNEL = 'extern "C" __global__ void cugemm8_bench_empty() {}'
GRAPH_SHAPE = (64, 2112, 7168)
GRAPH_CALLS = 20
READ = "read"   # the yardstick: a kernel that only reads the row's bytes (read_candidate)
PEERS = ((READ, "rd"), ("deepgemm", "DG"), ("cublaslt_per_tensor", "pt"), ("cublaslt_blockwise", "blk"))


# ----------------------------------------------------------------------------- the floor's constants
def timed(samples: list[float]) -> dict:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
            "samples_s": samples}


def calibrate(env: Env, reps: int) -> dict:
    """The memory floor's constants, each timed like a GEMM call (Timer.samples: flush, events, median):
    a 1 GiB device-to-device copy (bytes read + written / time) and an empty kernel (1 block of 1 thread,
    compiled by CuPy's NVRTC), the time no launch can beat."""
    cp, out = env.cp, {}
    try:
        src, dst = cp.ones(COPY_BYTES, dtype=cp.uint8), cp.zeros(COPY_BYTES, dtype=cp.uint8)  # both touched
        copy = timed(env.timer.samples(
            lambda: dst.data.copy_from_device_async(src.data, COPY_BYTES, stream=env.stream), reps))
        out["copy"] = {**copy, "bytes_copied": COPY_BYTES, "bytes_per_s": 2 * COPY_BYTES / copy["median_s"],
                       "how": "cudaMemcpyAsync device to device; bandwidth = (read + written bytes) / median time"}
    except Exception as exc:
        out["copy"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    src = dst = None
    env.free()
    try:
        kernel = cp.RawKernel(EMPTY_KERNEL, "cugemm8_bench_empty")
        with env.stream:   # RawKernel launches on the current stream: the timer's
            out["empty_kernel"] = {**timed(env.timer.samples(lambda: kernel((1,), (1,), ()), reps)),
                                   "how": "empty kernel, grid 1, block 1, launched like a GEMM call"}
    except Exception as exc:
        out["empty_kernel"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    out["copy_bytes_per_s"] = out["copy"].get("bytes_per_s")
    out["empty_kernel_s"] = out["empty_kernel"].get("median_s")
    return out


def same_size_copy(env: Env, nbytes: int):
    """A device-to-device copy moving `nbytes` (read + written) on the benchmark stream, as calibrate's copy: the
    yardstick of a streaming kernel of that size, with the same launch and the same dirty L2 after the flush."""
    src = env.cp.ones(nbytes // 2, dtype=env.cp.uint8)
    dst = env.cp.zeros_like(src)
    return lambda: dst.data.copy_from_device_async(src.data, src.size, stream=env.stream)


def read_candidate(env: Env, nbytes: int) -> Candidate:
    """A kernel that reads `nbytes` and nothing else: one 1024-thread CTA per SM, each reading its contiguous
    share in 16-byte loads, 8 in flight a thread (stream_shape_probe's kernel, contiguous). It reads about as fast
    as the 1 GiB copy at a few hundred MB, and it pays the same launch and the same dirty L2 after the flush as a
    GEMM of the row: its roofline fraction is what reading the row's bytes alone scores (NOTES.md v31, v36)."""
    cp, sms = env.cp, env.num_sms
    per_cta = -(-nbytes // (sms * 16)) * 16
    buf = cp.ones(sms * per_cta // 4, dtype=cp.uint32)  # touched, as a GEMM's operands are
    sink = cp.zeros(sms, dtype=cp.uint32)
    kern = cp.RawModule(code=READ_SOURCE).get_function("stream_rows")
    kern.max_dynamic_shared_size_bytes = READ_SMEM

    def run():
        with env.stream:
            kern((sms,), (1024,), (buf, cp.uint32(per_cta), cp.uint32(1), cp.uint32(128), cp.int32(1), sink),
                 shared_mem=READ_SMEM)
    return Candidate(READ, run, lambda: None)


def add_roofline(row: dict, floor: dict) -> dict:
    """Every timed entry's fraction of the memory floor: (bytes / copy bandwidth + empty kernel) / time."""
    bw, t0 = floor.get("copy_bytes_per_s"), floor.get("empty_kernel_s")
    for entry in row.get("results", {}).values():
        t = entry.get("median_s")
        entry["roofline_fraction"] = roofline_fraction(row["bytes"], t, bw, t0) if t and bw and t0 else None
    return row


# ----------------------------------------------------------------------------- rows
def bench_decode_dense(env: Env, table: str, shape: Shape, reps: int) -> dict:
    """The dense table's row (cugemm8, cuBLASLt blockwise and per-tensor, DeepGEMM, interleaved), with the read of
    its bytes."""
    nbytes = gemm_bytes(shape.m, shape.n, shape.k)
    row = bench_dense_shape(env, shape, reps, extra=[read_candidate(env, nbytes)])
    row.update(table=table, narrow=table == "narrow", bytes=nbytes)
    return row


def bench_decode_masked(env: Env, shape: Shape, reps: int) -> dict:
    """cugemm8 and DeepGEMM on G groups of max_m rows, masked_m drawn by shapes.decode_masked_m."""
    cp, cg = env.cp, env.cg
    g, e, n, k = shape.groups, shape.m, shape.n, shape.k
    mm, max_m = decode_masked_m(g, e), decode_max_m(e)
    valid = int(mm.sum())
    row = {**base_row(shape), **env.plan("masked", e, n, k, g), "table": "masked", "narrow": False,
           "max_m": max_m, "masked_m": mm.tolist(), "valid_rows": valid, "empty_groups": int((mm == 0).sum()),
           "bytes": masked_decode_bytes(mm, n, k)}
    x = env.randn((g, max_m, k))
    a, sa, sa_tma, row["a_scale_layout"] = quantize_a(cg, x)
    b = cp.empty((g, n, k), dtype=cp.uint8)
    sb = cp.empty((g, -(-n // 128), -(-k // 128)), dtype=cp.float32)
    refs = []
    for i in range(g):   # one group's float32 weights at a time (128 x 4096 x 7168 at once would be 15 GB)
        w = env.randn((n, k))
        b[i], sb[i] = cg.per_block_cast_to_fp8(w)
        if mm[i]:
            refs.append((i, x[i, :mm[i]] @ w.T))
    del x, w
    masked_m = cp.asarray(mm)

    def diff_of(y):
        return calc_diff_gpu(cp, [(y[i, :mm[i]], ref) for i, ref in refs])

    call = lambda **kw: cg.m_grouped_matmul_masked(a, sa_tma, b, sb, masked_m, e, **kw)  # noqa: E731
    cands = [cugemm8_candidate(env, call, diff_of), read_candidate(env, row["bytes"])]
    cands += deepgemm_candidate(env, "deepgemm", lambda dg: dg.masked(a, sa, b, sb, masked_m, e), diff_of)
    entries = measure(env, cands, reps, gemm_flops(valid, n, k), row["bytes"])
    return finish_row(row, entries)


def decode_row(env: Env, table: str, shape: Shape, reps: int, floor: dict) -> dict:
    """One measured row with its fractions, or the row's error (the section goes on)."""
    try:
        row = (bench_decode_masked(env, shape, reps) if table == "masked"
               else bench_decode_dense(env, table, shape, reps))
        return add_roofline(row, floor)
    except Exception as exc:
        return {**base_row(shape), "table": table, "narrow": table == "narrow",
                "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        env.free()


# ----------------------------------------------------------------------------- CUDA graph replay
def capture(stream, call, calls: int):
    """A CUDA graph of `calls` calls of call(stream), captured on `stream`; the capture is always ended."""
    stream.begin_capture()
    try:
        for _ in range(calls):
            call(stream)
    finally:
        graph = stream.end_capture()
    return graph


def graph_replay(env: Env, reps: int) -> dict:
    """GRAPH_CALLS back-to-back cugemm8.matmul calls (out= preallocated) captured in one CUDA graph and
    replayed; beside it, the same calls launched from Python and one call alone, all interleaved."""
    cp, cg = env.cp, env.cg
    m, n, k = GRAPH_SHAPE
    res = {"shape": {"m": m, "n": n, "k": k}, "calls_per_graph": GRAPH_CALLS, "seed": SEED,
           "flush": "one L2 flush before each replay (and before each eager batch); none between the calls "
                    "inside the graph, so calls after the first may find A and B in L2",
           "per_call": "median over replays of (replay time / calls_per_graph)"}
    x, w = env.randn((m, k)), env.randn((n, k))
    a, sa, sa_tma, res["a_scale_layout"] = quantize_a(cg, x)
    b, sb = cg.per_block_cast_to_fp8(w)
    ref = x @ w.T
    del x, w
    out = cp.empty((m, n), dtype=cg.api.BF16)
    call = lambda s: cg.matmul(a, sa_tma, b, sb, out=out, stream=s)  # noqa: E731
    call(env.stream)   # compiles and caches the launch: nothing but the launch may run under capture
    env.sync()
    graph, failures = None, []
    for name, stream in (("benchmark stream", env.stream), ("new non-blocking stream", None)):
        try:
            stream = stream or cp.cuda.Stream(non_blocking=True)
            graph = capture(stream, call, GRAPH_CALLS)
            res["captured_on"] = name
            break
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
    if failures:
        res["capture_errors"] = failures
    if graph is None:
        res["error"] = "capture failed: " + "; ".join(failures)
        return res
    poison_bf16(cp, out)
    graph.launch(env.stream)
    env.sync()
    res["diff"] = calc_diff_gpu(cp, [(bf16_to_f32(cp, out), ref)])
    fns = {"graph": lambda: graph.launch(env.stream),
           "eager": lambda: [call(env.stream) for _ in range(GRAPH_CALLS)],
           "single": lambda: call(env.stream)}
    if hasattr(cg, "set_pdl"):   # the same calls captured with programmatic dependent launch on
        cg.set_pdl(True)
        try:
            graph_pdl = capture(stream, call, GRAPH_CALLS)
        except Exception as exc:
            res["pdl_capture_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        else:
            fns["graph_pdl"] = lambda: graph_pdl.launch(env.stream)
        finally:
            cg.set_pdl(False)
    for name, samples in env.timer.interleaved(fns, reps).items():
        per = 1 if name == "single" else GRAPH_CALLS
        res[name] = {**timed(samples), "per_call_s": statistics.median(s / per for s in samples)}
    res["graph_over_single"] = ratio(res["graph"]["per_call_s"], res["single"]["per_call_s"])
    res["graph_over_eager"] = ratio(res["graph"]["per_call_s"], res["eager"]["per_call_s"])
    if "graph_pdl" in res:
        res["graph_pdl_over_graph"] = ratio(res["graph_pdl"]["per_call_s"], res["graph"]["per_call_s"])
    return res


# ----------------------------------------------------------------------------- summary, printing, section
def ok_value(row: dict, name: str, key: str) -> float | None:
    """One implementation's `key` in a row (its median_s, roofline_fraction), None unless it was checked ok."""
    e = row.get("results", {}).get(name, {})
    return e.get(key) if e.get("status") == "ok" else None


def fraction(row: dict, name: str = "cugemm8") -> float | None:
    return ok_value(row, name, "roofline_fraction")


def median_of(row: dict, name: str) -> float | None:
    return ok_value(row, name, "median_s")


def decode_summary(rows: list[dict], graph: dict | None = None, floor: dict | None = None,
                   after: dict | None = None) -> dict:
    by = {t: [r for r in rows if r.get("table") == t] for t in ("dense", "narrow", "masked")}
    scored = [r for r in rows if fraction(r)]
    worst = min(scored, key=fraction, default=None)
    s = {f"roofline_geomean_{t}": geomean(fraction(r) for r in rs) for t, rs in by.items()}
    s.update({f"rows_scored_{t}": sum(1 for r in rs if fraction(r)) for t, rs in by.items()})
    # The read of each row's bytes: its fraction, and where the floor is out of reach for any kernel. DeepGEMM's
    # time over the read's is the DeepGEMM/cugemm8 ratio a GEMM running at the read's pace would show.
    s.update({f"read_roofline_geomean_{t}": geomean(fraction(r, READ) for r in rs) for t, rs in by.items()})
    s.update({f"cugemm8_over_read_geomean_{t}": geomean(ratio(median_of(r, "cugemm8"), median_of(r, READ))
                                                        for r in rs) for t, rs in by.items()})
    s["deepgemm_over_read_geomean_dense"] = geomean(ratio(median_of(r, "deepgemm"), median_of(r, READ))
                                                    for r in by["dense"])
    s["read_roofline_min"] = min(filter(None, (fraction(r, READ) for r in rows)), default=None)
    s.update(roofline_min=worst and fraction(worst), roofline_min_shape=worst and row_label(worst),
             deepgemm_roofline_geomean_dense=geomean(fraction(r, "deepgemm") for r in by["dense"]),
             deepgemm_over_cugemm8_geomean_dense=geomean(r.get("ratio_deepgemm") for r in by["dense"]),
             rows_compared_deepgemm_dense=sum(1 for r in by["dense"] if r.get("ratio_deepgemm")),
             deepgemm_over_cugemm8_geomean_masked=geomean(r.get("ratio_deepgemm") for r in by["masked"]),
             per_tensor_over_cugemm8_geomean_dense=geomean(r.get("ratio_per_tensor") for r in by["dense"]),
             graph_us_per_call=us((graph or {}).get("graph", {}).get("per_call_s")),
             copy_bandwidth_after_over_before=ratio((after or {}).get("copy_bytes_per_s"),
                                                    (floor or {}).get("copy_bytes_per_s")),
             empty_kernel_after_over_before=ratio((after or {}).get("empty_kernel_s"),
                                                  (floor or {}).get("empty_kernel_s")),
             cugemm8_not_ok=[row_label(r) for r in rows if "error" in r
                             or r.get("results", {}).get("cugemm8", {}).get("status") != "ok"])
    return s


def decode_row_text(row: dict) -> str:
    label = counted_label(row, "empty_groups")
    if "error" in row:
        return f"{label:>40s} error: {row['error']}"
    res = row["results"]
    cg = res.get("cugemm8", {})
    line = (f"{label:>40s} {config_text(row):>15s} {fmt(cg.get('diff'), '.1e', 8)} {fmt(row['bytes'] / 1e6, '.1f')}"
            f" | {fmt(us(cg.get('median_s')), '.1f')} {fmt(cg.get('gbps'), '.0f')}"
            f" {fmt(cg.get('roofline_fraction'), '.2f', 5)}")
    t_cg = cg.get("median_s") if cg.get("status") == "ok" else None
    for name, _ in PEERS:
        e = res.get(name, {})
        line += (f" | {fmt(us(e.get('median_s')), '.1f')} {fmt(e.get('roofline_fraction'), '.2f', 5)}"
                 f" {fmt(ratio(e.get('median_s'), t_cg), '.2f', 5)}")
    notes = [f"{name}:{status_text(e)}" for name, e in res.items() if status_text(e)]
    return line + ("  " + "; ".join(notes) if notes else "")


def print_floor(floor: dict) -> None:
    print("\n== decode (median of flushed, event-timed calls; frac = (bytes / copy bandwidth + empty kernel) / time;"
          " X/cg = X's time / cugemm8's) ==")
    bw, t0 = floor.get("copy_bytes_per_s"), floor.get("empty_kernel_s")
    errors = "; ".join(f"{what}: {floor[what]['error']}" for what in ("copy", "empty_kernel")
                       if "error" in floor.get(what, {}))
    print(f"floor: device-to-device copy {fmt(bw and bw / 1e12, '.2f', 0)} TB/s (read + written), empty kernel "
          f"{fmt(us(t0), '.2f', 0)} µs" + (f"  ({errors}: no fractions)" if errors else ""), flush=True)


def print_row(row: dict, previous: dict | None) -> None:
    """One row as soon as it is measured (a long run that is cut short still shows what it measured)."""
    if previous is None or previous.get("table") != row.get("table"):
        head = f"{'shape':>40s} {'config':>15s} {'diff':>8s} {'MB':>7s} | {'cg µs':>7s} {'GB/s':>7s} {'frac':>5s}"
        for _, short in PEERS:
            head += f" | {short + ' µs':>7s} {'frac':>5s} {short + '/cg':>5s}"
        print(f"-- {row.get('table')}\n{head}")
    print(decode_row_text(row), flush=True)


def print_tail(res: dict, env=None) -> None:
    s, g = res["summary"], res.get("graph") or {}
    if env is not None and env.peers is None:
        print(f"peers: {env.peers_note}")
    if "graph" in g:
        shape = "x".join(str(g["shape"][d]) for d in "mnk")
        print(f"CUDA graph, {g['calls_per_graph']} x {shape} (captured on the {g['captured_on']}, diff "
              f"{g['diff']:.1e}): {us(g['graph']['per_call_s']):.2f} µs/call replayed; launched from Python "
              f"{us(g['eager']['per_call_s']):.2f} µs/call; one flushed call {us(g['single']['per_call_s']):.2f} µs "
              "(no flush between the calls inside the graph)")
        if "graph_pdl" in g:
            print(f"CUDA graph with PDL: {us(g['graph_pdl']['per_call_s']):.2f} µs/call replayed")
    else:
        print(f"CUDA graph: {g.get('error')}")
    print(f"roofline fraction geomean (cugemm8): dense {fmt(s['roofline_geomean_dense'], '.2f', 0)} "
          f"({s['rows_scored_dense']} rows), narrow {fmt(s['roofline_geomean_narrow'], '.2f', 0)}, masked "
          f"{fmt(s['roofline_geomean_masked'], '.2f', 0)}; min {fmt(s['roofline_min'], '.2f', 0)} at "
          f"{s['roofline_min_shape']}; DeepGEMM/cugemm8 time geomean, dense "
          f"{fmt(s['deepgemm_over_cugemm8_geomean_dense'], '.2f', 0)} ({s['rows_compared_deepgemm_dense']} rows)")
    print(f"read of each row's bytes (no arithmetic): roofline fraction geomean dense "
          f"{fmt(s['read_roofline_geomean_dense'], '.2f', 0)}, narrow {fmt(s['read_roofline_geomean_narrow'], '.2f', 0)}"
          f", masked {fmt(s['read_roofline_geomean_masked'], '.2f', 0)}; min {fmt(s['read_roofline_min'], '.2f', 0)}; "
          f"cugemm8/read time geomean dense {fmt(s['cugemm8_over_read_geomean_dense'], '.2f', 0)}, narrow "
          f"{fmt(s['cugemm8_over_read_geomean_narrow'], '.2f', 0)}; DeepGEMM/read time geomean, dense "
          f"{fmt(s['deepgemm_over_read_geomean_dense'], '.2f', 0)} (the DeepGEMM/cugemm8 ratio at the read's pace)")


def run_decode(env: Env, args) -> dict:
    """The section. `args.checkpoint(partial)`, when the caller sets it, is called after every row (the full
    table runs for minutes: a run cut short keeps its rows in the JSON)."""
    checkpoint = getattr(args, "checkpoint", None) or (lambda partial: None)
    with env.stream:
        floor = calibrate(env, args.reps)
        print_floor(floor)
        rows = []
        for table, shape in decode_shapes(args.quick):
            rows.append(decode_row(env, table, shape, args.reps, floor))
            print_row(rows[-1], rows[-2] if len(rows) > 1 else None)
            checkpoint({"floor": floor, "rows": rows, "partial": True})
        try:
            graph = graph_replay(env, args.reps)
        except Exception as exc:
            graph = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        finally:
            env.free()
        after = calibrate(env, args.reps)   # the constants again: how far they drifted over the section
    res = {"floor": floor, "floor_after": after, "rows": rows, "graph": graph,
           "summary": decode_summary(rows, graph, floor, after)}
    print_tail(res, env)
    return res

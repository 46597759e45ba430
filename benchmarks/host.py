"""Host-side sections: the per-call overhead (back-to-back calls) and the JIT (cold compiles, the first
call in a new process)."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .env import Env, quantize_a, quantize_b
from .report import fmt, print_jit
from .shapes import shapes_for

OVERHEAD_SHAPE = (64, 2112, 7168)
OVERHEAD_CALLS = 2000
OVERHEAD_WARMUP = 100
OVERHEAD_TRIALS = 5
HOST_ONLY_CALLS = 100
HOST_ONLY_BLOCKERS = 40           # 1 GiB memsets queued ahead (~13 ms of GPU work on an H200)


def back_to_back(env: Env, fn, calls: int, sync=None) -> dict:
    """Wall time per call of `calls` calls with no sync inside (one at the end); median of a few trials
    (host timings on a shared machine are noisy), then the host's own cost. `sync`: what waits for the calls'
    GPU work when it is not on the benchmark's stream (JAX's own stream); the host-only column is then left
    out, since the memsets that keep the GPU busy run on the benchmark's stream."""
    own_stream = sync is None
    sync = sync or env.sync
    for _ in range(OVERHEAD_WARMUP):
        fn()
    sync()
    walls, enqueues = [], []
    for _ in range(OVERHEAD_TRIALS):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        sync()
        walls.append((time.perf_counter() - t0) / calls * 1e6)
        enqueues.append((t1 - t0) / calls * 1e6)
    if not own_stream:
        return {"wall_us": statistics.median(walls), "enqueue_us": statistics.median(enqueues), "calls": calls,
                "wall_us_trials": walls}
    hosts = [host_only(env, fn) for _ in range(OVERHEAD_TRIALS)]
    return {"wall_us": statistics.median(walls), "enqueue_us": statistics.median(enqueues), "calls": calls,
            "wall_us_trials": walls, "host_us": statistics.median(h[0] for h in hosts),
            "host_us_trials": [h[0] for h in hosts], "host_gpu_busy": all(h[1] for h in hosts)}


def host_only(env: Env, fn, calls: int = HOST_ONLY_CALLS) -> tuple[float, bool]:
    """Host µs per call while the GPU is kept busy by memsets queued ahead (a hint at whether the wall
    time is host- or GPU-bound; torch's calls measured 2x slower this way than back to back)."""
    done = env.cp.cuda.Event(disable_timing=True)
    for _ in range(HOST_ONLY_BLOCKERS):
        env.flush()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    done.record()
    busy = not done.done   # False would mean the GPU caught up with the host: the number is then an upper bound
    env.sync()
    return (t1 - t0) / calls * 1e6, busy


def run_overhead(env: Env, args) -> dict:
    cg = env.cg
    m, n, k = OVERHEAD_SHAPE
    a, sa, sa_tma, _ = quantize_a(env.cg, env.randn((m, k)))
    b, sb = quantize_b(env.cg, env.randn((n, k)))
    out = cg.matmul(a, sa_tma, b, sb)
    variants = {
        "cugemm8 out=, aligned a_scale": lambda: cg.matmul(a, sa_tma, b, sb, out=out),
        "cugemm8 no out, aligned a_scale": lambda: cg.matmul(a, sa_tma, b, sb),
        "cugemm8 out=, row-major a_scale": lambda: cg.matmul(a, sa, b, sb, out=out),
    }
    if env.peers is not None:
        try:
            variants["torch cuBLASLt blockwise"] = env.peers.blockwise(a, sa, b, sb)
        except Exception as exc:
            print(f"overhead: torch blockwise peer unavailable: {exc}")
        variants.update(_torch_variants(env, a, sa_tma, b, sb, out))
    syncs = {}
    try:
        jax_variants, device_sync = _jax_variants(env, a, sa, b, sb)
        variants.update(jax_variants)
        syncs = dict.fromkeys(jax_variants, device_sync)
    except Exception as exc:   # JAX is optional
        print(f"overhead: JAX variants unavailable: {type(exc).__name__}: {exc}")
    rows = {}
    for name, fn in variants.items():
        try:
            rows[name] = back_to_back(env, fn, OVERHEAD_CALLS, syncs.get(name))
        except Exception as exc:
            rows[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    env.free()
    print(f"\n== host overhead: {OVERHEAD_CALLS} back-to-back calls, M={m} N={n} K={k} "
          f"(median of {OVERHEAD_TRIALS} trials) ==")
    print(f"{'variant':36s} {'wall µs/call':>13s} {'enqueue µs/call':>16s} {'host-only µs/call':>18s}")
    for name, r in rows.items():
        host = fmt(r.get("host_us"), ".2f", 18) + ("" if r.get("host_gpu_busy", True) else " (GPU went idle)")
        print(f"{name:36s} {fmt(r.get('wall_us'), '.2f', 13)} {fmt(r.get('enqueue_us'), '.2f', 16)} {host}"
              + (f"  {r['error']}" if "error" in r else ""))
    return {"shape": {"m": m, "n": n, "k": k}, "rows": rows}


def _torch_variants(env: Env, a, sa_tma, b, sb, out) -> dict:
    """cugemm8 called with torch tensors (e4m3 as torch.float8_e4m3fn): what DLPack intake and its stream
    handshake add to a call."""
    torch = env.peers.torch
    cg = env.cg
    ta, tb = (torch.from_dlpack(x).view(torch.float8_e4m3fn) for x in (a, b))
    tsa, tsb, tout = (torch.from_dlpack(x) for x in (sa_tma, sb, out))
    ptr = env.stream.ptr
    return {"cugemm8, torch float8 tensors": lambda: cg.matmul(ta, tsa, tb, tsb, out=tout, stream=ptr)}


def _jax_variants(env: Env, a, sa, b, sb) -> tuple[dict, object]:
    """cugemm8.jax.matmul under jax.jit (a buffer callback on XLA's stream, A's scales padded and transposed by
    XLA), and a jitted one-op JAX function as the floor of JAX's own dispatch."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # leave the GPU's memory to the other tables
    import jax
    import jax.numpy as jnp

    import cugemm8.jax as cgj

    args = tuple(jax.dlpack.from_dlpack(x) for x in (a, sa, b, sb))
    env.sync()
    gemm = jax.jit(cgj.matmul)
    plus_one = jax.jit(lambda x: x + 1)
    small = jnp.zeros((64, 64), jnp.float32)
    device = env.cp.cuda.Device()
    return ({"cugemm8.jax.matmul under jax.jit": lambda: gemm(*args),
             "jax.jit(x + 1), 64x64 (JAX dispatch floor)": lambda: plus_one(small)}, device.synchronize)


# ----------------------------------------------------------------------------- JIT
# NVRTC 13 keeps its own compile cache (the CUDA compute cache, ~/.nv/ComputeCache): a source compiled
# before, in any process, compiles ~7x faster. Cold numbers therefore come from child processes run with
# CUDA_CACHE_DISABLE=1 and an empty CUDA_CACHE_PATH.
COMPILE_SCRIPT = r"""
import dataclasses, json, sys, time
from benchmarks import library
lib = library.current()
shapes, sms = json.loads(sys.argv[1]), int(sys.argv[2])
t = time.perf_counter()
lib.compile_cubin('extern "C" __global__ void cugemm8_bench_empty() {}')
init = time.perf_counter() - t
configs = {}
for label, m, n, k in shapes:
    configs.setdefault(lib.choose("normal", m, n, k, 1, sms).config, []).append(label)
rows = []
for cfg, labels in configs.items():
    row = {"config": dataclasses.asdict(cfg), "shapes": labels}
    try:
        t = time.perf_counter()
        cubin = lib.compile_cubin(lib.render(cfg))
        row.update(compile_s=time.perf_counter() - t, cubin_bytes=len(cubin))
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    rows.append(row)
print(json.dumps({"nvrtc_init_s": init, "compiles": rows}))
"""

FIRST_CALL_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import cupy as cp
import cugemm8
t_import = time.perf_counter() - t0
m, n, k = map(int, sys.argv[1:4])
rng = cp.random.default_rng(1)
a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cp.float32))
b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal((n, k), dtype=cp.float32))
sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
cp.cuda.Device().synchronize()
times = []
for _ in range(2):
    t = time.perf_counter()
    cugemm8.matmul(a, sa, b, sb)
    cp.cuda.Device().synchronize()
    times.append(time.perf_counter() - t)
print(json.dumps({"import_s": t_import, "first_call_s": times[0], "second_call_s": times[1]}))
"""


def run_child(script: str, argv: list[str], scratch: str) -> dict:
    """Run `script` in a fresh interpreter that imports this checkout, with cugemm8's disk cache in
    scratch/cugemm8 and NVRTC's compute cache off; the JSON of its last output line, or an error."""
    pkg_parent = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, CUGEMM8_CACHE_DIR=os.path.join(scratch, "cugemm8"), CUDA_CACHE_DISABLE="1",
               CUDA_CACHE_PATH=os.path.join(scratch, "nv"),
               PYTHONPATH=os.pathsep.join(p for p in (pkg_parent, os.environ.get("PYTHONPATH")) if p))
    env.pop("CUGEMM8_JIT_DISABLE_CACHE", None)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True,
                              timeout=900)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 900 s"}
    wall = time.perf_counter() - t0
    try:
        return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_s": wall}
    except (IndexError, ValueError):
        return {"error": f"rc={proc.returncode}: {(proc.stderr or proc.stdout).strip()[-500:]}", "process_s": wall}


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def run_jit(env: Env, args) -> dict:
    """Cold compile per distinct dense configuration (compile_cubin(render(cfg))), then the first call in a
    new process with an empty and with a warm cugemm8 disk cache."""
    shapes = [[s.label, s.m, s.n, s.k] for s in shapes_for("dense", args.quick)]
    scratch = tempfile.mkdtemp(prefix="cugemm8-bench-")
    try:
        compiled = run_child(COMPILE_SCRIPT, [json.dumps(shapes), str(env.num_sms)], scratch)
        cold = run_child(FIRST_CALL_SCRIPT, list(map(str, OVERHEAD_SHAPE)), scratch)   # fills the empty cache
        warm = run_child(FIRST_CALL_SCRIPT, list(map(str, OVERHEAD_SHAPE)), scratch)   # the number we quote
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    compiles = compiled.get("compiles", [])
    times = [r["compile_s"] for r in compiles if "compile_s" in r]
    summary = {"configs": len(compiles), "compiled": len(times), "nvrtc_init_s": compiled.get("nvrtc_init_s"),
               "compile_mean_s": statistics.mean(times) if times else None,
               "compile_max_s": max(times) if times else None,
               "first_call_warm_cache_ms": ms(warm.get("first_call_s")),
               "first_call_cold_cache_ms": ms(cold.get("first_call_s"))}
    print_jit(compiled, cold, warm)
    return {"compile": compiled, "first_call_cold_cache": cold, "first_call_warm_cache": warm, "summary": summary}


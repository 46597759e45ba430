"""Benchmark tables for cugemm8 (DESIGN.md §6): dense, grouped (contiguous, masked), host overhead, JIT.

    python -m cugemm8 bench [--only dense|contiguous|masked|overhead|jit] [--reps 30] [--out DIR]
                            [--no-peers] [--quick]

Protocol: inputs are built once per shape (random normal, quantized by cugemm8's GPU quantizers); each
implementation's answer is checked (calc_diff against the unquantized product, computed on the GPU)
before it is timed; every timed call follows a 1 GiB memset (L2 flush, which also hides host overhead)
and sits between two CUDA events; the median over --reps calls is quoted. cuBLASLt peers (through
torch, when it is importable and sees the GPU) run in the same loop, alternating with cugemm8, on the
same FP8 bytes (DLPack, zero-copy). So does DeepGEMM when `deep_gemm` is importable (an optional peer,
never a dependency: the API of the public repository at 8dfa329, which the H200 anchors were measured
with). The grouped anchors timed DeepGEMM by itself, so the grouped tables also time cugemm8 and
DeepGEMM each alone (`time_alone`) and compare that with the anchor too. Results go to
<out>/<gpu>-<UTC time>.json and a PNG next to it.

Importing this module needs neither a GPU, CuPy nor torch: those are imported inside functions.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

SECTIONS = ("dense", "contiguous", "masked", "overhead", "jit")
FLUSH_BYTES = 1 << 30           # the L2-flush memset before every timed call (>= 1 GB)
DIFF_LIMIT = 1e-3               # calc_diff against the unquantized product
SEED = 20261122
MASKED_MAX_M = 4096
WARMUP_CALLS = 3
# Idle time before each shape is timed. The GPU runs these kernels power-capped, and sustained load
# lowers the clock a further step (about 11% after ~50 ms of back-to-back 1.4 ms GEMMs; NOTES.md
# v10): without a pause, a shape's numbers depend on what ran before it (the first masked shape, after
# the contiguous ones, read ~15% slow). Within a shape the implementations alternate sample by sample,
# so they share whatever clock state there is.
SETTLE_S = 1.0
OVERHEAD_SHAPE = (64, 2112, 7168)
OVERHEAD_CALLS = 2000
OVERHEAD_WARMUP = 100
OVERHEAD_TRIALS = 5
HOST_ONLY_CALLS = 100
HOST_ONLY_BLOCKERS = 40           # 1 GiB memsets queued ahead (~13 ms of GPU work on an H200)
DIFF_CHUNK = 1 << 24            # elements per float64 chunk in the GPU calc_diff


# ----------------------------------------------------------------------------- shape tables
@dataclass(frozen=True)
class Shape:
    kind: str       # "normal" | "contiguous" | "masked"
    groups: int
    m: int          # rows (normal); rows per expert (contiguous); expected rows per group (masked)
    n: int
    k: int

    @property
    def label(self) -> str:
        if self.kind == "normal":
            return f"{self.m}x{self.n}x{self.k}"
        return f"{self.kind[0]}{self.groups}x{self.m}x{self.n}x{self.k}"


DENSE_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
DENSE_SHAPES = tuple(Shape("normal", 1, m, n, k) for m in (64, 128, 4096) for n, k in DENSE_NK)
CONTIGUOUS_SHAPES = tuple(Shape("contiguous", g, m, n, k) for g, m, n, k in
                          ((4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168), (8, 4096, 7168, 2048)))
MASKED_SHAPES = tuple(Shape("masked", g, m, n, k) for g, m in ((1, 1024), (2, 512), (4, 256))
                      for n, k in ((4096, 7168), (7168, 2048)))
QUICK_SHAPES = {
    "dense": (DENSE_SHAPES[0], DENSE_SHAPES[11], DENSE_SHAPES[16]),   # 64x2112x7168, 128x7168x2048, 4096x4096x7168
    "contiguous": (CONTIGUOUS_SHAPES[3],),
    "masked": (MASKED_SHAPES[3],),
}

# DeepGEMM TFLOPS (public repo at 8dfa329, nvcc 13.0) measured on an NVIDIA H200 (132 SMs) with the same
# protocol; copied, rounded to 0.1, from /work/shared/reference/anchors/h200-2026-11-22.json
# ("deepgemm_tflops"; see anchors/README.md). Only comparable with runs on an H200.
ANCHOR_GPU = "NVIDIA H200"
DEEPGEMM_H200_TFLOPS = {
    Shape("normal", 1, 64, 2112, 7168): 142.7, Shape("normal", 1, 64, 24576, 1536): 261.7,
    Shape("normal", 1, 64, 32768, 512): 193.4, Shape("normal", 1, 64, 7168, 16384): 363.6,
    Shape("normal", 1, 64, 4096, 7168): 215.1, Shape("normal", 1, 64, 7168, 2048): 185.8,
    Shape("normal", 1, 128, 2112, 7168): 263.9, Shape("normal", 1, 128, 24576, 1536): 481.3,
    Shape("normal", 1, 128, 32768, 512): 348.6, Shape("normal", 1, 128, 7168, 16384): 606.7,
    Shape("normal", 1, 128, 4096, 7168): 404.6, Shape("normal", 1, 128, 7168, 2048): 312.3,
    Shape("normal", 1, 4096, 2112, 7168): 1114.8, Shape("normal", 1, 4096, 24576, 1536): 1299.3,
    Shape("normal", 1, 4096, 32768, 512): 969.4, Shape("normal", 1, 4096, 7168, 16384): 1449.5,
    Shape("normal", 1, 4096, 4096, 7168): 1401.4, Shape("normal", 1, 4096, 7168, 2048): 1221.9,
    Shape("contiguous", 4, 8192, 4096, 7168): 1328.7, Shape("contiguous", 4, 8192, 7168, 2048): 1228.4,
    Shape("contiguous", 8, 4096, 4096, 7168): 1287.6, Shape("contiguous", 8, 4096, 7168, 2048): 1202.0,
    Shape("masked", 1, 1024, 4096, 7168): 1208.9, Shape("masked", 1, 1024, 7168, 2048): 707.8,
    Shape("masked", 2, 512, 4096, 7168): 661.4, Shape("masked", 2, 512, 7168, 2048): 810.1,
    Shape("masked", 4, 256, 4096, 7168): 666.8, Shape("masked", 4, 256, 7168, 2048): 623.9,
}
# Valid rows (all groups) of DeepGEMM's own masked_m draw behind each masked anchor: its TFLOPS are over
# these rows, which differ from our draw. Recovered exactly (to 1e-3) as TFLOPS * time / (2 N K) from
# the anchor JSON.
DEEPGEMM_H200_MASKED_ROWS = {
    Shape("masked", 1, 1024, 4096, 7168): 1006, Shape("masked", 1, 1024, 7168, 2048): 778,
    Shape("masked", 2, 512, 4096, 7168): 1037, Shape("masked", 2, 512, 7168, 2048): 1293,
    Shape("masked", 4, 256, 4096, 7168): 1085, Shape("masked", 4, 256, 7168, 2048): 973,
}


# ----------------------------------------------------------------------------- pure helpers
def rescale_rows(masked_m, total: int) -> list[int]:
    """Our per-group draw scaled to `total` valid rows (proportions kept; the remainder to the first
    groups): DeepGEMM's total with our split, for a like-for-like count of valid rows."""
    m = [int(v) for v in masked_m]
    out = [v * total // sum(m) for v in m]
    for i in range(total - sum(out)):
        out[i % len(out)] += 1
    return out


def gemm_flops(rows: int, n: int, k: int) -> int:
    """2*M*N*K over the rows actually computed (grouped: the valid rows of all groups)."""
    return 2 * rows * n * k


def gemm_bytes(rows: int, n: int, k: int, groups: int = 1) -> int:
    """FP8 A (M*K) + FP8 B (G*N*K) + bf16 D (2*M*N); scales are not counted."""
    return rows * k + groups * n * k + 2 * rows * n


def draw_masked_m(groups: int, expected: int, max_m: int = MASKED_MAX_M, seed: int = SEED) -> np.ndarray:
    """Valid rows per group, int(U(0.7, 1.3) * expected), fixed seed per (groups, expected)."""
    rng = np.random.default_rng([seed, groups, expected])
    m = (rng.uniform(0.7, 1.3, size=groups) * expected).astype(np.int64)
    return np.clip(m, 1, max_m).astype(np.int32)


def contiguous_m_indices(groups: int, m: int, align: int) -> tuple[np.ndarray, int]:
    """Expert id per row with every expert's m rows padded to a multiple of `align` (-1 on padding)."""
    seg = -(-m // align) * align
    idx = np.full((groups, seg), -1, dtype=np.int32)
    idx[:, :m] = np.arange(groups, dtype=np.int32)[:, None]
    return idx.reshape(-1), seg


def geomean(values) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "gpu"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cugemm8 bench", description="cugemm8 benchmark tables (DESIGN.md §6)")
    p.add_argument("--only", action="append", choices=SECTIONS, metavar="|".join(SECTIONS),
                   help="run only this section (repeatable; default: all)")
    p.add_argument("--out", default="bench/results/", help="folder for the JSON and PNG (default: bench/results/)")
    p.add_argument("--reps", type=int, default=30, help="timed calls per implementation and shape (median; >= 30)")
    p.add_argument("--no-peers", action="store_true", help="skip the peers (cuBLASLt through torch, and DeepGEMM)")
    p.add_argument("--quick", action="store_true", help="a few shapes only (smoke test)")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    args.sections = [s for s in SECTIONS if s in (args.only or SECTIONS)]
    return args


def shapes_for(section: str, quick: bool) -> tuple[Shape, ...]:
    if quick:
        return QUICK_SHAPES[section]
    return {"dense": DENSE_SHAPES, "contiguous": CONTIGUOUS_SHAPES, "masked": MASKED_SHAPES}[section]


def fmt(value, spec: str = ".1f", width: int = 7) -> str:
    text = "-" if value is None else format(value, spec)
    return text.rjust(width)


# ----------------------------------------------------------------------------- GPU environment
class Env:
    """CuPy, cugemm8, the benchmark stream, the flush buffer and (optionally) the torch peers."""

    def __init__(self, args):
        import cupy as cp
        import cugemm8

        self.cp, self.cg = cp, cugemm8
        self.stream = cp.cuda.Stream(non_blocking=False)
        with self.stream:
            self.flush_buf = cp.empty(FLUSH_BYTES, dtype=cp.uint8)
        self.num_sms = cugemm8.get_num_sms()
        name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
        self.is_anchor_gpu = (name.decode() if isinstance(name, bytes) else str(name)) == ANCHOR_GPU
        self.rng = cp.random.default_rng(SEED)
        self.peers, self.peers_note = (None, "disabled (--no-peers)") if args.no_peers else load_peers(self.stream.ptr)
        self.deepgemm, self.deepgemm_note = load_deepgemm(self.peers)

    def flush(self) -> None:
        self.flush_buf.data.memset_async(0, FLUSH_BYTES)

    def randn(self, shape):
        return self.rng.standard_normal(shape, dtype=self.cp.float32)

    def sync(self) -> None:
        self.stream.synchronize()

    def free(self) -> None:
        self.sync()
        self.cp.get_default_memory_pool().free_all_blocks()
        if self.peers is not None:
            self.peers.torch.cuda.empty_cache()

    def plan(self, layout: str, m: int, n: int, k: int, groups: int) -> dict:
        """The configuration cugemm8's heuristic picks (recorded per row)."""
        try:
            from cugemm8 import heuristics

            plan = heuristics.choose(layout, m, n, k, groups, self.num_sms)
            return {"config": dataclasses.asdict(plan.config), "grid": plan.grid, "num_tiles": plan.num_tiles}
        except Exception as exc:  # the heuristic is someone else's moving target: record, don't die
            return {"config": None, "config_error": f"{type(exc).__name__}: {exc}"}


def bf16_to_f32(cp, x):
    """Exact bfloat16 -> float32 by bit shifting (independent of CuPy's bfloat16 support)."""
    return (x.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32)


def poison_bf16(cp, x) -> None:
    x.view(cp.uint16).fill(0xFFFF)  # NaN: any element the kernel leaves unwritten fails the check


def calc_diff_gpu(cp, pairs) -> float:
    """1 - 2*sum(x*y)/sum(x^2+y^2) in float64 over all (x, y) pairs (cugemm8.reference.calc_diff, on GPU)."""
    xy = sq = 0.0
    for x, y in pairs:
        x, y = x.reshape(-1), y.reshape(-1)
        for i in range(0, x.size, DIFF_CHUNK):
            xs, ys = x[i:i + DIFF_CHUNK].astype(cp.float64), y[i:i + DIFF_CHUNK].astype(cp.float64)
            xy += float((xs * ys).sum())
            sq += float((xs * xs + ys * ys).sum())
    return 1.0 - 2.0 * xy / sq if sq else float("nan")


# ----------------------------------------------------------------------------- torch peers
def _scaling_type(F):
    for owner, name in ((F, "ScalingType"), (F, "_ScalingType")):
        if hasattr(owner, name):
            return getattr(owner, name)
    raise AttributeError("torch.nn.functional has no ScalingType (needs torch >= 2.10)")


def load_peers(stream_ptr: int):
    """(TorchPeers, note): None and the reason when torch or its CUDA is unavailable."""
    try:
        import torch
    except Exception as exc:
        return None, f"torch not importable: {type(exc).__name__}: {exc}"
    try:
        if not torch.cuda.is_available():
            return None, "torch sees no CUDA device"
        return TorchPeers(torch, stream_ptr), f"torch {torch.__version__} (CUDA {torch.version.cuda})"
    except Exception as exc:
        return None, f"torch CUDA setup failed: {type(exc).__name__}: {exc}"


class TorchPeers:
    """cuBLASLt through torch on the benchmark's own stream, on cugemm8's FP8 bytes (zero-copy DLPack)."""

    def __init__(self, torch, stream_ptr: int):
        self.torch = torch
        self.ext = torch.cuda.ExternalStream(stream_ptr)
        with torch.cuda.stream(self.ext):
            self.one = torch.ones((), device="cuda", dtype=torch.float32)

    def _fp8(self, x):
        return self.torch.from_dlpack(x).view(self.torch.float8_e4m3fn)

    def _on_stream(self, fn):
        def run():
            with self.torch.cuda.stream(self.ext):
                return fn()
        return run

    def blockwise(self, a, a_scale, b, b_scale):
        """F.scaled_mm, BlockWise1x128 x BlockWise128x128 (users-and-peers.md §2a layouts)."""
        torch = self.torch
        F = torch.nn.functional
        st = _scaling_type(F)
        with torch.cuda.stream(self.ext):
            ta, tb = self._fp8(a), self._fp8(b)
            sa = torch.from_dlpack(a_scale).t().contiguous().t()            # (M, kb), strides (1, M)
            sb = torch.from_dlpack(b_scale)                                  # (nb, kb) row-major
            sb = F.pad(sb, (0, -sb.shape[1] % 4)).t()                        # (round_up(kb, 4), nb), strides (1, kb4)
        return self._on_stream(lambda: F.scaled_mm(ta, tb.t(), sa, st.BlockWise1x128, sb, st.BlockWise128x128,
                                                   output_dtype=torch.bfloat16))

    def per_tensor(self, a, b):
        """torch._scaled_mm with unit scalar scales: FP8 without fine-grained scaling (the ceiling)."""
        torch = self.torch
        with torch.cuda.stream(self.ext):
            ta, tb = self._fp8(a), self._fp8(b)
        return self._on_stream(lambda: torch._scaled_mm(ta, tb.t(), scale_a=self.one, scale_b=self.one,
                                                        out_dtype=torch.bfloat16))

    def to_cupy_f32(self, cp, y):
        with self.torch.cuda.stream(self.ext):
            return cp.from_dlpack(y.float())


class DeepGemmPeer:
    """DeepGEMM's FP8 GEMMs (the 8dfa329 API) on the benchmark's stream, on cugemm8's FP8 bytes. Scales
    are brought to DeepGEMM's TMA-aligned layout once, outside the timed call (as cugemm8's are), so
    that its own layout check finds nothing to do when timed. Each method returns (call, output)."""

    FUNCTIONS = ("gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
                 "m_grouped_gemm_fp8_fp8_bf16_nt_masked", "get_col_major_tma_aligned_tensor")

    def __init__(self, dg, peers: TorchPeers):
        self.dg, self.peers, self.torch = dg, peers, peers.torch

    def _operands(self, a, a_scale, b, b_scale):
        torch, p = self.torch, self.peers
        with torch.cuda.stream(p.ext):
            sa = self.dg.get_col_major_tma_aligned_tensor(torch.from_dlpack(a_scale).contiguous())
            return (p._fp8(a), sa), (p._fp8(b), torch.from_dlpack(b_scale).contiguous())

    def _out(self, shape):
        with self.torch.cuda.stream(self.peers.ext):
            return self.torch.empty(shape, device="cuda", dtype=self.torch.bfloat16)

    def dense(self, a, a_scale, b, b_scale):
        lhs, rhs = self._operands(a, a_scale, b, b_scale)
        out = self._out((a.shape[0], b.shape[0]))
        return self.peers._on_stream(lambda: self.dg.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)), out

    def contiguous(self, a, a_scale, b, b_scale, m_indices):
        lhs, rhs = self._operands(a, a_scale, b, b_scale)
        idx = self.torch.from_dlpack(m_indices)
        out = self._out((a.shape[0], b.shape[1]))
        return self.peers._on_stream(
            lambda: self.dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, idx)), out

    def masked(self, a, a_scale, b, b_scale, masked_m, expected_m: int):
        lhs, rhs = self._operands(a, a_scale, b, b_scale)
        mm = self.torch.from_dlpack(masked_m)
        out = self._out((a.shape[0], a.shape[1], b.shape[1]))
        return self.peers._on_stream(
            lambda: self.dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, mm, expected_m)), out


def load_deepgemm(peers):
    """(DeepGemmPeer, note); None and the reason when deep_gemm (or torch, which it needs) is unavailable."""
    if peers is None:
        return None, "needs torch"
    try:
        dg = importlib.import_module("deep_gemm")
    except Exception as exc:
        return None, f"deep_gemm not importable: {type(exc).__name__}: {str(exc)[:200]}"
    missing = [f for f in DeepGemmPeer.FUNCTIONS if not hasattr(dg, f)]
    if missing:
        return None, f"deep_gemm at {getattr(dg, '__file__', '?')} lacks the 8dfa329 API ({', '.join(missing)})"
    return DeepGemmPeer(dg, peers), f"deep_gemm from {os.path.dirname(getattr(dg, '__file__', '?'))}"


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


# ----------------------------------------------------------------------------- checking and timing
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


def time_interleaved(env: Env, fns: dict, reps: int) -> dict[str, list[float]]:
    """Seconds per call: flush, event, call, event; the implementations alternate within every rep.
    Starts from an idle GPU (SETTLE_S)."""
    cp = env.cp
    env.sync()
    time.sleep(SETTLE_S)
    for fn in fns.values():
        for _ in range(WARMUP_CALLS):
            fn()
    events = {name: (cp.cuda.Event(), cp.cuda.Event()) for name in fns}
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start, end = events[name]
            env.flush()
            start.record()
            fn()
            end.record()
        env.sync()
        for name, (start, end) in events.items():
            times[name].append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
    return times


def time_alone(env: Env, fns: dict, reps: int) -> dict[str, list[float]]:
    """The anchors' grouped protocol: each implementation timed with nothing else running, from an idle GPU
    (DeepGEMM's grouped anchors were measured alone). The interleaved loop runs two or three heavy kernels
    per rep, which reaches the power cap's lower clock step sooner than one kernel alone does. Every
    implementation gets two blocks of reps, in forward then reverse order, so neither always goes first."""
    times = {name: [] for name in fns}
    for name in list(fns) + list(reversed(fns)):
        times[name] += time_interleaved(env, {name: fns[name]}, reps)[name]
    return times


def measure(env: Env, cands: list[Candidate], reps: int, flops: int, nbytes: int, alone=()) -> dict:
    """Times the candidates that pass their check, alternating call by call; then the ones named in `alone`
    once more, each by itself (time_alone): `alone_median_s` and `alone_samples_s`."""
    entries, timed = check_candidates(env, cands)
    for name, samples in time_interleaved(env, timed, reps).items():
        t = statistics.median(samples)
        entries[name].update(median_s=t, min_s=min(samples), max_s=max(samples), tflops=flops / t * 1e-12,
                             gbps=nbytes / t * 1e-9, samples_s=samples)
    solo = {name: timed[name] for name in alone if name in timed}
    for name, samples in time_alone(env, solo, reps).items():
        entries[name].update(alone_median_s=statistics.median(samples), alone_samples_s=samples)
    return entries


def alone_row(row: dict, entries: dict, cg_name: str, dg_name: str, flops: int) -> None:
    """row["alone"]: cugemm8 and DeepGEMM timed alone, the way the H200 anchors were (time_alone)."""
    t_cg = entries.get(cg_name, {}).get("alone_median_s")
    t_dg = entries.get(dg_name, {}).get("alone_median_s")
    if t_cg is None:
        return
    anchor = row.get("deepgemm_h200_tflops")
    tf_cg, tf_dg = flops / t_cg * 1e-12, t_dg and flops / t_dg * 1e-12
    row["alone"] = {"cugemm8_tflops": tf_cg, "deepgemm_tflops": tf_dg,
                    "cugemm8_over_anchor": ratio(tf_cg, anchor), "deepgemm_over_anchor": ratio(tf_dg, anchor),
                    "deepgemm_over_cugemm8_time": ratio(t_dg, t_cg)}


# ----------------------------------------------------------------------------- inputs
def quantize_a(env: Env, x):
    """(q, row-major scale, pre-aligned scale, layout name) for activations [..., K]."""
    lead, k = x.shape[:-1], x.shape[-1]
    q, s = env.cg.per_token_cast_to_fp8(x.reshape(-1, k))
    q, s = q.reshape(*lead, k), s.reshape(*lead, s.shape[-1])
    try:
        return q, s, env.cg.get_col_major_tma_aligned_tensor(s), "tma-aligned"
    except Exception:
        return q, s, s, "row-major (get_col_major_tma_aligned_tensor refused this shape)"


def quantize_b(env: Env, w):
    """(q, scale) for weights [N, K] or [G, N, K], one group at a time."""
    if w.ndim == 2:
        return env.cg.per_block_cast_to_fp8(w)
    parts = [env.cg.per_block_cast_to_fp8(w[g]) for g in range(w.shape[0])]
    return env.cp.stack([p[0] for p in parts]), env.cp.stack([p[1] for p in parts])


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


def bench_dense_shape(env: Env, shape: Shape, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    m, n, k = shape.m, shape.n, shape.k
    row = {**base_row(shape), **env.plan("normal", m, n, k, 1)}
    x, w = env.randn((m, k)), env.randn((n, k))
    a, sa, sa_tma, row["a_scale_layout"] = quantize_a(env, x)
    b, sb = quantize_b(env, w)
    ref = x @ w.T
    del x, w

    def diff_of(y):
        return calc_diff_gpu(cp, [(y, ref)])

    cands = [cugemm8_candidate(env, lambda **kw: cg.matmul(a, sa_tma, b, sb, **kw), diff_of)]
    cands += peer_candidates(env, a, sa, b, sb, diff_of)
    cands += deepgemm_candidate(env, "deepgemm", lambda dg: dg.dense(a, sa, b, sb), diff_of)
    entries = measure(env, cands, reps, gemm_flops(m, n, k), gemm_bytes(m, n, k))
    return finish_row(row, entries)


def bench_contiguous_shape(env: Env, shape: Shape, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    g, m, n, k = shape.groups, shape.m, shape.n, shape.k
    align = cg.get_m_alignment_for_contiguous_layout()
    idx, seg = contiguous_m_indices(g, m, align)
    row = {**base_row(shape), **env.plan("contiguous", g * seg, n, k, g), "segment_rows": seg, "valid_rows": g * m}
    x, w = env.randn((g * seg, k)), env.randn((g, n, k))
    a, sa, sa_tma, row["a_scale_layout"] = quantize_a(env, x)
    b, sb = quantize_b(env, w)
    refs = [x[i * seg:i * seg + m] @ w[i].T for i in range(g)]
    del x, w
    m_indices = cp.asarray(idx)

    def diff_of(y):
        return calc_diff_gpu(cp, [(y[i * seg:i * seg + m], refs[i]) for i in range(g)])

    call = lambda **kw: cg.m_grouped_matmul_contiguous(a, sa_tma, b, sb, m_indices, **kw)  # noqa: E731
    # The dense kernel on the same total M, N, K (all rows against expert 0's weights), timed alongside.
    dense_out = cp.empty((g * seg, n), dtype=cg.api.BF16)
    dense = Candidate("dense_same_mnk", lambda: cg.matmul(a, sa_tma, b[0], sb[0], out=dense_out), lambda: None)
    dg = deepgemm_candidate(env, "deepgemm", lambda dg: dg.contiguous(a, sa, b, sb, m_indices), diff_of)
    flops = gemm_flops(g * m, n, k)
    entries = measure(env, [cugemm8_candidate(env, call, diff_of), dense] + dg, reps,
                      flops, gemm_bytes(g * m, n, k, g), alone=("cugemm8", "deepgemm"))
    row = finish_row(row, entries)
    alone_row(row, entries, "cugemm8", "deepgemm", flops)
    row["dense_time_over_contiguous"] = ratio(entries.get("dense_same_mnk", {}).get("median_s"),
                                              entries.get("cugemm8", {}).get("median_s"))
    return row


def bench_masked_shape(env: Env, shape: Shape, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    g, n, k = shape.groups, shape.n, shape.k
    mm = draw_masked_m(g, shape.m)
    valid = int(mm.sum())
    row = {**base_row(shape), **env.plan("masked", shape.m, n, k, g), "max_m": MASKED_MAX_M,
           "masked_m": mm.tolist(), "valid_rows": valid}
    x, w = env.randn((g, MASKED_MAX_M, k)), env.randn((g, n, k))
    a, sa, sa_tma, row["a_scale_layout"] = quantize_a(env, x)
    b, sb = quantize_b(env, w)
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


# ----------------------------------------------------------------------------- host overhead
def back_to_back(env: Env, fn, calls: int) -> dict:
    """Wall time per call of `calls` calls with no sync inside (one at the end); median of a few trials
    (host timings on a shared machine are noisy), then the host's own cost."""
    for _ in range(OVERHEAD_WARMUP):
        fn()
    env.sync()
    walls, enqueues = [], []
    for _ in range(OVERHEAD_TRIALS):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        env.sync()
        walls.append((time.perf_counter() - t0) / calls * 1e6)
        enqueues.append((t1 - t0) / calls * 1e6)
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
    cp, cg = env.cp, env.cg
    m, n, k = OVERHEAD_SHAPE
    a, sa, sa_tma, _ = quantize_a(env, env.randn((m, k)))
    b, sb = quantize_b(env, env.randn((n, k)))
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
    rows = {}
    for name, fn in variants.items():
        try:
            rows[name] = back_to_back(env, fn, OVERHEAD_CALLS)
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


# ----------------------------------------------------------------------------- JIT
# NVRTC 13 keeps its own compile cache (the CUDA compute cache, ~/.nv/ComputeCache): a source compiled
# before, in any process, compiles ~7x faster. Cold numbers therefore come from child processes run with
# CUDA_CACHE_DISABLE=1 and an empty CUDA_CACHE_PATH.
COMPILE_SCRIPT = r"""
import dataclasses, json, sys, time
from cugemm8 import heuristics, kernels
jit = getattr(kernels, "jit", None) or __import__("cugemm8.jit", fromlist=["jit"])
shapes, sms = json.loads(sys.argv[1]), int(sys.argv[2])
t = time.perf_counter()
jit.compile_cubin('extern "C" __global__ void cugemm8_bench_empty() {}')
init = time.perf_counter() - t
configs = {}
for label, m, n, k in shapes:
    configs.setdefault(heuristics.choose("normal", m, n, k, 1, sms).config, []).append(label)
rows = []
for cfg, labels in configs.items():
    row = {"config": dataclasses.asdict(cfg), "shapes": labels}
    try:
        t = time.perf_counter()
        cubin = jit.compile_cubin(kernels.render(cfg))
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
    """Run `script` in a fresh interpreter that imports this cugemm8, with cugemm8's disk cache in
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


# ----------------------------------------------------------------------------- printing
def config_text(row: dict) -> str:
    c = row.get("config")
    if not c:
        return "?"
    return f"{c['block_m']}x{c['block_n']} s{c['stages']} w{c['num_math_wg']}"


def row_label(row: dict) -> str:
    return Shape(row["kind"], row["groups"], row["m"], row["n"], row["k"]).label


def status_text(entry: dict) -> str:
    status = entry.get("status", "-")
    return "" if status == "ok" else (" WRONG" if status == "wrong" else f" {status}")


def print_table(section: str, rows: list[dict], env: Env) -> None:
    dense = section == "dense"
    print(f"\n== {section} (median of flushed, event-timed calls; ratio = peer time / cugemm8 time) ==")
    head = f"{'shape':>22s} {'config':>15s} {'diff':>8s} {'µs':>8s} {'TFLOPS':>7s} {'GB/s':>7s}"
    if dense:
        head += f" | {'blk µs':>7s} {'blk/cg':>6s} | {'pt µs':>7s} {'pt/cg':>6s}"
    print(head + f" | {'DG-H200':>7s} {'cg/DG':>6s}")
    for row in rows:
        print(row_text(row, dense))
    if dense and env.peers is None:
        print(f"peers: {env.peers_note}")
    print("DG-H200: DeepGEMM TFLOPS measured on an NVIDIA H200 (shared/reference/anchors); cg/DG = cugemm8 "
          "TFLOPS / that, meaningful only when this GPU is an H200" + ("" if env.is_anchor_gpu else " (it is not)"))


def row_text(row: dict, dense: bool) -> str:
    label = row_label(row)
    if "error" in row:
        return f"{label:>22s} error: {row['error']}"
    res = row["results"]
    cg = res.get("cugemm8", {})
    us = lambda e: e.get("median_s") and e["median_s"] * 1e6  # noqa: E731
    line = (f"{label:>22s} {config_text(row):>15s} {fmt(cg.get('diff'), '.1e', 8)} {fmt(us(cg), '.1f', 8)}"
            f" {fmt(cg.get('tflops'), '.0f')} {fmt(cg.get('gbps'), '.0f')}")
    if dense:
        bw, pt = res.get("cublaslt_blockwise", {}), res.get("cublaslt_per_tensor", {})
        line += (f" | {fmt(us(bw), '.1f')} {fmt(row['ratio_blockwise'], '.2f', 6)}"
                 f" | {fmt(us(pt), '.1f')} {fmt(row['ratio_per_tensor'], '.2f', 6)}")
    line += f" | {fmt(row['deepgemm_h200_tflops'], '.0f')} {fmt(row['vs_deepgemm_h200'], '.2f', 6)}"
    if row.get("ratio_deepgemm") is not None:
        line += f" | DeepGEMM {fmt(us(res['deepgemm']), '.1f')} µs, DG/cg {row['ratio_deepgemm']:.2f}"
    if row.get("dense_time_over_contiguous") is not None:
        line += f" | dense same MNK {fmt(us(res['dense_same_mnk']), '.1f')} µs, contiguous/dense TFLOPS " \
                f"{row['dense_time_over_contiguous']:.2f}"
    if row.get("masked_one_group_over_dense") is not None:
        line += f" | one group ({row['one_group_rows']} rows): masked {fmt(us(res['masked_one_group']), '.1f')} µs " \
                f"/ dense {fmt(us(res['dense_one_group']), '.1f')} µs = {row['masked_one_group_over_dense']:.2f}"
    if row.get("vs_deepgemm_h200_at_anchor_rows") is not None:
        line += f" | at DG's {sum(row['anchor_masked_m'])} rows: {row['tflops_at_anchor_rows']:.0f} TFLOPS, " \
                f"cg/DG {row['vs_deepgemm_h200_at_anchor_rows']:.2f}"
        if row.get("ratio_deepgemm_at_anchor_rows") is not None:
            line += f", DeepGEMM same run {fmt(us(res['deepgemm_at_anchor_rows']), '.1f')} µs, " \
                    f"DG/cg {row['ratio_deepgemm_at_anchor_rows']:.2f}"
    a = row.get("alone")
    if a:
        line += f" | alone (as the anchors): {a['cugemm8_tflops']:.0f} TFLOPS, cg/DG-H200 {fmt(a['cugemm8_over_anchor'], '.2f', 0)}"
        if a["deepgemm_tflops"]:
            line += (f"; DeepGEMM alone {a['deepgemm_tflops']:.0f} TFLOPS = {a['deepgemm_over_anchor']:.2f} of its"
                     f" anchor, DG/cg {a['deepgemm_over_cugemm8_time']:.2f}")
    notes = [f"{name}:{status_text(e)}" for name, e in res.items() if status_text(e) and name not in
             ("dense_same_mnk", "masked_one_group", "dense_one_group", "masked_at_anchor_rows",
              "deepgemm_at_anchor_rows")]
    return line + ("  " + "; ".join(notes) if notes else "")


def print_jit(compiled: dict, cold: dict, warm: dict) -> None:
    print("\n== JIT: cold NVRTC compile per configuration (compile_cubin(render(cfg)) in a new process, "
          "CUDA compute cache off, no SASS patch) ==")
    if "error" in compiled:
        print(f"error: {compiled['error']}")
    else:
        print(f"NVRTC start-up (first, empty kernel): {compiled['nvrtc_init_s']:.2f} s")
    for r in compiled.get("compiles", []):
        c = r["config"]
        name = f"{c['block_m']}x{c['block_n']} s{c['stages']} n{c['n']} k{c['k']}"
        print(f"{name:28s} " + (f"{r['compile_s']:.2f} s  {r['cubin_bytes']} B  ({', '.join(r['shapes'])})"
                                if "compile_s" in r else f"error: {r.get('error')}"))
    for what, r in (("empty cache", cold), ("warm disk cache", warm)):
        if "error" in r:
            print(f"first call, new process, {what}: error: {r['error']}")
        else:
            print(f"first call, new process, {what}: {r['first_call_s'] * 1e3:.1f} ms "
                  f"(second call {r['second_call_s'] * 1e3:.2f} ms, import {r['import_s'] * 1e3:.0f} ms)")


def table_summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if "results" in r]
    bw = [r["ratio_blockwise"] for r in ok if r["ratio_blockwise"]]
    pt = [r["ratio_per_tensor"] for r in ok if r["ratio_per_tensor"]]
    dg = [r["vs_deepgemm_h200"] for r in ok if r["vs_deepgemm_h200"]]
    dg_rows = [r["vs_deepgemm_h200_at_anchor_rows"] for r in ok if r.get("vs_deepgemm_h200_at_anchor_rows")]
    live = [r["ratio_deepgemm"] for r in ok if r.get("ratio_deepgemm")]
    slowest = min((r for r in ok if r.get("ratio_deepgemm")), key=lambda r: r["ratio_deepgemm"], default=None)
    worst = min((r for r in ok if r["ratio_blockwise"]), key=lambda r: r["ratio_blockwise"], default=None)
    alone = [r["alone"] for r in ok if r.get("alone")]
    worst_alone = min((r for r in ok if r.get("alone") and r["alone"]["cugemm8_over_anchor"]),
                      key=lambda r: r["alone"]["cugemm8_over_anchor"], default=None)
    bad = [row_label(r) for r in rows if "error" in r or r.get("results", {}).get("cugemm8", {}).get("status") != "ok"]
    return {"geomean_blockwise_over_cugemm8": geomean(bw), "geomean_per_tensor_over_cugemm8": geomean(pt),
            "min_blockwise_over_cugemm8": worst and worst["ratio_blockwise"],
            "min_blockwise_shape": worst and row_label(worst),
            "geomean_cugemm8_over_deepgemm_h200": geomean(dg), "rows_compared": len(bw),
            "geomean_cugemm8_over_deepgemm_h200_at_anchor_rows": geomean(dg_rows),
            "geomean_deepgemm_over_cugemm8": geomean(live), "rows_compared_deepgemm": len(live),
            "min_deepgemm_over_cugemm8": slowest and slowest["ratio_deepgemm"],
            "min_deepgemm_shape": slowest and row_label(slowest),
            "geomean_alone_cugemm8_over_deepgemm_h200": geomean(a["cugemm8_over_anchor"] for a in alone),
            "min_alone_cugemm8_over_deepgemm_h200": worst_alone and worst_alone["alone"]["cugemm8_over_anchor"],
            "min_alone_shape": worst_alone and row_label(worst_alone),
            "geomean_alone_deepgemm_over_deepgemm_h200": geomean(a["deepgemm_over_anchor"] for a in alone),
            "geomean_alone_deepgemm_over_cugemm8": geomean(a["deepgemm_over_cugemm8_time"] for a in alone),
            "cugemm8_not_ok": bad}


def print_summary(results: dict, info: dict, json_path: Path) -> None:
    print(f"\n== summary: {info.get('gpu')} ({info.get('sms')} SMs), reps={info['reps']} ==")
    on_anchor_gpu = info.get("gpu") == ANCHOR_GPU
    for section in ("dense", "contiguous", "masked"):
        res = results.get(section)
        if res is None:
            continue
        s = res.get("summary")
        if s is None:
            print(f"{section}: " + (res.get("skipped") and f"skipped: {res['skipped']}" or f"error: {res.get('error')}"))
            continue
        line = f"{section}:"
        if section == "dense":
            line += (f" cuBLASLt-blockwise/cugemm8 geomean {fmt(s['geomean_blockwise_over_cugemm8'], '.2f', 0)}x"
                     f" (min {fmt(s['min_blockwise_over_cugemm8'], '.2f', 0)}x at {s['min_blockwise_shape']}),"
                     f" per-tensor/cugemm8 geomean {fmt(s['geomean_per_tensor_over_cugemm8'], '.2f', 0)}x,")
        line += (f" cugemm8/DeepGEMM-H200-anchor geomean {fmt(s['geomean_cugemm8_over_deepgemm_h200'], '.2f', 0)}x"
                 + ("" if on_anchor_gpu else " (anchor is an H200: meaningful only on an H200)"))
        if s.get("geomean_cugemm8_over_deepgemm_h200_at_anchor_rows"):
            line += f"; at DeepGEMM's valid rows {s['geomean_cugemm8_over_deepgemm_h200_at_anchor_rows']:.2f}x"
        if s.get("geomean_deepgemm_over_cugemm8"):
            line += (f"; DeepGEMM (same run)/cugemm8 time geomean {s['geomean_deepgemm_over_cugemm8']:.2f}x"
                     f" (min {s['min_deepgemm_over_cugemm8']:.2f}x at {s['min_deepgemm_shape']})")
        if s.get("geomean_alone_cugemm8_over_deepgemm_h200"):
            line += (f"; timed alone as the anchors were: cugemm8/DeepGEMM-H200-anchor geomean"
                     f" {s['geomean_alone_cugemm8_over_deepgemm_h200']:.2f}x (min {s['min_alone_cugemm8_over_deepgemm_h200']:.2f}x"
                     f" at {s['min_alone_shape']}), DeepGEMM alone/its anchor "
                     f"{fmt(s['geomean_alone_deepgemm_over_deepgemm_h200'], '.2f', 0)}x")
        if s["cugemm8_not_ok"]:
            line += f"; cugemm8 wrong/error on {', '.join(s['cugemm8_not_ok'])}"
        print(line)
    ov = results.get("overhead", {}).get("rows")
    if ov:
        print(f"overhead µs/call (wall, {OVERHEAD_CALLS} back-to-back calls): "
              + ", ".join(f"{k} {fmt(v.get('wall_us'), '.1f', 0)}" for k, v in ov.items()))
    js = results.get("jit", {}).get("summary")
    if js:
        print(f"jit: compile {fmt(js['compile_mean_s'], '.2f', 0)} s/config mean (max "
              f"{fmt(js['compile_max_s'], '.2f', 0)} s, {js['compiled']}/{js['configs']} configs, NVRTC start-up "
              f"{fmt(js['nvrtc_init_s'], '.2f', 0)} s); first call in a new process: warm cache "
              f"{fmt(js['first_call_warm_cache_ms'], '.1f', 0)} ms, empty cache "
              f"{fmt(js['first_call_cold_cache_ms'], '.0f', 0)} ms")
    print(f"json: {json_path}")


# ----------------------------------------------------------------------------- run info, JSON, chart
def nvidia_smi(query: str) -> list[dict] | None:
    try:
        proc = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in proc.stdout.strip().splitlines() if line.strip()]
    if proc.returncode != 0 or len(lines) < 2:
        return None
    keys = [h.strip() for h in lines[0].split(",")]
    return [dict(zip(keys, (v.strip() for v in line.split(",")))) for line in lines[1:]]


SMI_CLOCKS = "name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu"


def package_version(name: str) -> str | None:
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:
        return None


def git_info() -> dict | None:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "dirty_files": len(dirty.stdout.splitlines())}


def run_info(env: Env, args) -> dict:
    cp = env.cp
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    info = {"gpu": name, "sms": props["multiProcessorCount"], "cugemm8_num_sms": env.num_sms,
            "compute_capability": f"{props['major']}.{props['minor']}", "l2_bytes": props.get("l2CacheSize"),
            "memory_bytes": props.get("totalGlobalMem"), "device": dev.id,
            "driver_api_version": cp.cuda.runtime.driverGetVersion(),
            "cuda_runtime_version": cp.cuda.runtime.runtimeGetVersion(),
            "utc_start": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "reps": args.reps, "quick": args.quick, "sections": args.sections, "peers": env.peers_note,
            "deepgemm": env.deepgemm_note,
            "protocol": {"flush_bytes": FLUSH_BYTES, "statistic": "median", "diff_limit": DIFF_LIMIT,
                         "warmup_calls": WARMUP_CALLS, "settle_s": SETTLE_S, "seed": SEED,
                         "alone": "grouped shapes: cugemm8 and DeepGEMM also timed each by itself "
                                  "(time_alone), as the anchors were",
                         "timer": "CUDA events around one call",
                         "cugemm8_call": "pre-aligned a_scale (get_col_major_tma_aligned_tensor), out= preallocated"},
            "anchors": {"gpu": ANCHOR_GPU, "source": "shared/reference/anchors/h200-2026-11-22.json"},
            "smi_driver": nvidia_smi("driver_version"), "git": git_info()}
    info["versions"] = versions(env)
    return info


def versions(env: Env) -> dict:
    out = {"python": platform.python_version(), "numpy": np.__version__, "cupy": env.cp.__version__,
           "cuda_bindings": package_version("cuda-bindings"), "ml_dtypes": package_version("ml_dtypes"),
           "cugemm8": getattr(env.cg, "__version__", None)}
    try:
        out["nvrtc"] = ".".join(map(str, importlib.import_module("cugemm8.jit").nvrtc_version()))
    except Exception as exc:
        out["nvrtc"] = f"unknown ({exc})"
    if env.peers is not None:
        torch = env.peers.torch
        out.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
    return out


def loaded_cublaslt_version() -> int | None:
    """cublasLtGetVersion() of the libcublasLt this process has loaded (torch's), if any."""
    try:
        import ctypes

        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "libcublasLt" in line})
        if not paths:
            return None
        lib = ctypes.CDLL(paths[0])
        lib.cublasLtGetVersion.restype = ctypes.c_size_t
        return int(lib.cublasLtGetVersion())
    except Exception:
        return None


def write_json(path: Path, info: dict, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"info": info, "results": results}, indent=1, default=str))
    os.replace(tmp, path)


CHART_SERIES = (("cugemm8", "cugemm8"), ("cublaslt_blockwise", "cuBLASLt blockwise"),
                ("cublaslt_per_tensor", "cuBLASLt per-tensor"), ("deepgemm_h200", "DeepGEMM (H200 anchor)"))


def chart_values(row: dict, key: str) -> float:
    if key == "deepgemm_h200":
        return row.get("deepgemm_h200_tflops") or 0.0
    e = row.get("results", {}).get(key, {})
    return (e.get("tflops") or 0.0) if e.get("status") == "ok" else 0.0


def write_chart(path: Path, results: dict, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"matplotlib unavailable: {exc}"
    rows = [r for s in ("dense", "contiguous", "masked") for r in results.get(s, {}).get("rows", [])]
    if not rows:
        return "no rows"
    labels = [row_label(r) for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, 0.75 * len(rows)), 5))
    width = 0.8 / len(CHART_SERIES)
    for i, (key, name) in enumerate(CHART_SERIES):
        xs = [j + (i - (len(CHART_SERIES) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [chart_values(r, key) for r in rows], width, label=name, hatch="//" if i == 3 else None)
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("TFLOPS (2MNK / median time)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# ----------------------------------------------------------------------------- main
RUNNERS = {"dense": run_dense, "contiguous": run_contiguous, "masked": run_masked,
           "overhead": run_overhead, "jit": run_jit}


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        env = Env(args)
    except Exception as exc:
        print(f"cugemm8 bench: cannot start on a GPU: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.reps < 30:
        print(f"note: --reps {args.reps} is below the protocol's 30 (DESIGN.md §6)")
    info = run_info(env, args)
    info["smi_before"] = nvidia_smi(SMI_CLOCKS)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    json_path = Path(args.out) / f"{slug(info['gpu'])}-{stamp}.json"
    print(f"cugemm8 bench on {info['gpu']} ({info['sms']} SMs); peers: {env.peers_note}; DeepGEMM: {env.deepgemm_note}")
    results = {}
    with env.stream:
        for section in args.sections:
            try:
                results[section] = RUNNERS[section](env, args)
            except Exception as exc:
                results[section] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
                print(f"\n== {section} ==\nerror: {results[section]['error']}")
            write_json(json_path, info, results)   # keep what we have if a later section dies
    info["smi_after"] = nvidia_smi(SMI_CLOCKS)
    info["versions"]["cublaslt_loaded"] = loaded_cublaslt_version()
    info["utc_end"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    chart = json_path.with_suffix(".png")
    info["chart"] = write_chart(chart, results, f"cugemm8 vs peers, {info['gpu']}, {stamp}") or str(chart)
    write_json(json_path, info, results)
    print_summary(results, info, json_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Configuration sweeps on the GPU, for setting the heuristic from measurements (not a test, not the
benchmark): every candidate configuration of each shape is built up front (worker processes fill the JIT's
disk cache), checked once, and timed by the protocol (protocol.py; median of --reps, no settling between
configurations). This module holds the parts both sweeps share and the dense sweep:

    python -m benchmarks.tune [--shapes dense|small|large|decode|prefill] [--reps 10] [--out FILE] [--raster 8,16]

The grouped sweep is benchmarks/tune_grouped.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import multiprocessing
import os
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor

from . import library
from .report import git_info, package_version
from .shapes import DENSE_NK, DENSE_SHAPES

RTOL, ATOL = 2e-2, 1e-2
DENSE = [(s.m, s.n, s.k) for s in DENSE_SHAPES]
# Decode-sized M over DeepGEMM's (N, K) pairs and narrow N: the split-K sweep.
DECODE_M = (1, 2, 4, 8, 16, 32, 64, 128)
NARROW_NK = ((256, 4096), (512, 7168), (1024, 7168))
DECODE = [(m, n, k) for n, k in DENSE_NK for m in DECODE_M] + [(m, n, k) for n, k in NARROW_NK for m in (1, 16, 64, 128)]
# Prefill-sized M (issue 22's dense table, and M = 4096 of the seed table): 128- and 256-row tiles only.
PREFILL = [(m, n, k) for m in (2048, 4096, 8192, 16384) for n, k in DENSE_NK]
PREFILL_BLOCK_N = (64, 96, 112, 128, 144, 160, 192)


def _cache_disabled() -> bool:
    """CUGEMM8_JIT_DISABLE_CACHE, read by the package's rule (0, false, no, off: off); imported here, not at the top,
    so that importing this module needs no CuPy."""
    from cugemm8 import envvars

    return envvars.flag(envvars.JIT_DISABLE_CACHE)


# ----------------------------------------------------------------------------- shared: compiling
def _compile_one(fields: dict) -> str | None:
    """Build one configuration as the launch path would (fills the disk cache); the error text or None."""
    lib = library.current()
    try:
        lib.build(lib.config(fields))
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:2000]}"


def _ensure_disk_cache() -> str | None:
    """Worker processes hand their cubins over through the disk cache: make sure it is writable (else
    point CUGEMM8_CACHE_DIR at a temporary folder, inherited by the workers). The folder used if changed."""
    where = library.current().cache_dir()
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where):
            pass
        return None
    except OSError:
        tmp = tempfile.mkdtemp(prefix="cugemm8-tune-")
        os.environ["CUGEMM8_CACHE_DIR"] = tmp
        return tmp


def compile_all(cfgs, jobs: int) -> dict:
    """Build every configuration (in `jobs` worker processes: the JIT compiles one source at a time per
    process; falling back to this process); returns the compile errors by configuration."""
    todo = sorted(set(cfgs), key=repr)
    errors, results = {}, {}
    if jobs > 1 and len(todo) > 1 and not _cache_disabled():
        moved = _ensure_disk_cache()
        if moved:
            print(f"JIT cache directory not writable: using {moved}", flush=True)
        try:
            ctx = multiprocessing.get_context("spawn")   # the parent may already hold a CUDA context
            with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx) as pool:
                results = dict(zip(todo, pool.map(_compile_one, [dataclasses.asdict(c) for c in todo])))
        except Exception as exc:   # a worker died (or no processes here): compile the rest in-process
            print(f"compile pool failed ({type(exc).__name__}: {exc}); compiling in this process", flush=True)
    for cfg in todo:
        err = results.get(cfg) or _compile_one(dataclasses.asdict(cfg))   # a worker's cubin loads from disk
        if err is not None:
            errors[cfg] = err
    return errors


# ----------------------------------------------------------------------------- shared: timing and output
class SweepTimer:
    """The protocol for sweeps: median of `reps` flushed, event-timed calls, in µs; no settling or warm-up
    per configuration (each is called once for its check just before)."""

    def __init__(self, reps: int):
        from .protocol import Timer

        self.reps = reps
        self.timer = Timer(settle_s=0.0, warmup=0)

    def __call__(self, fn) -> float:
        return self.timer.median(fn, self.reps) * 1e6

    def one(self, fn) -> float:
        return self.timer.one(fn) * 1e6


def provenance() -> dict:
    """What a sweep's JSON needs to be read later: when, the driver and CUDA versions, the libraries, the
    commit."""
    import cupy

    return {"utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "driver_api_version": cupy.cuda.runtime.driverGetVersion(),
            "cuda_runtime_version": cupy.cuda.runtime.runtimeGetVersion(),
            "nvrtc": ".".join(map(str, library.current().nvrtc_version())), "cupy": cupy.__version__,
            "cuda_bindings": package_version("cuda-bindings"), "git": git_info()}


def provenance_line() -> str:
    """One line for a probe's log, so that its numbers can be read later without a JSON: the GPU, when, the
    versions and the commit."""
    import cupy

    prov, gpu = provenance(), gpu_props()
    return (f"{gpu['name']} ({gpu['num_sms']} SMs), {prov['utc']}, driver {prov['driver_api_version']}, NVRTC "
            f"{prov['nvrtc']}, cupy {cupy.__version__}; {prov['git']}")


def write(path: str | None, doc: dict) -> None:
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, path)


def gpu_props() -> dict:
    import cupy

    return library.current().device_properties(cupy.cuda.runtime.getDevice())


# ----------------------------------------------------------------------------- the dense sweep
def dense_candidates(m: int, n: int, k: int, rasters=(None,)) -> list:
    """Every tile (BLOCK_M 64/128/256 with the heuristic's BLOCK_N candidates, multiples of 16 or the odd
    multiples of 8 up to 120) with >= 2 stages, single CTAs and (M >= 512, even n-blocks) pairs; with several
    `rasters`, only the heuristic's tile at each band width, single and paired."""
    lib = library.current()
    if len(rasters) > 1:
        base = lib.choose("normal", m, n, k, 1, 132).config
        return [dataclasses.replace(base, raster_group=r, cluster=c) for r in rasters for c in (1, 2)
                if c == 1 or base.num_n_blocks % 2 == 0]
    out = []
    for bm in (64, 128, 256):
        if bm > 64 and m <= 64:
            continue
        for bn in lib.block_n_candidates(bm):
            if bn % 16 and bn not in (24, 40, 56, 72, 88, 104, 120):
                continue
            if lib.make_config("normal", n, k, 1, bm, bn).stages < 2:
                continue
            for cluster in (1, 2):
                if cluster == 2 and (m < 512 or -(-n // bn) % 2):
                    continue
                out.append(lib.make_config("normal", n, k, 1, bm, bn, cluster=cluster))
    return out


def prefill_candidates(layout: str, n: int, k: int, groups: int = 1, block_ns=PREFILL_BLOCK_N,
                       pair_block_ns=PREFILL_BLOCK_N, share_b_block_ns=()) -> list:
    """Prefill sweeps (dense, and tune_grouped's uneven experts): 128- and 256-row tiles at `block_ns` widths, single
    CTAs and, at `pair_block_ns` widths with even n-blocks, pairs sharing A by TMA multicast, and at 128-row
    `share_b_block_ns` widths (contiguous) pairs sharing B; >= 3 stages (the tiles the large-M rules can reach). 256 in
    `block_ns`: also 128x256 in column halves, where the package has them (heuristics.can_halve)."""
    lib = library.current()
    can_halve = getattr(lib.heuristics, "can_halve", lambda *_: False)
    out = []
    for bm in (128, 256):
        halves = [256] if bm == 128 and 256 in block_ns and can_halve(layout, 128, 256, "bfloat16") else []
        for bn in [bn for bn in lib.block_n_candidates(bm) if bn in block_ns] + halves:
            for cluster in (1, 2) if bn in pair_block_ns and -(-n // bn) % 2 == 0 else (1,):
                cfg = lib.make_config(layout, n, k, groups, bm, bn, cluster=cluster)
                if cfg.stages >= 3:
                    out.append(cfg)
            if bm == 128 and bn in share_b_block_ns:
                cfg = lib.make_config(layout, n, k, groups, bm, bn, cluster=2, share_b=True)
                if cfg.stages >= 3:
                    out.append(cfg)
    return out


def tile_rates(results: list, sms: int = 132) -> dict:
    """Each single-CTA tile's rate over a prefill sweep (this module's dense one, or tune_grouped's uneven experts):
    the median over the shapes of the TFLOPS its tiles sustain when every wave is full, waves x sms x BLOCK_M x
    BLOCK_N x 2 x 128 x k-blocks / time. heuristics.TILE_RATES and CONTIGUOUS_TILE_RATES are this, rounded."""
    per_tile: dict = {}
    for r in results:
        m, kb = r.get("total_m", r.get("m")), -(-r["k"] // 128)
        for x in r["rows"]:
            if x.get("cluster", 1) != 1 or not x["ok"]:
                continue
            bm, bn = x["block_m"], x["block_n"]
            waves = -(-(-(-m // bm) * -(-r["n"] // bn)) // sms)
            per_tile.setdefault((bm, bn), []).append(waves * sms * bm * bn * 256 * kb / (x["us"] * 1e6))
    return {tile: statistics.median(v) for tile, v in sorted(per_tile.items())}


def decode_candidates(m: int, n: int, k: int) -> list:
    """Decode sweep: 64-row tiles (and 128 at M > 64) at every BLOCK_N candidate, each with every split K the
    decode model weighs (1, 2, 4, 8; the kernel takes 3, 5, 6 and 7 too, which only e4m3's rule was swept for:
    NOTES.md v44), with >= 2 stages."""
    lib = library.current()
    out = []
    for bm in (64, 128) if m > 64 else (64,):
        for bn in lib.block_n_candidates(bm):
            for split in (1, 2, 4, 8):
                if not lib.heuristics.can_split_k(bn, k, split):
                    continue
                cfg = lib.make_config("normal", n, k, 1, bm, bn, split_k=split)
                if cfg.stages >= 2:
                    out.append(cfg)
    return out


def dense_inputs(m: int, n: int, k: int, rng=None) -> tuple:
    """(a, a_scale in the kernel's layout, b, b_scale): random-normal operands quantized on the GPU (the
    sweeps' and A/B tools' inputs; rng defaults to a fresh one seeded 0)."""
    import cupy

    import cugemm8

    rng = cupy.random.default_rng(0) if rng is None else rng
    a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cupy.float32))
    b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32))
    return a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb


def dense_shape(m, n, k, cands, timer: SweepTimer, sms: int) -> dict:
    import cupy

    import cugemm8

    lib = library.current()
    a, sa, b, sb = dense_inputs(m, n, k)
    out = cupy.empty((m, n), dtype=cugemm8.api.BF16)
    ref = cugemm8.matmul(a, sa, b, sb).astype(cupy.float32)
    pick = lib.choose("normal", m, n, k, 1, sms)
    rows = []
    for cfg in cands:
        call = lib.bind(cfg, a, sa, b, sb, out)
        call()
        ok = bool(cupy.allclose(out.astype(cupy.float32), ref, rtol=RTOL, atol=ATOL))
        us = timer(call)
        rows.append({"block_m": cfg.block_m, "block_n": cfg.block_n, "stages": cfg.stages, "cluster": cfg.cluster,
                     "split_k": getattr(cfg, "split_k", 1), "grid": call.launcher.grid,
                     "raster": cfg.raster_group, "us": us, "tflops": 2 * m * n * k / us / 1e6, "ok": ok,
                     "picked": cfg == pick.config})
    rows.sort(key=lambda r: r["us"])
    return {"m": m, "n": n, "k": k, "rows": rows, "pick": pick}


def dense_line(res: dict, raster_sweep: bool) -> str:
    m, n, k, rows = res["m"], res["n"], res["k"], res["rows"]
    if raster_sweep:
        return f"{m:5d} {n:6d} {k:6d}  " + "  ".join(
            f"r{r['raster']}c{r['cluster']}:{r['us']:.1f}" for r in sorted(rows, key=lambda r: (r["raster"], r["cluster"])))
    best = rows[0]
    mine = next((r for r in rows if r["picked"]), None)
    def tile(r):
        return f"{r['block_m']}x{r['block_n']}x{r['stages']}c{r['cluster']}s{r.get('split_k', 1)}"

    text = f"{m:5d} {n:6d} {k:6d}  best {tile(best):>16} {best['us']:8.1f}us {best['tflops']:6.0f}TF  "
    text += (f"pick {tile(mine)} {mine['us']:8.1f}us ({mine['us'] / best['us']:.2f}x)" if mine
             else f"pick {res['pick'].config} not swept")
    bad = [(r["block_m"], r["block_n"]) for r in rows if not r["ok"]]
    return text + (f"  MISMATCH in {bad}" if bad else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="dense", choices=("dense", "small", "large", "decode", "prefill"))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--raster", default=None, help="comma-separated band widths to sweep (with the picked tile)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="compile processes")
    args = ap.parse_args(argv)
    rasters = tuple(int(v) for v in args.raster.split(",")) if args.raster else (None,)
    shapes = {"dense": DENSE, "small": [s for s in DENSE if s[0] <= 128],
              "large": [s for s in DENSE if s[0] > 128], "decode": DECODE, "prefill": PREFILL}[args.shapes]
    import cugemm8

    sms = cugemm8.get_num_sms()
    if args.shapes == "decode":
        cands = {s: decode_candidates(*s) for s in shapes}
    elif args.shapes == "prefill":
        cands = {s: prefill_candidates("normal", s[1], s[2]) for s in shapes}
    else:
        cands = {s: dense_candidates(*s, rasters=rasters) for s in shapes}
    errors = compile_all({c for cs in cands.values() for c in cs}, args.jobs)
    print(f"compiled {sum(map(len, cands.values()))} configurations" + (f"; {len(errors)} failed" if errors else ""),
          flush=True)
    timer = SweepTimer(args.reps)
    results = []
    for s in shapes:
        res = dense_shape(*s, [c for c in cands[s] if c not in errors], timer, sms)
        print(dense_line(res, len(rasters) > 1), flush=True)
        results.append({k: v for k, v in res.items() if k != "pick"})
    write(args.out, {"gpu": gpu_props(), "info": {**provenance(), "reps": args.reps, "sms": sms}, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


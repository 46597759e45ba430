"""Ahead-of-time compilation: every kernel the heuristic can pick for a weight shape over a range of M, built
into the disk cache, so that a server's first calls load kernels instead of compiling them. No GPU needed.

    cugemm8.precompile(2112, 7168, m=(1, 16384))          # or: python -m cugemm8 precompile --n 2112 --k 7168
    cugemm8.precompile(2112, None, layout="wgrad", m=7168)  # the weight gradient: K is a run-time value

Ranks that start together may all call it: the JIT's file lock (cugemm8.jit) makes each kernel compile once.
"""
from __future__ import annotations

import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Iterable

from . import fp8_gemm, heuristics, heuristics_small_m, heuristics_wgrad, small_m
from .arrays import type_name
from .validation import check_out_format

DEFAULT_SMS = 132   # an H100/H200 SXM, when no GPU is visible
MAX_M = 1 << 20     # a bound on the M range (choose runs once per M)
WGRAD_LAYOUTS = heuristics_wgrad.ENTRY_LAYOUTS   # the weight gradients' (their kernels take K at run time)
LAYOUTS = heuristics.LAYOUTS + tuple(WGRAD_LAYOUTS)


def plan(layout: str, m: int, n: int, k: int | None, groups: int, num_sms: int, fmt: str = "bfloat16"):
    """The LaunchPlan a call would get: the forward GEMMs' (heuristics.choose) or the weight gradients'
    (heuristics_wgrad.choose, for the layouts in WGRAD_LAYOUTS; K does not enter)."""
    if layout in WGRAD_LAYOUTS:
        return heuristics_wgrad.choose(WGRAD_LAYOUTS[layout], m, n, groups, num_sms)
    return heuristics.choose(layout, m, n, k, groups, num_sms, fmt)


def config_for(layout: str, m: int, n: int, k: int | None, groups: int, num_sms: int, fmt: str = "bfloat16"):
    """The kernel configuration a call would run: the small-M kernel's where it is chosen, else plan()'s."""
    small = heuristics_small_m.for_call(layout, m, n, k, num_sms, fmt) if k is not None else None
    return small if small is not None else plan(layout, m, n, k, groups, num_sms, fmt).config


def precompile(n: int, k: int | None, *, layout: str = "normal", m=(1, 16384), groups: int = 1,
               num_sms: int | None = None,
               out_dtype: str = "bfloat16", scale_format: str = "float32", jobs: int = 1,
               progress: bool | None = None) -> list:
    """Compile every configuration the heuristics pick (``heuristics.choose``, and the small-M kernel's) for ``layout`` with this N and K and each M in
    ``m`` (an inclusive ``(low, high)`` range, an int, or an iterable of ints; the masked layout's M is
    expected_m, the contiguous layout's the total rows), and return the distinct configurations. The layouts
    "wgrad" and "k_grouped_wgrad" build the weight gradients' kernels (M and N of the gradient; k may be None).

    num_sms: the GPU's SM count (default: the current GPU's, else 132); groups: the grouped layouts' G;
    jobs: compiler processes; progress: a progress line on stderr (default: when stderr is a terminal)."""
    ms = _ms(m)
    _check(n, k, layout, groups, jobs)
    fmt = check_out_format(out_dtype, scale_format)
    if fmt != "bfloat16" and layout in WGRAD_LAYOUTS:
        raise ValueError(f"out_dtype applies to the forward GEMMs; the weight gradient's output is float32 (layout "
                         f"{layout!r})")
    if fmt != "bfloat16" and n % 16:
        raise ValueError(f"n must be a multiple of 16 with out_dtype='float8_e4m3'; got {n}")
    sms = _sms(num_sms)
    configs: dict = {}   # KernelConfig or SmallMConfig
    for rows in ms:
        configs.setdefault(config_for(layout, rows, n, k, groups, sms, fmt))
    todo = list(configs)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    label = f"precompile {layout} N={n}" + (f" K={k}" if k is not None else "") + (
        f" G={groups}" if layout not in ("normal", "wgrad") else "")
    start = time.perf_counter()
    if jobs == 1 or len(todo) < 2:
        for i, cfg in enumerate(todo):
            _build(cfg)
            _report(show, label, i + 1, len(todo), start)
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            for i, _ in enumerate(pool.map(_build, todo)):
                _report(show, label, i + 1, len(todo), start)
    if show:
        sys.stderr.write("\n" if sys.stderr.isatty() else "")
        sys.stderr.flush()
    return todo


def _build(cfg) -> int:
    return len(small_m.build(cfg) if isinstance(cfg, small_m.SmallMConfig) else fp8_gemm.build(cfg))


def _report(show: bool, label: str, done: int, total: int, start: float) -> None:
    if not show:
        return
    width = 30
    bar = "#" * (width * done // total) + "-" * (width - width * done // total)
    line = f"{label}: [{bar}] {done}/{total} kernels, {time.perf_counter() - start:.1f} s"
    sys.stderr.write(("\r" + line) if sys.stderr.isatty() else (line + "\n"))
    sys.stderr.flush()


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {type_name(value)}")
    return value


def _ms(m) -> list[int]:
    """The M values of `m`: (low, high) inclusive, one int, or an iterable of ints; each in [1, MAX_M]."""
    if isinstance(m, tuple) and len(m) == 2:
        low, high = (_int(v, "m") for v in m)
        if not 1 <= low <= high <= MAX_M:
            raise ValueError(f"m must be a range (low, high) with 1 <= low <= high <= {MAX_M}; got {m}")
        return list(range(low, high + 1))
    values = [m] if isinstance(m, int) and not isinstance(m, bool) else list(_iterable(m))
    values = [_int(v, "m") for v in values]
    bad = [v for v in values if not 1 <= v <= MAX_M]
    if not values or bad:
        raise ValueError(f"m must hold at least one value, each in [1, {MAX_M}]; got {bad or 'none'}")
    return values


def _iterable(m) -> Iterable:
    try:
        return iter(m)
    except TypeError:
        raise TypeError(f"m must be an int, a (low, high) range or an iterable of ints; got {type_name(m)}") from None


def _check(n, k, layout, groups, jobs) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    wgrad = layout in WGRAD_LAYOUTS
    for name, value in (("n", n), ("k", k), ("groups", groups), ("jobs", jobs)):
        if not (wgrad and name == "k" and value is None):
            _int(value, name)
    if n < 8 or n % 8:
        raise ValueError(f"n must be a positive multiple of 8; got {n}")
    if k is not None and (k < 16 or k % 16):
        raise ValueError(f"k must be a positive multiple of 16; got {k}")
    if groups < 1 or (layout in ("normal", "wgrad") and groups != 1):
        raise ValueError(f"groups must be >= 1 (and 1 for the normal layout); got {groups} for {layout!r}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1; got {jobs}")


def _sms(num_sms) -> int:
    if num_sms is not None:
        if _int(num_sms, "num_sms") < 1:
            raise ValueError(f"num_sms must be positive; got {num_sms}")
        return num_sms
    try:
        from . import runtime

        return runtime.get_num_sms()
    except Exception:   # no GPU, no driver: plan for an H100/H200 SXM
        return DEFAULT_SMS

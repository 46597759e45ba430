"""The compute-sanitizer child of benchmarks/sanitize.py: runs every case of a JSON list through the public
API (CuPy's memory pool off, so memcheck sees each array's exact bounds) and checks what was written."""
from __future__ import annotations

import json
import sys
import time
import zlib
from pathlib import Path

from . import library


# ----------------------------------------------------------------------------- child: run the cases
def _codes(rng, shape):
    """Random finite e4m3 codes of moderate magnitude, from a 1 MiB pattern (cheap for big B)."""
    import numpy as np

    size = int(np.prod(shape))
    n = min(size, 1 << 20)
    exp = rng.integers(6, 11, size=n, dtype=np.int32)
    mant = rng.integers(0, 8, size=n, dtype=np.int32)
    sign = rng.integers(0, 2, size=n, dtype=np.int32)
    pattern = (sign << 7 | exp << 3 | mant).astype(np.uint8)
    return np.resize(pattern, size).reshape(shape)


def _a_scale(cp, np, rng, lead: tuple, m: int, kb: int, kind: str):
    """float32 [*lead, m, kb] on the device: the kernel's M-major layout built on the host (no
    conversion kernel), or row-major (the API converts it)."""
    values = rng.uniform(0.5, 2.0, size=lead + (m, kb)).astype(np.float32)
    if kind == "rowmajor":
        return cp.asarray(values)
    am = -(-m // 4) * 4
    store = np.zeros(lead + (kb, am), np.float32)
    store[..., :m] = np.swapaxes(values, -1, -2)
    return cp.asarray(store).swapaxes(-1, -2)[..., :m, :]


def _poisoned_out(cp, shape, bf16):
    out = cp.empty(shape, dtype=bf16)
    out.data.memset(0xFF, out.nbytes)            # all NaN, no kernel
    return out


def _nonfinite(bits):
    return (bits & 0x7F80) == 0x7F80


def run_case(case: dict, tiny: bool) -> str:
    import numpy as np

    import cugemm8
    from cugemm8 import api

    lib = library.current()
    rng = np.random.default_rng(zlib.crc32(case["name"].encode()))
    if case["layout"] in lib.wgrad_heuristics.ENTRY_LAYOUTS:
        return _run_wgrad(case, cugemm8, lib, rng)
    n, k = case["n"], case["k"]
    kb, nb = -(-k // 128), -(-n // 128)
    groups = case.get("groups", 1)
    forced = None
    if "config" in case:
        cfg = lib.config(case["config"])
        num_sms = case.get("num_sms") or cugemm8.get_num_sms()
        if cfg.layout == "normal":
            tiles = -(-case["m"] // cfg.block_m) * cfg.num_n_blocks
        elif cfg.layout == "contiguous":
            tiles = -(-len(case["m_indices"]) // cfg.block_m) * cfg.num_n_blocks
        else:
            tiles = -(-case["max_m"] // cfg.block_m) * cfg.num_n_blocks * groups
        grid = lib.grid_for(cfg, max(tiles, 1), num_sms)   # as the API would launch it

        def forced(layout, m_, n_, k_, groups_, sms_, out_format="bfloat16"):
            assert (layout, n_, k_, groups_, out_format) == (cfg.layout, cfg.n, cfg.k, cfg.num_groups,
                                                             getattr(cfg, "out_format", "bfloat16")), "case/config mismatch"
            return lib.launch_plan(cfg, grid, tiles)

    # the API's own planning, or the case's configuration (its prepared calls dropped either way: forced
    # cases may share a call signature with another configuration)
    with lib.api_choosing(forced):
        return _run(case, cugemm8, api, lib, rng, n, k, kb, nb, groups)


def _fp8_problem(q, s, rows_written, rows_untouched) -> str:
    """e4m3 output: written rows hold no NaN code (saturating conversion never makes one) and positive finite
    scales; untouched rows kept their poison (0xFF payload, NaN scales)."""
    import numpy as np

    if ((q[rows_written] & 0x7F) == 0x7F).any():
        return "e4m3 outputs not written"
    sw = s[rows_written]
    if not (np.isfinite(sw) & (sw > 0)).all():
        return "scales not written or not positive"
    if (q[rows_untouched] != 0xFF).any() or not np.isnan(s[rows_untouched]).all():
        return "rows that must stay untouched were written"
    return ""


def _run_fp8(case, cugemm8, api, lib, rng, n, k, kb, nb, groups) -> str:
    """The same problems with out_dtype="float8_e4m3" (case["out_dtype"]; scale_format from the case)."""
    import cupy as cp
    import numpy as np

    fmt = case.get("scale_format", "float32")
    if case["layout"] == "normal":
        m = case["m"]
        a, b = cp.asarray(_codes(rng, (m, k))), cp.asarray(_codes(rng, (n, k)))
        sa = _a_scale(cp, np, rng, (), m, kb, case["a_scale"])
        sb = cp.asarray(rng.uniform(0.5, 2.0, (nb, kb)).astype(np.float32))
        q, s = cp.full((m, n), 0xFF, cp.uint8), cugemm8.empty_scale((m, nb))
        s.fill(np.nan)
        cugemm8.matmul(a, sa, b, sb, out=q, out_scale=s, out_dtype="float8_e4m3", scale_format=fmt)
        cp.cuda.Device().synchronize()
        return _fp8_problem(cp.asnumpy(q), cp.asnumpy(s), slice(None), slice(0, 0))
    if case["layout"] == "contiguous":
        idx = np.asarray(case["m_indices"], np.int32)
        m = len(idx)
        a, b = cp.asarray(_codes(rng, (m, k))), cp.asarray(_codes(rng, (groups, n, k)))
        sa = _a_scale(cp, np, rng, (), m, kb, case["a_scale"])
        sb = cp.asarray(rng.uniform(0.5, 2.0, (groups, nb, kb)).astype(np.float32))
        q, s = cp.full((m, n), 0xFF, cp.uint8), cugemm8.empty_scale((m, nb))
        s.fill(np.nan)
        cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, cp.asarray(idx), out=q, out_scale=s,
                                            out_dtype="float8_e4m3", scale_format=fmt)
        cp.cuda.Device().synchronize()
        return _fp8_problem(cp.asnumpy(q), cp.asnumpy(s), slice(None), slice(0, 0))
    max_m = case["max_m"]
    a, b = cp.asarray(_codes(rng, (groups, max_m, k))), cp.asarray(_codes(rng, (groups, n, k)))
    sa = _a_scale(cp, np, rng, (groups,), max_m, kb, case["a_scale"])
    sb = cp.asarray(rng.uniform(0.5, 2.0, (groups, nb, kb)).astype(np.float32))
    masked_m = np.asarray(case["masked_m"], np.int32)
    q, s = cp.full((groups, max_m, n), 0xFF, cp.uint8), cugemm8.empty_scale((groups, max_m, nb))
    s.fill(np.nan)
    cugemm8.m_grouped_matmul_masked(a, sa, b, sb, cp.asarray(masked_m), case["expected_m"], out=q, out_scale=s,
                                    out_dtype="float8_e4m3", scale_format=fmt)
    cp.cuda.Device().synchronize()
    q, s = cp.asnumpy(q), cp.asnumpy(s)
    for g in range(groups):
        rows = min(max(int(masked_m[g]), 0), max_m)
        problem = _fp8_problem(q[g], s[g], slice(0, rows), slice(rows, None))
        if problem:
            return f"group {g}: {problem}"
    return ""


def _run(case, cugemm8, api, lib, rng, n, k, kb, nb, groups) -> str:
    import cupy as cp
    import numpy as np

    if case.get("out_dtype") == "float8_e4m3":
        return _run_fp8(case, cugemm8, api, lib, rng, n, k, kb, nb, groups)
    if case["layout"] == "normal":
        m = case["m"]
        a = cp.asarray(_codes(rng, (m, k)))
        sa = _a_scale(cp, np, rng, (), m, kb, case["a_scale"])
        b = cp.asarray(_codes(rng, (n, k)))
        sb = cp.asarray(rng.uniform(0.5, 2.0, (nb, kb)).astype(np.float32))
        out = _poisoned_out(cp, (m, n), api.BF16)
        cugemm8.matmul(a, sa, b, sb, out=out)
        cp.cuda.Device().synchronize()
        bits = cp.asnumpy(out.view(cp.uint16))
        bad = int(_nonfinite(bits).sum())
        if bad:
            return f"{bad} outputs not written or not finite"
    elif case["layout"] == "contiguous":
        idx = np.asarray(case["m_indices"], np.int32)
        m = len(idx)
        a = cp.asarray(_codes(rng, (m, k)))
        sa = _a_scale(cp, np, rng, (), m, kb, case["a_scale"])
        b = cp.asarray(_codes(rng, (groups, n, k)))
        sb = cp.asarray(rng.uniform(0.5, 2.0, (groups, nb, kb)).astype(np.float32))
        out = _poisoned_out(cp, (m, n), api.BF16)
        cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, cp.asarray(idx), out=out)
        cp.cuda.Device().synchronize()
        bits = cp.asnumpy(out.view(cp.uint16))
        padding = np.zeros(m, bool)
        bm = lib.config(case["config"] if "config" in case else case["chosen"]).block_m
        for start in range(0, m, bm):
            first = idx[start]
            padding[start:start + bm] = (first < 0 or first >= groups)
        padding |= idx < 0
        if (bits[padding] != 0).any():
            return "padding rows are not zero"
        if _nonfinite(bits[~padding]).any():
            return "computed rows not written or not finite"
    else:
        max_m = case["max_m"]
        a = cp.asarray(_codes(rng, (groups, max_m, k)))
        sa = _a_scale(cp, np, rng, (groups,), max_m, kb, case["a_scale"])
        b = cp.asarray(_codes(rng, (groups, n, k)))
        sb = cp.asarray(rng.uniform(0.5, 2.0, (groups, nb, kb)).astype(np.float32))
        masked_m = np.asarray(case["masked_m"], np.int32)
        out = _poisoned_out(cp, (groups, max_m, n), api.BF16)
        cugemm8.m_grouped_matmul_masked(a, sa, b, sb, cp.asarray(masked_m), case["expected_m"], out=out)
        cp.cuda.Device().synchronize()
        bits = cp.asnumpy(out.view(cp.uint16))
        for g in range(groups):
            rows = min(max(int(masked_m[g]), 0), max_m)
            if _nonfinite(bits[g, :rows]).any():
                return f"group {g}: valid rows not written or not finite"
            if (bits[g, rows:] != 0xFFFF).any():
                return f"group {g}: rows past masked_m written"
    return ""


def _run_wgrad(case, cugemm8, lib, rng) -> str:
    """The weight gradients, through the API or the case's configuration: out (random, finite) gets finite sums
    added; a k-grouped group without k-blocks keeps its out bitwise."""
    import cupy as cp
    import numpy as np

    m, n, k = case["m"], case["n"], case["k"]
    kb = -(-k // 128)
    a, b = cp.asarray(_codes(rng, (m, k))), cp.asarray(_codes(rng, (n, k)))
    sa = _a_scale(cp, np, rng, (), m, kb, case.get("a_scale", "aligned"))
    sb = _a_scale(cp, np, rng, (), n, kb, case.get("a_scale", "aligned"))
    sizes = case.get("k_sizes")
    shape = (m, n) if sizes is None else (len(sizes), m, n)
    out0 = rng.uniform(-1, 1, shape).astype(np.float32)
    out = cp.asarray(out0)
    if "config" in case:
        cfg = lib.config(case["config"])
        sa, sb = cugemm8.get_col_major_tma_aligned_tensor(sa), cugemm8.get_col_major_tma_aligned_tensor(sb)
        k_sizes = None if sizes is None else cp.asarray(np.asarray(sizes, np.int32))
        lib._mod("fp8_gemm").bind_wgrad(cfg, a, sa, b, sb, out, k_sizes=k_sizes)()
    elif sizes is None:
        cugemm8.wgrad_matmul(a, sa, b, sb, out)
    else:
        cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, cp.asarray(np.asarray(sizes, np.int32)), out)
    cp.cuda.Device().synchronize()
    got = cp.asnumpy(out)
    if not np.isfinite(got).all():
        return "outputs not finite"
    if sizes is not None:
        begin = 0
        for g, size in enumerate(sizes):
            blocks = min(-(-max(size, 0) // 128), max(kb - begin, 0))
            if blocks == 0 and not (got[g] == out0[g]).all():
                return f"group {g} has no k-blocks but its out was written"
            begin += blocks
    elif (got == out0).all():
        return "nothing was added into out"
    return ""


def child(cases_file: str, tiny: bool) -> int:
    import cupy as cp

    cp.cuda.set_allocator(None)                  # every array its own cudaMalloc: exact bounds for memcheck
    cp.cuda.set_pinned_memory_allocator(None)
    cases = json.loads(Path(cases_file).read_text())
    failed = 0
    for i, case in enumerate(cases):
        t0 = time.monotonic()
        try:
            problem = run_case(case, tiny)
        except Exception as exc:  # noqa: BLE001 - report and go on with the other cases
            problem = f"{type(exc).__name__}: {exc}"
        failed += bool(problem)
        print(f"sanitize-case {i + 1}/{len(cases)} {'FAIL' if problem else 'ok'} {time.monotonic() - t0:.1f}s "
              f"{case['name']}{': ' + problem if problem else ''}", flush=True)
    print(f"sanitize-child done: {len(cases) - failed} ok, {failed} failed", flush=True)
    return 1 if failed else 0




if __name__ == "__main__":
    sys.exit(child(sys.argv[1], "--tiny" in sys.argv[2:]))

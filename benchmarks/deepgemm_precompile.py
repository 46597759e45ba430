"""Fill DeepGEMM's JIT cache for the benchmark's decode (or prefill, or weight-gradient) shapes on a machine without a
GPU (the peer, not cugemm8).

    CUDA_HOME=/usr/local/cuda DG_JIT_CACHE_DIR=.peer/deepgemm-jit PYTHONPATH=.peer/deepgemm \
        python -m benchmarks.deepgemm_precompile [--jobs 2] [--sms 132] [--tables decode,prefill,wgrad]
    tar czf .peer/deepgemm-jit.tgz -C .peer deepgemm-jit     # scripts/device_env.sh unpacks it on the device

DeepGEMM (8dfa329) compiles each kernel with nvcc the first time a call needs it, 20-40 s a kernel, inside the timed
run; the decode table needs about forty of them, which would spend a lent GPU's minutes on a compiler. Its kernels
take M at run time, so a kernel is fixed by (N, K, groups, block sizes, stages, multicast): this tool picks those
with DeepGEMM's own `get_best_configs` for the SM count given, renders the kernel source with its own generator,
and builds it with its own `build`, whose cache key holds the nvcc path and version (the device's
/usr/local/cuda/bin/nvcc 13.0 here too). The weight gradient's kernel also holds M and K's last stages in its
template, so `wgrad` builds one for each (M, N, K) of WGRAD_SHAPES and each group's K of K_GROUPED_SHAPES (its
k-grouped call loops over the groups' wgrad calls). Needs torch (CPU is enough) and nvcc; launches nothing."""
from __future__ import annotations

import argparse
import concurrent.futures
import os

from .shapes import (DECODE_DENSE_SHAPES, DECODE_MASKED_SHAPES, DECODE_NARROW_SHAPES, PREFILL_ALIGN, PREFILL_TABLES,
                     contiguous_layout, uneven_expert_rows)
from .wgrad import K_GROUPED_SHAPES, WGRAD_SHAPES, k_sizes_for

TABLES = {"decode": DECODE_DENSE_SHAPES + DECODE_NARROW_SHAPES + DECODE_MASKED_SHAPES,
          "prefill": PREFILL_TABLES["dense"] + PREFILL_TABLES["uneven"],
          "wgrad": WGRAD_SHAPES + [(m, n, k) for g, base, m, n in K_GROUPED_SHAPES      # wgrad.bench_k_grouped's seed
                                   for k in k_sizes_for(g, base, seed=g * base + m)]}


def kernel_source(shape, sms: int) -> tuple[str, str]:
    """(build name, source) of the kernel DeepGEMM runs for `shape` (its gemm.py / m_grouped_gemm.py choices; the
    uneven experts' contiguous GEMM takes the rows of the benchmark's layout, segments padded to PREFILL_ALIGN)."""
    from deep_gemm.jit_kernels import gemm
    from deep_gemm.jit_kernels.runtime import FP8GemmRuntime, GemmType

    masked, contiguous = shape.kind == "masked", shape.kind == "uneven"
    n, k, g = shape.n, shape.k, shape.groups
    if contiguous:
        rows = len(contiguous_layout(uneven_expert_rows(g, shape.m), PREFILL_ALIGN)[0])
        _, block_m, block_n, stages, multicast, smem = gemm.get_best_configs(rows, n, k, 1, sms,
                                                                              is_grouped_contiguous=True)
    else:
        _, block_m, block_n, stages, multicast, smem = gemm.get_best_configs(shape.m, n, k, g, sms,
                                                                              is_grouped_masked=masked)
    kind = GemmType.GroupedMasked if masked else GemmType.GroupedContiguous if contiguous else GemmType.Normal
    kwargs = {"GEMM_TYPE": kind, "NUM_TMA_THREADS": 128,
              "NUM_MATH_THREADS_PER_GROUP": 128, "N": n, "K": k if masked else -(-k // 128) * 128,
              "NUM_GROUPS": g, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": 128, "SWIZZLE_D_MODE": smem[1],
              "BLOCK_N_PADDING": smem[2], "NUM_STAGES": stages, "NUM_TMA_MULTICAST": multicast[0],
              "IS_TMA_MULTICAST_ON_A": multicast[1]}
    name = "m_grouped_gemm_fp8_fp8_bf16_nt" if masked or contiguous else "gemm_fp8_fp8_bf16_nt"
    return name, FP8GemmRuntime.generate(kwargs)


def wgrad_source(mnk: tuple[int, int, int], sms: int) -> tuple[str, str]:
    """(build name, source) of the kernel DeepGEMM's wgrad_gemm_fp8_fp8_fp32_nt runs for (M, N, K) (its wgrad_gemm.py
    choices; the source holds M, N, the blocks, the stages and K's last stages, not K)."""
    from deep_gemm.jit_kernels import gemm
    from deep_gemm.jit_kernels.runtime import FP8WGradGemmRuntime

    m, n, k = mnk
    _, block_m, block_n, stages, multicast, _ = gemm.get_best_configs(m, n, -(-k // 128) * 128, 1, sms,
                                                                      is_fp32_out=True, is_wgrad=True)
    kwargs = {"M": m, "N": n, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": 128, "NUM_STAGES": stages,
              "NUM_LAST_STAGES": -(-k // 128) % stages, "NUM_TMA_THREADS": 128, "NUM_MATH_THREADS_PER_GROUP": 128,
              "NUM_TMA_MULTICAST": multicast[0], "IS_TMA_MULTICAST_ON_A": multicast[1]}
    return "wgrad_gemm_fp8_fp8_fp32_nt", FP8WGradGemmRuntime.generate(kwargs)


def build(item: tuple[str, str]) -> str:
    from deep_gemm.jit import compiler
    from deep_gemm.jit_kernels.runtime import FP8GemmRuntime

    # A CPU build of torch leaves its CUDA_HOME unset, which DeepGEMM's compiler imported: name the toolkit. (The
    # runtime class only wraps the cache path here; it is no part of the cache key.)
    compiler.CUDA_HOME = compiler.CUDA_HOME or os.environ["CUDA_HOME"]
    name, code = item
    return compiler.build(name, code, FP8GemmRuntime).path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, default=132, help="the device's SM count (an H100/H200 SXM: 132)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tables", default="decode", help=f"comma-separated, of {', '.join(TABLES)}")
    args = ap.parse_args(argv)
    shapes = [shape for table in args.tables.split(",") for shape in TABLES[table]]
    items = list(dict.fromkeys((wgrad_source if isinstance(shape, tuple) else kernel_source)(shape, args.sms)
                               for shape in shapes))
    print(f"{len(items)} DeepGEMM kernels for {len(shapes)} shapes ({args.tables})", flush=True)
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for path in pool.map(build, items):
            print(path, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One GEMM call (after warm-up) for a profiler to catch: python scripts/profile_one.py M N K [BM BN CLUSTER].
Run under e.g. `ncu --clock-control none -k cugemm8_fp8_gemm --launch-skip 2 -c 1 ...`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import cupy  # noqa: E402

import cugemm8  # noqa: E402
from cugemm8 import heuristics, runtime  # noqa: E402

m, n, k = (int(v) for v in sys.argv[1:4])
rng = cupy.random.default_rng(0)
a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cupy.float32))
b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32))
sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
out = cupy.empty((m, n), dtype=cugemm8.api.BF16)
plan = heuristics.choose("normal", m, n, k, 1, cugemm8.get_num_sms())
cfg = plan.config
if len(sys.argv) > 4:
    bm, bn, cl = (int(v) for v in sys.argv[4:7])
    cfg = heuristics.KernelConfig("normal", n, k, 1, bm, bn, heuristics._stages(bm, bn, k), 1 if bm == 64 else 2,
                                  heuristics.swizzle_for(bn), cluster=cl)
run = runtime.bind(cfg, a, sa, b, sb, out)
print(cfg, "grid", run.launcher.grid, flush=True)
for _ in range(3):
    run()
cupy.cuda.Device().synchronize()

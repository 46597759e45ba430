# 192-row weight-gradient tiles against 128x160 on the same operands (FP32 outputs compared)
import cupy, numpy as np
import cugemm8
from cugemm8 import fp8_gemm, heuristics_wgrad as hw
rng = np.random.default_rng(0)
for m, n, k in [(7168, 2112, 4096), (333, 488, 1040), (512, 1000 - 8, 384)]:
    a = cupy.asarray(rng.integers(0, 120, (m, k), dtype=np.uint8) | (rng.integers(0, 2, (m, k), dtype=np.uint8) << 7))
    b = cupy.asarray(rng.integers(0, 120, (n, k), dtype=np.uint8) | (rng.integers(0, 2, (n, k), dtype=np.uint8) << 7))
    kb = -(-k // 128)
    sa = cugemm8.get_col_major_tma_aligned_tensor(cupy.asarray(rng.uniform(0.5, 2, (m, kb)).astype(np.float32)))
    sb = cugemm8.get_col_major_tma_aligned_tensor(cupy.asarray(rng.uniform(0.5, 2, (n, kb)).astype(np.float32)))
    outs = {}
    for bm, bn in [(128, 160), (192, 96), (192, 112)]:
        cfg = hw.make_config("normal", n, 1, bm, bn)
        out = cupy.full((m, n), 1.5, dtype=cupy.float32)
        fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out)()
        outs[bm, bn] = out
    ref = outs[128, 160]
    for key, o in outs.items():
        diff = float(cupy.abs(o - ref).max() / cupy.abs(ref).max())
        print(m, n, k, key, "bitwise" if bool((o.view(cupy.uint32) == ref.view(cupy.uint32)).all()) else f"max rel diff {diff:.2e}")

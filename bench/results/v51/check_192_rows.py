# 192-row weight-gradient tiles against 128x160 on the same operands (FP32 outputs compared bitwise)
import cupy, numpy as np
import cugemm8
from cugemm8 import fp8_gemm, heuristics_wgrad as hw
rng = np.random.default_rng(0)
for m, n, k in [(7168, 2112, 4096), (333, 488, 1040), (512, 992, 384), (2048, 7168, 8192)]:
    a = cupy.asarray(rng.integers(0, 120, (m, k), dtype=np.uint8) | (rng.integers(0, 2, (m, k), dtype=np.uint8) << 7))
    b = cupy.asarray(rng.integers(0, 120, (n, k), dtype=np.uint8) | (rng.integers(0, 2, (n, k), dtype=np.uint8) << 7))
    kb = -(-k // 128)
    sa = cugemm8.get_col_major_tma_aligned_tensor(cupy.asarray(rng.uniform(0.5, 2, (m, kb)).astype(np.float32)))
    sb = cugemm8.get_col_major_tma_aligned_tensor(cupy.asarray(rng.uniform(0.5, 2, (n, kb)).astype(np.float32)))
    outs = {}
    for bm, bn, t in [(128, 160, False), (192, 128, False), (192, 144, False), (192, 112, False), (192, 128, True), (192, 144, True)]:
        cfg = hw.make_config("normal", m if t else n, 1, bm, bn, transpose_d=t)
        out = cupy.full((m, n), 1.5, dtype=cupy.float32)
        fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out)()
        outs[bm, bn, t] = out
    ref = outs[128, 160, False]
    for key, o in outs.items():
        diff = float(cupy.abs(o - ref).max() / cupy.abs(ref).max())
        print(m, n, k, key, "bitwise" if bool((o.view(cupy.uint32) == ref.view(cupy.uint32)).all()) else f"DIFFERS max rel diff {diff:.2e}", flush=True)

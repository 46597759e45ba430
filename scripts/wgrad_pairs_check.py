# Weight-gradient CTA pairs sharing B against the unpaired tile, same operands: FP32 outputs compared bitwise.
import cupy, numpy as np
import cugemm8
from cugemm8 import fp8_gemm, heuristics_wgrad as hw
rng = np.random.default_rng(0)
for m, n, k in [(7168, 2112, 4096), (333, 488, 1040), (512, 1000 - 8, 384), (200, 160, 256)]:
    a = cupy.asarray(rng.integers(0, 120, (m, k), dtype=np.uint8) | (rng.integers(0, 2, (m, k), dtype=np.uint8) << 7))
    b = cupy.asarray(rng.integers(0, 120, (n, k), dtype=np.uint8) | (rng.integers(0, 2, (n, k), dtype=np.uint8) << 7))
    kb = -(-k // 128)
    sa = cugemm8.get_col_major_tma_aligned_tensor(cupy.asarray(rng.uniform(0.5, 2, (m, kb)).astype(np.float32)))
    sb = cugemm8.get_col_major_tma_aligned_tensor(cupy.asarray(rng.uniform(0.5, 2, (n, kb)).astype(np.float32)))
    outs = {}
    for bn, pairs in [(160, False), (160, True), (128, True)]:
        cfg = hw.make_config("normal", n, 1, 128, bn, share_b=pairs)
        out = cupy.full((m, n), 1.5, dtype=cupy.float32)
        fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out)()
        cupy.cuda.Device().synchronize()
        outs[bn, pairs] = out
    ref = outs[160, False]
    for key, o in outs.items():
        same = bool((o.view(cupy.uint32) == ref.view(cupy.uint32)).all())
        print(m, n, k, key, "bitwise" if same else f"max rel diff {float(cupy.abs(o - ref).max() / cupy.abs(ref).max()):.2e}", flush=True)

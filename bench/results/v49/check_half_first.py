import cupy
import cugemm8
from cugemm8 import fp8_gemm
from benchmarks import ablation_probe as ap
from benchmarks.wgrad_probe import tile_config

for m, n, k in [(7168, 2112, 4096), (7168, 4096, 4096), (2048, 7168, 1000)]:
    rng = cupy.random.default_rng(1)
    a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, k), dtype=cupy.float32))
    b, sb = cugemm8.per_token_cast_to_fp8(rng.standard_normal((n, k), dtype=cupy.float32))
    sa, sb = cugemm8.get_col_major_tma_aligned_tensor(sa), cugemm8.get_col_major_tma_aligned_tensor(sb)
    outs = {}
    for v in ("base", "half-first"):
        ap._set(ap.VARIANTS[v])
        cfg = tile_config("pick", n, m)
        out = cupy.ones((m, n), cupy.float32)
        fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, out)()
        again = cupy.ones((m, n), cupy.float32)
        fp8_gemm.bind_wgrad(cfg, a, sa, b, sb, again)()
        cupy.cuda.Device().synchronize()
        outs[v] = out
        print(m, n, k, v, "repeat bitwise", bool((out == again).all()))
    d = cupy.abs(outs["half-first"] - outs["base"])
    print(m, n, k, "max |half-first - base| / max|base|", float(d.max() / cupy.abs(outs["base"]).max()),
          "differing elements", int((d > 0).sum()), "of", m * n)

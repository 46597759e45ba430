"""How many CTAs of split-K clusters (2 to 8 CTAs) are resident at once on this GPU: the number
cugemm8.heuristics.cluster_capacity models (cuOccupancyMaxActiveClusters on a real split-K kernel).
Each split is probed on the first two tile widths it can take (at least one 8-column fragment a CTA)."""
import cupy

import cugemm8
from cugemm8 import fp8_gemm, heuristics

sms = cugemm8.get_num_sms()
print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: {sms} SMs")
for split in range(2, 9):
    widths = [bn for bn in (64, 128, 48, 96, 144, 192, 40, 80, 56, 112) if heuristics.can_split_k(bn, 7168, split)]
    for bn in widths[:2]:
        cfg = heuristics.make_config("normal", 2112, 7168, 1, 64, bn, split_k=split)
        kern = fp8_gemm.get_kernel(cfg, 0)
        print(f"split {split} 64x{bn}: {kern.max_grid} CTAs resident (model: {heuristics.cluster_capacity(split, sms)})")

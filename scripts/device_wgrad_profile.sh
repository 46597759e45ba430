#!/usr/bin/env bash
# The weight gradient under Nsight Compute beside DeepGEMM's (one call each, same operands), and a sweep of tile
# widths (more stages for narrower tiles) on one shape: what limits the wgrad kernel. Results under $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD CUGEMM8_CACHE_DIR=${CUGEMM8_CACHE_DIR:-/tmp/cugemm8-cache}
OUT=${OUT:-/tmp/cugemm8-out}
mkdir -p "$OUT"
if [ -d .peer/deepgemm/deep_gemm ]; then
    export PYTHONPATH=$PYTHONPATH:$PWD/.peer/deepgemm CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
           DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/deepgemm-jit}
fi
NCU=${NCU:-/usr/local/cuda/bin/ncu}
SHAPE=${SHAPE:-7168 2112 4096 128 128}
echo "=== tile sweep"
timeout ${SWEEP_TIMEOUT:-90} python3 - <<'PY' 2>&1 | tee "$OUT/sweep.log"
import argparse
from benchmarks import wgrad
from benchmarks.env import Env
wgrad.SWEEP_TILES = [(128, 96), (128, 112), (128, 128), (128, 128, 3), (128, 144), (128, 144, 3), (128, 160),
                     (128, 160, 5, 2), (128, 160, 3, 5), (64, 128), (64, 160)]
env = Env(argparse.Namespace(no_peers=True))
with env.stream:
    for shape in ((7168, 2112, 4096), (2048, 7168, 4096), (512, 32768, 4096)):
        r = wgrad.bench_sweep(env, *shape, 30)
        print(shape, ", ".join(f"{k} {v['tflops']:.0f}" for k, v in r["tiles"].items()), flush=True)
        env.free()
PY
echo "=== ncu"
timeout ${NCU_TIMEOUT:-150} "$NCU" --clock-control none -k regex:wgrad --launch-skip 4 -c 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section LaunchStats \
    python3 -m benchmarks.profile_wgrad $SHAPE > "$OUT/ncu-wgrad.log" 2>&1
tail -150 "$OUT/ncu-wgrad.log" | grep -v "^    ---" | cut -c1-150
if [ -n "${TIER_FILES:-}" ]; then
    echo "=== GPU tier ($TIER_FILES)"
    timeout ${TEST_TIMEOUT:-60} python3 -m pytest -q -m gpu -p no:cacheprovider $TIER_FILES 2>&1 \
        | tee "$OUT/gpu-tier.log" | tail -4
fi

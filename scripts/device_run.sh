#!/usr/bin/env bash
# One call on the lent GPU machine: smoke check, GPU test tier, tuning sweep, benchmark.
#   STEPS="smoke tests round-robin bench" bash scripts/device_run.sh      (results and logs under $OUT)
# round-robin times this checkout against BASE (a folder with another checkout's cugemm8/ and cuda_src/).
# DeepGEMM (the bench's peer) is found where PEER_DEEPGEMM points (default .peer/deepgemm, when present).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} CUGEMM8_CACHE_DIR=${CUGEMM8_CACHE_DIR:-/tmp/cugemm8-cache}
OUT=${OUT:-/tmp/cugemm8-out}
PEER_DEEPGEMM=${PEER_DEEPGEMM:-$PWD/.peer/deepgemm}
if [ -d "$PEER_DEEPGEMM/deep_gemm" ]; then
    export PYTHONPATH=$PYTHONPATH:$PEER_DEEPGEMM CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
           DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/deepgemm-jit}
fi
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,driver_version \
    --format=csv >"$OUT/nvidia-smi.txt" 2>&1
for step in ${STEPS:-smoke tests bench}; do
    echo "=== $step"
    case $step in
    smoke) set -o pipefail
           timeout ${SMOKE_TIMEOUT:-120} python3 scripts/smoke.py 2>&1 | tee "$OUT/smoke.log" \
               || { echo "smoke failed: stopping"; exit 1; }
           set +o pipefail ;;
    tests) timeout ${TEST_TIMEOUT:-420} python3 -m pytest -q -m gpu -p no:cacheprovider tests ${PYTEST_ARGS:-} \
               2>&1 | tee "$OUT/tests.log" | tail -40 ;;
    tune) timeout ${TUNE_TIMEOUT:-300} python3 scripts/tune.py --out "$OUT/tune.json" ${TUNE_ARGS:-} 2>&1 \
               | tee "$OUT/tune.log" ;;
    tune-grouped) timeout ${TUNE_TIMEOUT:-360} python3 scripts/tune_grouped.py --out "$OUT/tune-grouped.json" \
               ${TUNE_GROUPED_ARGS:-} 2>&1 | tee "$OUT/tune-grouped.log" ;;
    ffma) timeout ${FFMA_TIMEOUT:-300} python3 scripts/ffma_ab.py --out "$OUT/ffma-ab.json" ${FFMA_ARGS:-} 2>&1 \
               | tee "$OUT/ffma.log" | tail -50 ;;
    sanitize) timeout ${SANITIZE_TIMEOUT:-420} python3 scripts/sanitize.py --out "$OUT/sanitize.json" 2>&1 \
               | tee "$OUT/sanitize.log" | tail -30 ;;
    round-robin) timeout ${RR_TIMEOUT:-300} python3 -m benchmarks.round_robin --base "${BASE:-.peer/base}" \
               --out "$OUT/round-robin.json" ${RR_ARGS:-} 2>&1 | tee "$OUT/round-robin.log" | tail -45 ;;
    bench) timeout ${BENCH_TIMEOUT:-420} python3 -m benchmarks --out "$OUT" ${BENCH_ARGS:-} 2>&1 \
               | tee "$OUT/bench.log" | tail -70 ;;
    tune-decode) timeout ${TUNE_TIMEOUT:-300} python3 -m benchmarks.tune --shapes decode --reps 10 \
               --out "$OUT/tune-decode.json" 2>&1 | tee "$OUT/tune-decode.log" | tail -80 ;;
    pdl) timeout ${PDL_TIMEOUT:-120} python3 -m benchmarks.pdl --out "$OUT/pdl.json" 2>&1 | tee "$OUT/pdl.log" ;;
    clusters) timeout 120 python3 scripts/cluster_capacity.py 2>&1 | tee "$OUT/clusters.log" ;;
    esac
done

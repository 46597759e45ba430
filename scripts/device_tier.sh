#!/usr/bin/env bash
# One call on the lent GPU machine after a kernel change: the whole GPU tier, compute-sanitizer over the cases
# whose name matches SANITIZE_CASES, and the benchmark sections in BENCH_ONLY (default: none). Each step has its
# own time limit, so a hang in one still leaves the others' results. Results under $OUT.
#   SANITIZE_CASES=e4m3 BENCH_ONLY="transpose" bash scripts/device_tier.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CUGEMM8_NO_SHRINK=1 PYTHONPATH=$PWD CUGEMM8_CACHE_DIR=${CUGEMM8_CACHE_DIR:-/tmp/cugemm8-cache}
OUT=${OUT:-/tmp/cugemm8-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,driver_version \
    --format=csv >"$OUT/nvidia-smi.txt" 2>&1
for section in ${BENCH_ONLY:-}; do
    echo "=== bench $section"
    timeout ${BENCH_TIMEOUT:-120} python3 -m benchmarks --only "$section" --no-peers --out "$OUT" 2>&1 \
        | tee "$OUT/bench-$section.log" | tail -20
done
if [ -n "${SANITIZE_CASES:-}" ]; then
    echo "=== sanitize ($SANITIZE_CASES)"
    mkdir -p /tmp/sanitize
    timeout ${SANITIZE_TIMEOUT:-150} python3 -m benchmarks.sanitize --cases "$SANITIZE_CASES" \
        --budget ${SANITIZE_BUDGET:-140} --out /tmp/sanitize/sanitize.json 2>&1 | tee /tmp/sanitize/sanitize.log | tail -8
    tar czf "$OUT/sanitize.tgz" -C /tmp/sanitize .
fi
echo "=== GPU tier"
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu-tier.log" | tail -6

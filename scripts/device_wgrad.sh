#!/usr/bin/env bash
# One call on the lent GPU machine for the weight gradients (issue 21): their GPU tests, the wgrad benchmark
# section with DeepGEMM side by side, compute-sanitizer over their cases, then the rest of the GPU tier. Each step
# has its own time limit, so a hang in one still leaves the others' results. Results under $OUT (7 files).
#   bash scripts/device_wgrad.sh      (DeepGEMM from .peer/deepgemm when present, as scripts/device_run.sh)
set -u
. "$(dirname "$0")/device_env.sh"
echo "=== wgrad tests"
timeout ${WGRAD_TEST_TIMEOUT:-130} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_wgrad.py 2>&1 \
    | tee "$OUT/wgrad-tests.log" | tail -25
echo "=== bench (wgrad)"
timeout ${BENCH_TIMEOUT:-230} python3 -m benchmarks --only wgrad --out "$OUT" ${BENCH_ARGS:-} 2>&1 \
    | tee "$OUT/bench.log" | tail -45
echo "=== sanitize (wgrad cases)"
mkdir -p /tmp/sanitize
timeout ${SANITIZE_TIMEOUT:-110} python3 -m benchmarks.sanitize --cases wgrad --budget ${SANITIZE_BUDGET:-100} \
    --out /tmp/sanitize/sanitize.json 2>&1 | tee /tmp/sanitize/sanitize.log | tail -8
tar czf "$OUT/sanitize.tgz" -C /tmp/sanitize .
echo "=== GPU tier (the rest: ${TIER_FILES:-every file})"
timeout ${TEST_TIMEOUT:-130} python3 -m pytest -q -m gpu -p no:cacheprovider ${TIER_FILES:-tests --ignore=tests/gpu/test_wgrad.py} \
    2>&1 | tee "$OUT/gpu-tier.log" | tail -6

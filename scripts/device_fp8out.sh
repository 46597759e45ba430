#!/usr/bin/env bash
# One call on the lent GPU machine for e4m3 output (issue 19): its GPU tests, then the fp8out benchmark section
# of another checkout (BASE, when given: a folder holding its cugemm8/, cuda_src/ and benchmarks/) and of this
# one, each in its own process, one after the other. Each step has its own time limit. Results under $OUT.
#   BASE=.peer/base bash scripts/device_fp8out.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CUGEMM8_NO_SHRINK=1 CUGEMM8_CACHE_DIR=${CUGEMM8_CACHE_DIR:-/tmp/cugemm8-cache}
OUT=${OUT:-/tmp/cugemm8-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,driver_version \
    --format=csv >"$OUT/nvidia-smi.txt" 2>&1
echo "=== tests: ${TEST_FILES:=tests/gpu/test_recipe.py tests/gpu/test_fp8_out.py tests/gpu/test_quantize.py}"
PYTHONPATH=$PWD timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider $TEST_FILES 2>&1 \
    | tee "$OUT/tests.log" | tail -8
bench() {  # $1: label, $2: folder
    mkdir -p "$OUT/$1"
    (cd "$2" && PYTHONPATH=$PWD CUGEMM8_CACHE_DIR=/tmp/cache-$1 timeout ${BENCH_TIMEOUT:-200} \
        python3 -m benchmarks --only fp8out --no-peers --out "$OUT/$1" ${BENCH_ARGS:-}) 2>&1 \
        | tee "$OUT/$1/bench.log" | grep -v "^ *per_" | tail -34
}
[ -n "${BASE:-}" ] && { echo "=== bench base ($BASE)"; bench base "$BASE"; }
echo "=== bench cur"
bench cur .

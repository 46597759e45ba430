#!/usr/bin/env bash
# One call on the lent GPU machine for prefill-sized GEMMs (issue 22). STEPS picks, in order, from:
#   table   the benchmark's prefill section (dense large M, contiguous uneven experts), DeepGEMM side by side
#   dense   the dense prefill sweep (benchmarks.tune --shapes prefill)
#   uneven  the uneven-expert sweep (benchmarks.tune_grouped --layout uneven)
#   ncu     Nsight Compute (speed of light, compute, memory, warp states) on cugemm8 and DeepGEMM side by side:
#           contiguous 16 x 1024 rows at 4096x7168 (the pick and 128x160), dense 2048x7168x16384; or the
#           benchmarks.profile_one argument lists in NCU_RUNS, separated by ';'
#   tests   the GPU test files in TEST_FILES (default: the dense and contiguous ones)
# Each step has its own time limit, so a hang in one still leaves the others' results. Results under $OUT.
#   STEPS="table dense" bash scripts/device_prefill.sh   (DeepGEMM from .peer/deepgemm when present)
set -u
. "$(dirname "$0")/device_env.sh"
for step in ${STEPS:-table}; do
    echo "=== $step ($(date -u +%H:%M:%S))"
    case $step in
        table) timeout ${TABLE_TIMEOUT:-330} python3 -m benchmarks --only prefill --out "$OUT" ${BENCH_ARGS:-} 2>&1 \
                   | tee "$OUT/bench-prefill.log" | tail -70 ;;
        dense) timeout ${SWEEP_TIMEOUT:-240} python3 -m benchmarks.tune --shapes prefill --reps ${REPS:-10} \
                   --out "$OUT/tune-prefill.json" 2>&1 | tee "$OUT/tune-prefill.log" | tail -30 ;;
        uneven) timeout ${SWEEP_TIMEOUT:-240} python3 -m benchmarks.tune_grouped --layout uneven --reps ${REPS:-10} ${UNEVEN_ARGS:-} \
                   --out "$OUT/tune-uneven.json" 2>&1 | tee "$OUT/tune-uneven.log" | tail -40 ;;
        ncu) i=0
            IFS=';' read -ra runs <<< "${NCU_RUNS:-16384 4096 7168 --groups 16 --deepgemm;16384 4096 7168 128 160 1 --groups 16;2048 7168 16384 --deepgemm}"
            for args in "${runs[@]}"; do
                i=$((i + 1))
                timeout ${NCU_TIMEOUT:-120} ${NCU:-/usr/local/cuda/bin/ncu} --clock-control none -k regex:fp8_gemm \
                    --launch-skip 2 -c 4 --section SpeedOfLight --section ComputeWorkloadAnalysis \
                    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
                    --section LaunchStats python3 -m benchmarks.profile_one $args >"$OUT/ncu-$i.log" 2>&1
                echo "ncu $i ($args): $(grep -c "fp8_gemm" "$OUT/ncu-$i.log") kernel lines"
            done ;;
        tests) timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider \
                   ${TEST_FILES:-tests/gpu/test_dense.py tests/gpu/test_contiguous.py} 2>&1 \
                   | tee "$OUT/gpu-tests.log" | tail -8 ;;
        *) echo "unknown step $step" ;;
    esac
done
[ -d "${DG_JIT_CACHE_DIR:-/nonexistent}" ] && tar czf "$OUT/deepgemm-jit.tgz" -C "$(dirname "$DG_JIT_CACHE_DIR")" "$(basename "$DG_JIT_CACHE_DIR")"
echo "=== done ($(date -u +%H:%M:%S))"

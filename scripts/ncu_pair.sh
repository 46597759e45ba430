#!/usr/bin/env bash
# Nsight Compute on single calls of scripts/profile_one.py, for reading kernels side by side:
#   OUT=dir bash scripts/ncu_pair.sh NAME "PROFILE_ONE ARGS" [NAME "ARGS" ...]
# For each NAME, $OUT/ncu-NAME-raw.csv (every metric of the full set) and $OUT/ncu-NAME-source.csv
# (per-SASS-instruction counters, warp stall samples included). Clocks are left as they are.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD CUGEMM8_CACHE_DIR=${CUGEMM8_CACHE_DIR:-/tmp/cugemm8-cache}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
OUT=${OUT:-/tmp/cugemm8-out}
mkdir -p "$OUT"
while [ $# -ge 2 ]; do
    name=$1 args=$2; shift 2
    rep=/tmp/ncu-$name
    timeout ${NCU_TIMEOUT:-240} "$NCU" --clock-control none -k cugemm8_fp8_gemm --launch-skip 2 -c 1 --set full \
        --import-source no -f -o "$rep" python3 scripts/profile_one.py $args >"$OUT/ncu-$name.log" 2>&1
    "$NCU" --import "$rep.ncu-rep" --page raw --csv >"$OUT/ncu-$name-raw.csv" 2>>"$OUT/ncu-$name.log"
    "$NCU" --import "$rep.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-$name-source.csv" \
        2>>"$OUT/ncu-$name.log"
    echo "$name: $(grep -c . "$OUT/ncu-$name-source.csv") source lines"
done

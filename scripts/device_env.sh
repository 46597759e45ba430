# Sourced by the scripts/device_*.sh steps: the repository root, the environment they share, $OUT, DeepGEMM from
# .peer/deepgemm when present (its JIT cache from .peer/deepgemm-jit.tgz when carried), and the GPU's state.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1 CUGEMM8_NO_SHRINK=1 PYTHONPATH=$PWD CUGEMM8_CACHE_DIR=${CUGEMM8_CACHE_DIR:-/tmp/cugemm8-cache}
OUT=${OUT:-/tmp/cugemm8-out}
mkdir -p "$OUT"
if [ -d .peer/deepgemm/deep_gemm ]; then
    export PYTHONPATH=$PYTHONPATH:$PWD/.peer/deepgemm CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
           DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/deepgemm-jit}
    [ -f .peer/deepgemm-jit.tgz ] && tar xzf .peer/deepgemm-jit.tgz -C "$(dirname "$DG_JIT_CACHE_DIR")"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,driver_version \
    --format=csv >"$OUT/nvidia-smi.txt" 2>&1

# Temporary: ncu WarpStateStats + SpeedOfLight for dense vs contiguous at the same tile (not committed).
export PYTHONPATH=$PWD
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for spec in "32768 4096 7168 256 128 1" "32768 4096 7168 256 128 1 --groups 4"; do
  echo "=== $spec"
  timeout 200 $NCU --clock-control none -k cugemm8_fp8_gemm --launch-skip 2 -c 1 --section WarpStateStats --section SpeedOfLight --section LaunchStats --metrics smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_sleeping,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_misc,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_sample_count python3 scripts/profile_one.py $spec 2>&1 | grep -vE "^\s*$|----|==PROF==|Section:|OPT|^ +[A-Z][a-z].*\.$" | grep -E "KernelConfig|Duration|Frequency|Throughput|Stall|stalled|sample|Warp Cycles|Registers|Issued" 
done

# session 13 run 2: dX as the resident kernel (out_proj's column block kept on chip, persistent) and dW with 32-bit pair
# numbers (no 64-bit division calls): their GPU tests, their configs alone (bwd_probe.py), ln_linear_backward's kernel
# with its loads one tile ahead by hand (lnbwd_prefetch.py), ncu over the three kernels, the training breakdown
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session13
timeout 150 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_opm_kernel.py -k "opm and (grad or backward or train or determin)" 2>&1 | grep -v DEBUG > $OUT/2-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/2-tests.log | head -12
timeout 120 python3 $L/bwd_probe.py > $OUT/2-bwd-probe.log 2>&1; grep -v Warn $OUT/2-bwd-probe.log
timeout 90 python3 $L/lnbwd_prefetch.py > $OUT/2-lnbwd-prefetch.log 2>&1; grep -v Warn $OUT/2-lnbwd-prefetch.log
EVOFUSE_AUTOTUNE=0 timeout 120 ncu --kernel-name regex:"_ln_linear_bwd_kernel|_opm_dx_kernel|_opm_dw_kernel" --launch-skip 3 --launch-count 3 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
  python3 $L/ncu_ln.py > $OUT/2-ncu.log 2>&1; grep -E "_kernel|Throughput|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Registers Per|Eligible|Issued Warp|Duration|Block Limit|stall|Stall" $OUT/2-ncu.log | head -80
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/2-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/2-breakdown-opm-train.log | head -14

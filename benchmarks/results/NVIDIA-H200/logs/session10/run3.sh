export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session10
timeout 120 python3 $L/bwd_configs.py bfloat16 stages 2>&1 | grep -v Warn | tee $OUT/3-bwd-configs.log
TRITON_PRINT_AUTOTUNING=1 timeout 60 python3 benchmarks/breakdown.py att-af2-main 2>&1 | grep -E "best config|forward|_row" | tee $OUT/3-fwd-pick.log
timeout 240 ncu --kernel-name regex:"_row_attention_bwd_dz_kernel|_row_attention_bwd_keys_kernel|_row_attention_kernel" --launch-count 3 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
  python3 $L/ncu_step.py > $OUT/3-ncu.log 2>&1; grep -E "_kernel|Throughput|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Hit Rate|Registers Per|Eligible|Issued Warp|Duration|Block Limit" $OUT/3-ncu.log | head -90

export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session10
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
timeout 300 python3 $L/bwd_configs.py bfloat16 2>&1 | grep -v Warn | tee $OUT/1-bwd-configs.log
timeout 90 python3 $L/split_tiles.py 2>&1 | grep -v Warn | tee $OUT/1-split-tiles.log
timeout 90 python3 benchmarks/breakdown.py att-af2-main --train 2>&1 | grep -v Warn | tee $OUT/1-breakdown-att-train.log | head -30

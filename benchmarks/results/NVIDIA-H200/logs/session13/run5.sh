# session 13 run 5: host microseconds of the training step's single operations and launchers (host_ops.py)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session13
timeout 120 python3 $L/host_ops.py > $OUT/5-host-ops.log 2>&1; grep -v Warn $OUT/5-host-ops.log
timeout 60 python3 benchmarks/host_time.py opm-af2-main > $OUT/5-host-time.log 2>&1; grep -v Warn $OUT/5-host-time.log

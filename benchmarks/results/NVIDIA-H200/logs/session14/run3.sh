# session 14 run 3: does the training step wait on the device inside its backward (wait_probe.py)?
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session14
timeout 120 python3 $L/wait_probe.py > $OUT/3-wait-probe.log 2>&1; cat $OUT/3-wait-probe.log | head -80

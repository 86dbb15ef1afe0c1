# session 15 run 5: the same step reads ~1.95 ms in some processes and 2.2-2.8 in others (runs 3-4). Is it the hand-off
# between the calling thread and the autograd engine's device thread? Alternating processes: the default engine, the
# backward on the calling thread (one-thread), and the default engine with the process pinned to two cores (taskset)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session15
nproc; lscpu | grep -E "Model name|NUMA node|Socket|Thread" | head -8
for i in 1 2 3; do
  timeout 60 python3 $L/ab_step.py opm-af2-main bfloat16 multi 2>&1 | grep -v Warn | tail -1 | tee -a $OUT/5-threads.log
  timeout 60 python3 $L/ab_step.py opm-af2-main bfloat16 one one-thread 2>&1 | grep -v Warn | tail -1 | tee -a $OUT/5-threads.log
  timeout 60 taskset -c 2,3 python3 $L/ab_step.py opm-af2-main bfloat16 pin2 2>&1 | grep -v Warn | tail -1 | tee -a $OUT/5-threads.log
done

# session 14 run 8: the bench's reading of the training step against breakdown/host_time's (gc_probe.py)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session14
timeout 120 python3 $L/gc_probe.py > $OUT/8-gc-probe.log 2>&1; grep -v Warn $OUT/8-gc-probe.log

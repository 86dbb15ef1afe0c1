# session 14 run 5: the dW kernel's forms (dw_probe.py): run 4 read it at 0.279 ms with Gs made on chip on its
# gradient side (0.133 with Gs from memory)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session14
timeout 150 python3 $L/dw_probe.py > $OUT/5-dw-probe.log 2>&1; grep -v Warn $OUT/5-dw-probe.log

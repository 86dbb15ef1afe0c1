# session 20 run 5 (the final code, as run 4): the training row's spread over processes with each process's host
# time (spread.py), then the bench beside the peers again (run 4's results.json did not come back: too many files).
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session20
nproc; nvidia-smi topo -m 2>/dev/null | head -4
timeout 230 python3 $L/spread.py 6 > $OUT/5-spread.log 2>&1; grep -v -E "Warn|warn_once" $OUT/5-spread.log
timeout 230 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/5-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/5-bench-opm.log; find $OUT/opm -type f ! -name results.json -delete

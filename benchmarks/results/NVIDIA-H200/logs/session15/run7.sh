# session 15 run 7: the persistent projections kernel (`_ln_linear_kernel`: programs take row tiles in turn, the next
# tile's rows and mask loaded ahead by hand, one weight tile loaded once a program): its GPU tests and the OPM GPU
# tests, the forward breakdowns (bf16 and float32), the bench (evofuse bf16 at the three OPM shapes, with training)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session15
timeout 170 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_gpu_launch_path.py -k "opm or ln_linear or split or launch" 2>&1 | grep -v DEBUG > $OUT/7-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/7-tests.log | head -12
timeout 60 python3 benchmarks/breakdown.py opm-af2-main opm-af2-extra > $OUT/7-breakdown-bf16.log 2>&1; grep -E "forward|_ln_linear|two_pass" $OUT/7-breakdown-bf16.log
timeout 50 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 > $OUT/7-breakdown-fp32.log 2>&1; grep -E "forward|_ln_linear|_opm_kernel" $OUT/7-breakdown-fp32.log
timeout 120 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers none --out $OUT/opm > $OUT/7-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/7-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete

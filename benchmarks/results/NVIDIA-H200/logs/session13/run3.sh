# session 13 run 3: ln_linear_backward's kernel with its loads one 16-row tile ahead (from run 2's probe), with run 2's
# dX and dW: every OPM GPU test, autograd/library OPM tests, memcheck, the training breakdown, the bench (bf16 forward
# and forward+backward at the three OPM suite shapes beside eager fp32 and the folded einsum)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session13
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "opm or ln_linear or backward_kernels" 2>&1 | grep -v DEBUG > $OUT/3-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/3-tests.log | head -12
timeout 100 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept" 2>&1 | grep -v DEBUG > $OUT/3-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/3-tests2.log | head -6
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "(opm_gradients_awkward and (17 or 33) and not float32) or ln_linear_backward or backward_kernels" > $OUT/3-memcheck.log 2>&1; tail -2 $OUT/3-memcheck.log
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/3-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/3-breakdown-opm-train.log | head -16
timeout 220 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/3-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/3-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete

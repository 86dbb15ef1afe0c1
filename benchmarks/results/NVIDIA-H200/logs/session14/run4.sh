# session 14 run 4: Gs never in memory (the dX and dW kernels make it on chip from grad_out and the scale; dW sums
# out_proj's bias gradient in a column more), no-op casts skipped: every OPM GPU test, autograd/library OPM tests,
# memcheck over the small OPM gradient and backward-kernel tests, the training breakdown, host time, the bench (bf16
# forward and forward+backward at the three OPM suite shapes beside eager fp32 and the folded einsum)
export PYTHONPATH=$PWD
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/4-host-speed.log
timeout 170 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "opm or ln_linear or backward_kernels" 2>&1 | grep -v DEBUG > $OUT/4-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/4-tests.log | head -12
timeout 90 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept or bias" 2>&1 | grep -v DEBUG > $OUT/4-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/4-tests2.log | head -6
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_gpu.py tests/test_opm_kernel.py tests/test_autograd.py -k "(opm_gradients_awkward and (17 or 33) and not float32) or backward_kernels or bias_gradient_with" > $OUT/4-memcheck.log 2>&1; tail -2 $OUT/4-memcheck.log
timeout 40 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/4-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/4-breakdown-opm-train.log | head -14
timeout 40 python3 benchmarks/host_time.py opm-af2-main > $OUT/4-host-time.log 2>&1; grep -v Warn $OUT/4-host-time.log
timeout 200 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/4-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/4-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete

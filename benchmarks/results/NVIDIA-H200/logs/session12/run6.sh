# session 12 run 6: ln_linear_backward on rows evenly strided (one row stride, no b, s, i split: sm_90 spills 280 -> 32 bytes):
# OPM GPU tests with the new kernel's bf16 test, memcheck, the kernel alone against session 11's chain, the training
# breakdown, host probe, the bench
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session12; L11=benchmarks/results/NVIDIA-H200/logs/session11
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py -k "opm or ln_linear" 2>&1 | grep -v DEBUG > $OUT/6-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/6-tests.log | head -12
timeout 100 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset" 2>&1 | grep -v DEBUG > $OUT/6-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/6-tests2.log | head -6
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_gpu.py tests/test_linear_kernel.py -k "(opm_gradients_awkward and (17 or 33) and not float32) or ln_linear_backward" > $OUT/6-memcheck.log 2>&1; tail -2 $OUT/6-memcheck.log
timeout 60 python3 $L/lnbwd_probe.py > $OUT/6-lnbwd-probe.log 2>&1; cat $OUT/6-lnbwd-probe.log | grep -v Warn
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/6-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/6-breakdown-opm-train.log | head -18
timeout 60 python3 $L11/host_probe.py opm-af2-main > $OUT/6-host-probe.log 2>&1; head -1 $OUT/6-host-probe.log
timeout 200 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/6-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/6-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete

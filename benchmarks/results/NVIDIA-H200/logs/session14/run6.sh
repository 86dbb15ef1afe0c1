# session 14 run 6, the final code (Gs from memory again; host trims; TunedLaunch's one-lookup path): the OPM GPU
# tests with the autotuned-training test (both operations), the OPM autograd/library tests, `evofuse check` at
# att-af2-main bf16 (row attention's autotuned forward through the one-lookup path), the training breakdown, the
# bench (evofuse bf16 forward and forward+backward at the three OPM suite shapes; the peers' rows are run 4's)
export PYTHONPATH=$PWD
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/6-host-speed.log
timeout 170 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_cached_launch.py -k "opm or ln_linear or backward_kernels or autotuned or launch" 2>&1 | grep -v DEBUG > $OUT/6-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/6-tests.log | head -12
timeout 80 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept" 2>&1 | grep -v DEBUG > $OUT/6-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/6-tests2.log | head -6
timeout 60 python3 -m evofuse check --case att-af2-main --case opm-af2-main --dtype bfloat16 --trials 3 > $OUT/6-check.log 2>&1; tail -8 $OUT/6-check.log
timeout 40 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/6-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/6-breakdown-opm-train.log | head -14
timeout 100 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers none --out $OUT/opm > $OUT/6-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/6-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete
timeout 40 python3 benchmarks/host_time.py opm-af2-main > $OUT/6-host-time.log 2>&1; grep -v Warn $OUT/6-host-time.log

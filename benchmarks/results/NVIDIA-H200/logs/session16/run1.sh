# session 16 run 1: the multi-pass kernel's float32 (SPLIT) form (four passes of 128 pairs, the hi/lo products of the
# MSA rows as one loop over the rows taken three times, three epilogue products): the OPM GPU tests (every candidate
# config, the suite shapes, a 16k-row float32 MSA), the autograd tests, memcheck over the small float32 shapes, each
# SPLIT config forced at opm-af2-main beside bf16's (split_configs.py), the float32 forward's breakdown
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session16
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/1-host-speed.log
timeout 180 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_cached_launch.py -k "opm or ln_linear or backward_kernels or autotuned or launch" 2>&1 | grep -v DEBUG > $OUT/1-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -12
timeout 120 python3 $L/split_configs.py opm-af2-main > $OUT/1-split-configs.log 2>&1; grep -v Warn $OUT/1-split-configs.log
timeout 40 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 > $OUT/1-breakdown-fp32.log 2>&1; grep -v Warn $OUT/1-breakdown-fp32.log | head -12
timeout 90 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept or graph" 2>&1 | grep -v DEBUG > $OUT/1-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/1-tests2.log | head -6
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_opm_kernel.py -k "multipass_kernel_takes or chunks or hidden_dim_64" > $OUT/1-memcheck.log 2>&1; tail -2 $OUT/1-memcheck.log

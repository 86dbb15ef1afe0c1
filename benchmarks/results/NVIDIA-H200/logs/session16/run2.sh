# session 16 run 2: the multi-pass kernel's SPLIT form mended (each epilogue block's products from zero, added to the
# workspace's and the earlier parts' sums in IEEE float32; the main loop in whole steps a term; x @ w^T with 128 pairs
# as M): the OPM GPU tests, memcheck, and split_probe.py at S = 256, 512, 1024 (each SPLIT config, the one-pass form,
# bf16), so that the kernel's main loop and epilogue separate
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session16
timeout 180 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_cached_launch.py -k "opm or ln_linear or backward_kernels or autotuned or launch" 2>&1 | grep -v DEBUG > $OUT/2-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/2-tests.log | head -12
timeout 200 python3 $L/split_probe.py 512 256 1024 > $OUT/2-split-probe.log 2>&1; grep -v Warn $OUT/2-split-probe.log
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_opm_kernel.py -k "multipass_kernel_takes or chunks or hidden_dim_64" > $OUT/2-memcheck.log 2>&1; tail -2 $OUT/2-memcheck.log

# session 14 run 2: the backward's host trims (parameter gradients rounded in ln_linear_backward, db's first block one
# float32 product, one view a block slice) and TunedLaunch's one-lookup path: the OPM/LayerNorm GPU tests, the OPM
# autograd/library tests (CUDA tensors), the cached-launch tests; then the host time of each part and the step's
# breakdown at opm-af2-main bf16
export PYTHONPATH=$PWD
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/2-host-speed.log
timeout 150 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_cached_launch.py -k "opm or ln_linear or layer_norm or launch or tuned" 2>&1 | grep -v DEBUG > $OUT/2-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/2-tests.log | head -12
timeout 100 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept or whole" 2>&1 | grep -v DEBUG > $OUT/2-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/2-tests2.log | head -6
timeout 60 python3 benchmarks/host_time.py opm-af2-main > $OUT/2-host-time.log 2>&1; grep -v Warn $OUT/2-host-time.log
timeout 40 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/2-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/2-breakdown-opm-train.log | head -8
timeout 60 python3 benchmarks/host_lines.py opm-af2-main --train --top 30 > $OUT/2-lines-train.log 2>&1; grep -v Warn $OUT/2-lines-train.log | head -34

# session 14 run 1: session 13's code not yet run on a GPU (forward/backward host trims, 64-bit tile starts in the
# LayerNorm backward kernels): the OPM/LayerNorm GPU tests and the OPM autograd/library tests; then where the host's
# time goes line by line (host_lines.py) in the bf16 training step and the float32 forward at opm-af2-main, the
# host time of each part (host_time.py) and the float32 forward's kernels (breakdown.py)
export PYTHONPATH=$PWD
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/1-host-speed.log
timeout 150 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_attention_kernel.py -k "opm or ln_linear or layer_norm or mask_of_any or row_coords" 2>&1 | grep -v DEBUG > $OUT/1-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -12
timeout 90 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept or whole" 2>&1 | grep -v DEBUG > $OUT/1-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/1-tests2.log | head -6
timeout 60 python3 benchmarks/host_lines.py opm-af2-main --train --top 45 > $OUT/1-lines-train.log 2>&1; grep -v Warn $OUT/1-lines-train.log | head -50
timeout 60 python3 benchmarks/host_lines.py opm-af2-main --dtype float32 --top 45 > $OUT/1-lines-fp32.log 2>&1; grep -v Warn $OUT/1-lines-fp32.log | head -50
timeout 60 python3 benchmarks/host_time.py opm-af2-main > $OUT/1-host-time.log 2>&1; grep -v Warn $OUT/1-host-time.log
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 > $OUT/1-breakdown-fp32.log 2>&1; grep -v Warn $OUT/1-breakdown-fp32.log | head -16

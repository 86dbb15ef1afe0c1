# session 20 run 1: the partial sums ended in one launch (OPM backward: out_proj's weight and bias; ln_linear_backward:
# the programs' sums and the weights' cast): gpu tests of the OPM training paths, the tape and partial-sum tests; where
# the step's host time goes (probe.py); the step's kernels; the step against session 19's final code (.out/base20) in
# alternating processes; the bench's training row.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session20
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 170 python3 -m pytest -q -n 16 tests/test_partial_sums.py tests/test_tape.py tests/test_autograd.py tests/test_library.py tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_cached_launch.py -k "sums or fixed_order or refuses or tape or (opm and (autograd or library or gradients or training or wgmma or long_memory or offsets)) or ln_linear or hopper or (test_autograd and opm) or (test_library and opm) or autotuned_training or replay or single_launch or backward_kernels" > $OUT/1-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -20
timeout 80 python3 $L/probe.py > $OUT/1-probe.log 2>&1; grep -v -E "Warn|warn_once" $OUT/1-probe.log | head -70
timeout 45 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 --train > $OUT/1-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/1-breakdown.log | head -40
timeout 170 python3 benchmarks/step_ab.py --rounds 2 . .out/base20 > $OUT/1-step-ab.log 2>&1; grep -v Warn $OUT/1-step-ab.log
timeout 60 python3 -m evofuse bench --suite opm-af2-main --dtype bfloat16 --train --peers none --out $OUT/b1 > $OUT/1-bench.log 2>&1; grep -E "^  opm-af2-main " $OUT/1-bench.log
find $OUT -name "*.png" -delete

# session 13 run 1: the GPU tests of session 12's last three commits (SM-count guard, empty sizes, mask copy order; the
# hidden_dim 64 kept-or-recomputed test), then the backward's memory-bound kernels alone (bwd_probe.py) and the
# training breakdown
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session13
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py -k "opm or ln_linear" 2>&1 | grep -v DEBUG > $OUT/1-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -12
timeout 100 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept" 2>&1 | grep -v DEBUG > $OUT/1-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/1-tests2.log | head -6
timeout 150 python3 $L/bwd_probe.py > $OUT/1-bwd-probe.log 2>&1; grep -v Warn $OUT/1-bwd-probe.log
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/1-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/1-breakdown-opm-train.log | head -22

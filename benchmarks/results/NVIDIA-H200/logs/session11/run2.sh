# session 11 run 2: the weight-gradient kernel with Gs from the dX kernel (both operands pipelined), the host time
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session11
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py -k "opm_gradients_awkward or (suite_gradients and opm) or training_memory" 2>&1 | grep -v DEBUG | tee $OUT/2-tests.log | grep -E "passed|failed|FAILED|Error" | head -12
timeout 100 python3 -m pytest -q tests/test_autograd.py tests/test_library.py -k "determin or opcheck or eager" 2>&1 | grep -v DEBUG | tee $OUT/2-tests2.log | grep -E "passed|failed|FAILED" | head -6
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train --host 2>&1 | grep -v Warn | tee $OUT/2-breakdown-opm-train.log | head -60

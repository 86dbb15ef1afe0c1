# session 11 run 4: Gs one elementwise pass, the dX kernel on plain loads, one block of rows at opm-af2-main
# (db straight from cuBLAS, dW straight from its kernel): tests, the training breakdown and host time
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session11
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py -k "opm_gradients_awkward or (suite_gradients and opm) or training_memory" 2>&1 | grep -v DEBUG | tee $OUT/4-tests.log | grep -E "passed|failed|FAILED|Error" | head -12
timeout 100 python3 -m pytest -q tests/test_autograd.py tests/test_library.py -k "determin or opcheck or eager" 2>&1 | grep -v DEBUG | tee $OUT/4-tests2.log | grep -E "passed|failed|FAILED" | head -6
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/4-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/4-breakdown-opm-train.log | head -30
timeout 120 python3 $L/host_probe.py opm-af2-main > $OUT/4-host-probe.log 2>&1; grep "host alone" $OUT/4-host-probe.log

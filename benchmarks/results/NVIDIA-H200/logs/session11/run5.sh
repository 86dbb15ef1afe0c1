# session 11 run 5: the per-pair scale precomputed (forward and backward), Gs and the bias sums in one kernel:
# OPM tests on the GPU, the forward and training breakdowns, the forward with and without the mask, host time
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session11
timeout 240 python3 -m pytest -q -n 16 tests/test_gpu.py -k "opm" 2>&1 | grep -v DEBUG | tee $OUT/5-tests.log | grep -E "passed|failed|FAILED|Error" | head -12
timeout 100 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py tests/test_opm_kernel.py -k "not att" 2>&1 | grep -v DEBUG | tee $OUT/5-tests2.log | grep -E "passed|failed|FAILED" | head -6
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/5-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/5-breakdown-opm-train.log | head -24
timeout 60 python3 benchmarks/breakdown.py opm-af2-main > $OUT/5-breakdown-opm-fwd.log 2>&1; grep -v Warn $OUT/5-breakdown-opm-fwd.log | head -10
timeout 60 python3 $L/fwd_mask.py opm-af2-main 2>&1 | tee $OUT/5-fwd-mask.log
timeout 120 python3 $L/host_probe.py opm-af2-main > $OUT/5-host-probe.log 2>&1; grep "host alone" $OUT/5-host-probe.log

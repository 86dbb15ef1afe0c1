# session 19 run 1: issue 3's last checks on the Gluon path (the >2**31-element output, opm-long's memory, every
# config; the tests now assert which kernel ran), the OPM gpu selection and autograd on the code after session 18's
# last device run (dispatch in supported(), the GLUON_API gate, the drain chunks in one helper), the bf16 forward's
# breakdown, and where the training step's host time goes now (host_lines.py, host_time.py).
export PYTHONPATH=$PWD
timeout 150 python3 -m pytest -q -n 8 tests/test_gpu.py -k "offsets_past or long_memory or wgmma" > $OUT/1-issue3.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/1-issue3.log | head -20
timeout 170 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "opm_awkward or (suite_shapes and opm) or (every_candidate and opm) or ln_linear or forward_awkward or multipass" > $OUT/1-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -20
timeout 45 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k opm > $OUT/1-tests2.log 2>&1; grep -E "passed|failed|FAILED" $OUT/1-tests2.log | head -6
timeout 35 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 > $OUT/1-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/1-breakdown.log | head -12
timeout 60 python3 benchmarks/host_time.py opm-af2-main > $OUT/1-host-time.log 2>&1; grep -v Warn $OUT/1-host-time.log | tail -3
timeout 80 python3 benchmarks/host_lines.py opm-af2-main --train --top 60 > $OUT/1-lines-train.log 2>&1; grep -v Warn $OUT/1-lines-train.log | head -5

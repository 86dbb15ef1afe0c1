# session 19 run 2: tapes (evofuse/ops/_tape.py) for the Outer Product Mean's eager 16-bit training forward and
# backward: their gpu tests with the OPM autograd/library tests on CUDA; the host time of the training step
# (host_time.py); the step against the code before tapes (.out/base: ec60b46's evofuse, carried) in alternating
# processes (step_ab.py); then, if the tests passed, the bench beside the peers.
export PYTHONPATH=$PWD
timeout 90 python3 -m pytest -q -n 8 tests/test_tape.py tests/test_autograd.py tests/test_library.py -k "opm or tape or replay" > $OUT/2-tests.log 2>&1; rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/2-tests.log | head -20
timeout 60 python3 benchmarks/host_time.py opm-af2-main > $OUT/2-host-time.log 2>&1; grep -v Warn $OUT/2-host-time.log | tail -2
timeout 170 python3 benchmarks/step_ab.py --rounds 2 . .out/base > $OUT/2-step-ab.log 2>&1; grep -v Warn $OUT/2-step-ab.log
if [ $rc = 0 ]; then timeout 200 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/2-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/2-bench-opm.log; find $OUT/opm -type f ! -name results.json -delete; fi

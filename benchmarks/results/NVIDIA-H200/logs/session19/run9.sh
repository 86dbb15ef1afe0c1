# session 19 run 9: the Gluon kernel launched through its compiled binary after a key's first launch (the host's
# time a training step and forward): its tests (every config, awkward shapes; repeated calls of a key take the
# binary), the tape tests, the OPM training and autotuned gpu tests; step_ab against run 4's code; the bench's
# training row alone.
export PYTHONPATH=$PWD
timeout 150 python3 -m pytest -q -n 16 tests/test_tape.py tests/test_gpu.py tests/test_autograd.py -k "tape or wgmma or autotuned or (opm and (gradients or training or offsets)) or (test_autograd and opm)" > $OUT/9-tests.log 2>&1; rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/9-tests.log | head -20
if [ $rc = 0 ]; then timeout 100 python3 benchmarks/step_ab.py --rounds 1 . .out/base2 > $OUT/9-step-ab.log 2>&1; grep -v Warn $OUT/9-step-ab.log; timeout 60 python3 -m evofuse bench --suite opm-af2-main --dtype bfloat16 --train --peers none --out $OUT/b > $OUT/9-bench.log 2>&1; grep -E "^  opm-af2-main" $OUT/9-bench.log; find $OUT -name "*.png" -delete; fi

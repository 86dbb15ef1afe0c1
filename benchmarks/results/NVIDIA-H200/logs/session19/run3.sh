# session 19 run 3: the tape's replay no longer holds an op's result past its last use (the memory peak of run 2's
# failures); the tape gpu tests and OPM autograd/library tests; where the taped step's host time goes
# (tape_probe.py); the step against the code before tapes (step_ab.py, its worker call mended).
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session19
timeout 90 python3 -m pytest -q -n 8 tests/test_tape.py tests/test_autograd.py tests/test_library.py -k "opm or tape or replay" > $OUT/3-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/3-tests.log | head -20
timeout 90 python3 $L/tape_probe.py > $OUT/3-tape-probe.log 2>&1; grep -v Warn $OUT/3-tape-probe.log | head -60
timeout 200 python3 benchmarks/step_ab.py --rounds 2 . .out/base > $OUT/3-step-ab.log 2>&1; grep -v Warn $OUT/3-step-ab.log

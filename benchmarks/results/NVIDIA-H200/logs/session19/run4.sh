# session 19 run 4: tapes replay views as addresses (launches) and as_strided calls (ops), allocations as
# torch.empty_strided (run 3: the tape alone took 1188 us of host for 50 steps, ~23 us an ATen overload's call):
# the tape gpu tests and OPM autograd/library tests; tape_probe.py; step_ab.py against the code before tapes; then,
# if the tests passed, the bench beside the peers.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session19
timeout 90 python3 -m pytest -q -n 8 tests/test_tape.py tests/test_autograd.py tests/test_library.py -k "opm or tape or replay" > $OUT/4-tests.log 2>&1; rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/4-tests.log | head -20
timeout 90 python3 $L/tape_probe.py > $OUT/4-tape-probe.log 2>&1; grep -v Warn $OUT/4-tape-probe.log | head -9
timeout 200 python3 benchmarks/step_ab.py --rounds 2 . .out/base > $OUT/4-step-ab.log 2>&1; grep -v Warn $OUT/4-step-ab.log | tail -3
if [ $rc = 0 ]; then timeout 220 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/4-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/4-bench-opm.log; find $OUT/opm -type f ! -name results.json -delete; fi

# session 19 run 5: the training forward on Hopper's Gluon kernel (the projections write a and a pass-major copy;
# the tape repeats the Gluon launcher's call as one step): the OPM gpu tests that train or take the projections or
# the Gluon kernel, the tape tests, the OPM autograd/library tests on CUDA; the training step's kernels
# (breakdown.py --train); step_ab.py against run 4's code (.out/base2, taped, multi-pass training forward); then,
# if the tests passed, the bench beside the peers.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session19
timeout 200 python3 -m pytest -q -n 16 tests/test_tape.py tests/test_autograd.py tests/test_library.py tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "tape or (opm and (autograd or library or gradients or training or wgmma or long_memory or offsets)) or ln_linear or hopper or (test_autograd and opm) or (test_library and opm)" > $OUT/5-tests.log 2>&1; rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/5-tests.log | head -20
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 --train > $OUT/5-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/5-breakdown.log | head -24
timeout 200 python3 benchmarks/step_ab.py --rounds 2 . .out/base2 > $OUT/5-step-ab.log 2>&1; grep -v Warn $OUT/5-step-ab.log | tail -8
if [ $rc = 0 ]; then timeout 220 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/5-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/5-bench-opm.log; find $OUT/opm -type f ! -name results.json -delete; fi

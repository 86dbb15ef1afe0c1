# session 19 run 7, the final code (tapes refuse value-dependent ops; the Gluon kernel's config autotuned per
# bucketed key): the tape tests, the Gluon kernel's tests, the autotuned paths (the Gluon kernel's tuner at the seed
# shapes), the OPM training gpu tests, the OPM autograd/library tests on CUDA; then the bench at opm-af2-main
# (autotuning on, as users run it) beside the peers.
export PYTHONPATH=$PWD
timeout 200 python3 -m pytest -q -n 16 tests/test_tape.py tests/test_autograd.py tests/test_library.py tests/test_gpu.py tests/test_opm_kernel.py -k "tape or wgmma or autotuned or hopper or (opm and (autograd or library or gradients or training or long_memory or offsets)) or (test_autograd and opm) or (test_library and opm)" > $OUT/7-tests.log 2>&1; rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/7-tests.log | head -20
if [ $rc = 0 ]; then timeout 120 python3 -m evofuse bench --suite opm-af2-main --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/7-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/7-bench-opm.log; find $OUT/opm -type f ! -name results.json -delete; fi

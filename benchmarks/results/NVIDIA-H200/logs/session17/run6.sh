# session 17 run 6: the final code (the float32 operand buffers now poisoned with NaN in the tests): the OPM,
# linear-kernel, backward-kernel and autotuned GPU tests as in run 2.
export PYTHONPATH=$PWD
timeout 250 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_opm_kernel.py tests/test_linear_kernel.py -k "opm or backward_kernels or autotuned or split or ceil or ln_linear" 2>&1 | grep -v DEBUG > $OUT/6-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/6-tests.log | head -12

# session 17 run 8: the candidate lists built once and both workspace sizes computed per call: each candidate of
# the OPM multi-pass kernel and of row attention's backward kernels on the H200, with the float32 OPM kernel tests
export PYTHONPATH=$PWD
timeout 200 python3 -m pytest -q -n 8 tests/test_gpu.py tests/test_opm_kernel.py -k "every_candidate or every_backward or multipass_kernel_takes or float16_operands" 2>&1 | grep -v DEBUG > $OUT/8-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/8-tests.log | head -8

# session 12 run 9: the final commit's changes on CUDA (empty MSA sizes take the reference; ln_linear_backward's SM
# count only for CUDA tensors): the OPM tests of test_autograd and the new kernel's tests
export PYTHONPATH=$PWD
timeout 150 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_linear_kernel.py -k "opm or empty or ln_linear_backward" 2>&1 | grep -v DEBUG > $OUT/9-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/9-tests.log | head -8

# session 17 run 7: the new operand-layout test on CUDA, with the float32 OPM kernel tests beside it
export PYTHONPATH=$PWD
timeout 200 python3 -m pytest -q -n 8 tests/test_opm_kernel.py -k "float16_operands or multipass_kernel_takes or hidden_dim_64 or far_outside" 2>&1 | grep -v DEBUG > $OUT/7-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/7-tests.log | head -8

# session 16 run 6: run 5's GPU tests again (cut there at 190 s at ~97%, no failure shown), on the same code
export PYTHONPATH=$PWD
timeout 215 python3 -m pytest -q -n 16 -rf tests/test_gpu.py tests/test_opm_kernel.py -k "opm or backward_kernels or autotuned" 2>&1 | grep -v -E "DEBUG|Warn|warner" > $OUT/6-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/6-tests.log | head -12; tail -1 $OUT/6-tests.log

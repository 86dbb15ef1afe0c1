# session 12 run 7: the row attention GPU tests (run 1 ran them with 16 workers beside the OPM's: out of memory), on the
# committed code (its backward's kernel table changed this session), four workers
export PYTHONPATH=$PWD
timeout 400 python3 -m pytest -q -n 4 tests/test_gpu.py -k "not opm" 2>&1 | grep -v DEBUG > $OUT/7-tests-att.log; grep -E "passed|failed|FAILED|Error" $OUT/7-tests-att.log | head -12
timeout 100 python3 -m pytest -q -n 4 tests/test_autograd.py tests/test_library.py -k "att" 2>&1 | grep -v DEBUG > $OUT/7-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/7-tests2.log | head -6

# session 11 run 8: the final backward (blocks of at most 256 MiB again, two of 192 rows at opm-af2-main; Gs once):
# every OPM GPU test, memcheck over the small gradient tests, the training breakdown, the bf16 bench at the three
# suite shapes beside eager fp32 and the folded einsum
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session11
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py -k "opm" 2>&1 | grep -v DEBUG | tee $OUT/8-tests.log | grep -E "passed|failed|FAILED|Error" | head -12
timeout 100 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile" 2>&1 | grep -v DEBUG | tee $OUT/8-tests2.log | grep -E "passed|failed|FAILED" | head -6
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_gpu.py -k "opm_gradients_awkward and (17 or 33) and not float32" 2>&1 | tee $OUT/8-memcheck.log | tail -2
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/8-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/8-breakdown-opm-train.log | head -16
timeout 300 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm 2>&1 | tee $OUT/8-bench-opm.log | grep -E "^  (opm|att)-"
find $OUT/opm -type f ! -name results.json -delete

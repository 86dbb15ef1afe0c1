export PYTHONPATH=$PWD
timeout 150 python3 -m pytest -q -n 8 tests/test_gpu.py tests/test_linear_kernel.py -k "(opm_awkward and float32) or (suite_shapes and opm and float32) or opm_long_memory or opm_long_msa or split" 2>&1 | grep -v DEBUG | tee $OUT/5-tests.log | tail -4
timeout 60 python3 -m evofuse bench --suite opm-af2-main --dtype float32 --peers "eager fp32" --out $OUT/opm32 2>&1 | grep -E "^  (opm|att)-" | tee $OUT/5-bench-opm32.log
find $OUT/opm32 -type f ! -name results.json -delete
timeout 100 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 --host > $OUT/5-opm32-host.log 2>&1
grep -E "host|forward|ms " $OUT/5-opm32-host.log | grep -v "at::native" | head -16

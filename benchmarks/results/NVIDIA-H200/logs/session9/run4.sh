export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session9
timeout 150 python3 -m pytest -q tests/test_gpu.py -k "float32 and (attention_gradients_awkward or (suite_gradients and att) or every_backward_config)" 2>&1 | grep -v DEBUG | tee $OUT/4-tests.log | tail -3
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_gpu.py -k "attention_gradients_awkward and 17-5" 2>&1 | tee $OUT/4-memcheck.log | tail -3
timeout 100 python3 -m evofuse bench --suite att-af2-main --dtype bfloat16 --train --peers "eager fp32" --out $OUT/att 2>&1 | grep -E "^  (opm|att)-" | tee $OUT/4-bench-att.log
find $OUT/att -type f ! -name results.json -delete
timeout 150 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 --host > $OUT/4-opm32-host.log 2>&1
grep -E "host|forward" $OUT/4-opm32-host.log | head -12

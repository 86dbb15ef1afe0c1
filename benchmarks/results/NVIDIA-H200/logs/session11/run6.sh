# session 11 run 6: the final Outer Product Mean code of this session: GPU tests (every OPM test, the gradient
# tests at small shapes under memcheck), then the bf16 forward and forward+backward at the three suite shapes
# beside eager fp32 and the folded einsum (bf16) in one run
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session11
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py -k "opm" 2>&1 | grep -v DEBUG | tee $OUT/6-tests.log | grep -E "passed|failed|FAILED|Error" | head -12
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_gpu.py -k "opm_gradients_awkward and (17 or 33) and not float32" 2>&1 | tee $OUT/6-memcheck.log | tail -2
timeout 300 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm 2>&1 | tee $OUT/6-bench-opm.log | grep -E "^  (opm|att)-"
find $OUT/opm -type f ! -name results.json -delete

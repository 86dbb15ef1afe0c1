# carries .whl (cuEquivariance's ops wheel) into /tmp/site for run 5b; the new backward candidate's GPU test; the fp32 OPM row
export PYTHONPATH=$PWD:/tmp/site; L=benchmarks/results/NVIDIA-H200/logs/session10
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
timeout 150 python3 -m pytest -q tests/test_gpu.py -k "every_backward_config" 2>&1 | grep -v DEBUG | tee $OUT/5a-tests.log | grep -E "passed|failed|FAILED|Error"
timeout 80 python3 -m evofuse bench --suite opm-af2-main --dtype float32 --peers "eager fp32,torch.compile fp32" --out $OUT/opm32 2>&1 | grep -E "^  (opm|att)-" | tee $OUT/5a-bench-opm32.log
find $OUT/opm32 -type f ! -name results.json -delete

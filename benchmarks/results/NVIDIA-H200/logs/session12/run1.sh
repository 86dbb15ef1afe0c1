# session 12 run 1: the committed code of session 11 (one-pass kernel reading pair_scale; Gs per block), never run on a GPU:
# every GPU test (OPM and row attention), memcheck over the small OPM gradient tests, the OPM bf16 training breakdown
# and host probe, the bf16 bench (training) at the three suite shapes and the fp32 forward at opm-af2-main
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session12; L11=benchmarks/results/NVIDIA-H200/logs/session11
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
timeout 220 python3 -m pytest -q -n 16 tests/test_gpu.py 2>&1 | grep -v DEBUG > $OUT/1-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -12
timeout 100 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile" 2>&1 | grep -v DEBUG > $OUT/1-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/1-tests2.log | head -6
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_gpu.py -k "opm_gradients_awkward and (17 or 33) and not float32" > $OUT/1-memcheck.log 2>&1; tail -2 $OUT/1-memcheck.log
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/1-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/1-breakdown-opm-train.log | head -16
timeout 60 python3 $L11/host_probe.py opm-af2-main > $OUT/1-host-probe.log 2>&1; head -8 $OUT/1-host-probe.log
timeout 200 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/1-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/1-bench-opm.log
timeout 80 python3 -m evofuse bench --suite opm-af2-main --dtype float32 --peers "eager fp32,torch.compile fp32" --out $OUT/opm32 > $OUT/1-bench-opm32.log 2>&1; grep -E "^  (opm|att)-" $OUT/1-bench-opm32.log
find $OUT/opm $OUT/opm32 -type f ! -name results.json -delete

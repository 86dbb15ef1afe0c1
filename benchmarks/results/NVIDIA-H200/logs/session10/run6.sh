# on two GPUs: the two-GPU test (never run before), then what this session had not re-run (the 16-bit OPM
# grids, memcheck over an OPM shape, the library tests), then two training breakdowns for the next session
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session10
nvidia-smi --query-gpu=index,name --format=csv,noheader
timeout 100 python3 -m pytest -q tests/test_gpu.py -k "another_gpu" 2>&1 | grep -v DEBUG | tee $OUT/6-two-gpu.log | grep -E "passed|failed|FAILED|Error" | head -8
timeout 110 python3 -m pytest -q -n 16 tests/test_gpu.py -k "opm_awkward and not float32" 2>&1 | grep -v DEBUG | tee $OUT/6-opm16-grid.log | grep -E "passed|failed|FAILED" | head -8
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -m gpu tests/test_gpu.py -k "opm_awkward and 17-3 and 32 and auto" 2>&1 | tee $OUT/6-memcheck.log | tail -2
timeout 50 python3 -m pytest -q tests/test_library.py 2>&1 | grep -v DEBUG | tee $OUT/6-library.log | grep -E "passed|failed|FAILED" | head -5
timeout 45 python3 benchmarks/breakdown.py att-long --train 2>&1 | grep -v Warn | tee $OUT/6-breakdown-att-long-train.log | head -12
timeout 45 python3 benchmarks/breakdown.py opm-af2-main --train 2>&1 | grep -v Warn | tee $OUT/6-breakdown-opm-train.log | head -24

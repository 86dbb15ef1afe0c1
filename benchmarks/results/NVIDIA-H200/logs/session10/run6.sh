# on two GPUs: the two-GPU test (never run before), then what this session had not re-run: the 16-bit OPM
# grids, the float32 OPM suite shape and memory tests after the SPLIT warps change, the library tests, memcheck
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session10
nvidia-smi --query-gpu=index,name --format=csv,noheader
timeout 100 python3 -m pytest -q tests/test_gpu.py -k "another_gpu" 2>&1 | grep -v DEBUG | tee $OUT/6-two-gpu.log | grep -E "passed|failed|FAILED|Error" | head -8
timeout 120 python3 -m pytest -q -n 12 tests/test_gpu.py -k "opm_awkward and not float32" 2>&1 | grep -v DEBUG | tee $OUT/6-opm16-grid.log | grep -E "passed|failed|FAILED" | head -8
timeout 80 python3 -m pytest -q tests/test_gpu.py -k "(suite_shapes and opm-af2-main and float32) or opm_long_memory" 2>&1 | grep -v DEBUG | tee $OUT/6-opm32.log | grep -E "passed|failed|FAILED" | head -5
timeout 60 python3 -m pytest -q tests/test_library.py 2>&1 | grep -v DEBUG | tee $OUT/6-library.log | grep -E "passed|failed|FAILED" | head -5
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -m gpu tests/test_gpu.py -k "opm_awkward and 17-3 and 32 and auto" 2>&1 | tee $OUT/6-memcheck.log | tail -2

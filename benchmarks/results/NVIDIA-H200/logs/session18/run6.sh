# session 18 run 6, the final code (the projections read both weights where they are; a pass-major): the OPM gpu
# tests, the OPM autograd/library tests on CUDA, memcheck over the Gluon kernel's and the pass-major projections'
# tests, the bf16 forward's breakdown and the bench beside the peers.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session18
timeout 170 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "wgmma or opm_awkward or (suite_shapes and opm) or (every_candidate and opm) or ln_linear or forward_awkward or multipass" > $OUT/6-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/6-tests.log | head -20
timeout 45 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k opm > $OUT/6-tests2.log 2>&1; grep -E "passed|failed|FAILED" $OUT/6-tests2.log | head -6
timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_gpu.py tests/test_linear_kernel.py -k "(wgmma_every_config and bfloat16 and 64) or pass_major" > $OUT/6-memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/6-memcheck.log; tail -3 $OUT/6-memcheck.log
timeout 35 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 --host > $OUT/6-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/6-breakdown.log | head -12
timeout 60 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/6-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/6-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete

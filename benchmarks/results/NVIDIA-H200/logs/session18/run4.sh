# session 18 run 4, the code at 48e4a0d (the projections' pass-major stores as two stores, each contiguous): the
# probe at opm-af2-main, the OPM gpu tests, the bf16 forward's breakdown, the bench beside the peers, memcheck over
# the Gluon kernel's test.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session18
timeout 70 python3 $L/wgmma_probe.py opm-af2-main 2>&1 | grep -v Warn | tee $OUT/4-wgmma-probe.log | tail -6
timeout 260 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "wgmma or opm_awkward or (suite_shapes and opm) or (every_candidate and opm) or ln_linear or forward_awkward or multipass" > $OUT/4-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/4-tests.log | head -20
timeout 50 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 --host > $OUT/4-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/4-breakdown.log | head -12
timeout 90 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/4-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/4-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_gpu.py -k "wgmma_every_config and bfloat16" > $OUT/4-memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/4-memcheck.log; tail -3 $OUT/4-memcheck.log

# session 18 run 3: a written pass-major by the projections kernel (ln_linear's a_passes, no copy), the Gluon
# kernel reading it as one 128-byte-swizzled box a stage: the probe (awkward shapes, then the suite shapes beside
# the multi-pass kernel), the OPM gpu tests, memcheck over the Gluon kernel's test, the bf16 forward's breakdown
# and the bench beside the peers.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session18
timeout 150 python3 $L/wgmma_probe.py opm-af2-main,opm-af2-extra,opm-long 2>&1 | grep -v Warn | tee $OUT/3-wgmma-probe.log | tail -30
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "wgmma or opm_awkward or (suite_shapes and opm) or (every_candidate and opm) or ln_linear or forward_awkward or multipass" > $OUT/3-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/3-tests.log | head -20
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 --host > $OUT/3-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/3-breakdown.log | head -16
timeout 110 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/3-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/3-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_gpu.py -k "wgmma_every_config and bfloat16" > $OUT/3-memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/3-memcheck.log; tail -3 $OUT/3-memcheck.log

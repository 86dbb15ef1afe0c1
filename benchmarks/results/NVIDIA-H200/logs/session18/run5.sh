# session 18 run 5: the projections' pass-major store as one store of 16-channel groups (an address per row and
# group; run 4's two masked stores took 0.091 ms against 0.078 as it was): proj_probe.py, the OPM gpu tests, the
# bf16 forward's breakdown and the bench beside the peers.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session18
timeout 60 python3 $L/proj_probe.py 2>&1 | grep -v Warn | tee $OUT/5-proj-probe.log
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "wgmma or opm_awkward or (suite_shapes and opm) or (every_candidate and opm) or ln_linear or forward_awkward or multipass" > $OUT/5-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/5-tests.log | head -20
timeout 50 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 --host > $OUT/5-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/5-breakdown.log | head -12
timeout 90 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/5-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/5-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete

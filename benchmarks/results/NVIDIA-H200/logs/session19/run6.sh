# session 19 run 6, the final code: the OPM gpu tests that train or take the projections or the Gluon kernel, the
# tape tests, the autotuned-training test with and without tapes, the single-launch replays, the OPM
# autograd/library tests on CUDA; memcheck over a tape test (Gluon forward, backward in three row blocks, recorded and
# replayed); the training step's kernels; the bench beside the peers.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session19
timeout 200 python3 -m pytest -q -n 16 tests/test_tape.py tests/test_autograd.py tests/test_library.py tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_cached_launch.py -k "tape or (opm and (autograd or library or gradients or training or wgmma or long_memory or offsets)) or ln_linear or hopper or (test_autograd and opm) or (test_library and opm) or autotuned_training or replay or single_launch" > $OUT/6-tests.log 2>&1; rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/6-tests.log | head -20
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_tape.py -k "bfloat16 and seed" > $OUT/6-memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/6-memcheck.log; tail -3 $OUT/6-memcheck.log
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 --train > $OUT/6-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/6-breakdown.log | head -3
if [ $rc = 0 ]; then timeout 220 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/6-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/6-bench-opm.log; find $OUT/opm -type f ! -name results.json -delete; fi

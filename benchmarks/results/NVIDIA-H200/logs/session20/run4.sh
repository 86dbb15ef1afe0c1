# session 20 run 4, the final code (run 3's and the partial sums' inputs let go before the projections' gradients):
# the OPM/tape/partial-sum gpu tests with opm-af2-main's training peak bound; memcheck over a tape test (the Gluon
# training forward launched through its binary on replays, the backward with the partial sums ended in one launch);
# the bench's training row alone in three processes; the bench beside the peers (the table's run).
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session20
timeout 170 python3 -m pytest -q -n 16 tests/test_partial_sums.py tests/test_tape.py tests/test_autograd.py tests/test_library.py tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_cached_launch.py -k "sums or fixed_order or refuses or tape or (opm and (autograd or library or gradients or training or wgmma or long_memory or offsets)) or ln_linear or hopper or (test_autograd and opm) or (test_library and opm) or autotuned_training or replay or single_launch or backward_kernels" > $OUT/4-tests.log 2>&1; rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/4-tests.log | head -20
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_tape.py -k "bfloat16 and seed" > $OUT/4-memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/4-memcheck.log; tail -3 $OUT/4-memcheck.log
for k in 1 2 3; do timeout 50 python3 -m evofuse bench --suite opm-af2-main --dtype bfloat16 --train --peers none --out $OUT/b$k > $OUT/4-bench-$k.log 2>&1; grep -E "^  opm-af2-main " $OUT/4-bench-$k.log; done
if [ $rc = 0 ]; then timeout 230 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/4-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/4-bench-opm.log; find $OUT/opm -type f ! -name results.json -delete; fi
find $OUT -name "*.png" -delete

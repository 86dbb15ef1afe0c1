export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session10
timeout 100 python3 benchmarks/breakdown.py att-af2-main --train 2>&1 | grep -v Warn | tee $OUT/2-breakdown-att-train.log | head -12
timeout 60 python3 benchmarks/breakdown.py att-af2-main opm-af2-main 2>&1 | grep -v Warn | tee $OUT/2-breakdown-fwd-bf16.log | grep -E "forward|_row|_opm|_ln"
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 2>&1 | grep -v Warn | tee $OUT/2-breakdown-opm32.log | head -8
timeout 120 python3 $L/bwd_configs.py bfloat16 short 2>&1 | grep -v Warn | tee $OUT/2-bwd-configs.log
timeout 240 bash -c 'python3 -m pytest -q tests/test_gpu.py -k "(suite_gradients and att) or (suite_shapes and att-af2) or att_long_memory or training_memory"; python3 -m pytest -q -n 12 tests/test_gpu.py -k "attention_awkward or attention_gradients_awkward or every_backward_config or (opm_awkward and float32)"' 2>&1 | grep -v DEBUG | tee $OUT/2-tests.log | tail -8
MEMCHECK_TIMEOUT=100 timeout 110 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -m gpu tests/test_gpu.py -k "attention_awkward and 17-3 and 2-32 or gradients_awkward and 17-5" 2>&1 | tee $OUT/2-memcheck.log | tail -4

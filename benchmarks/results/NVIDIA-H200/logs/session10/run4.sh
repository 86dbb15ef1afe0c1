export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session10
timeout 100 python3 $L/bwd_configs.py bfloat16 stages 2>&1 | grep -v Warn | tee $OUT/4-bwd-configs.log | grep -v "^  return\|_warn"
timeout 80 python3 $L/bwd_configs.py float32 fp32 2>&1 | grep -v Warn | tee $OUT/4-bwd-configs-fp32.log | grep -v "^  return\|_warn"
timeout 60 python3 benchmarks/breakdown.py att-af2-main --train 2>&1 | grep -v Warn | tee $OUT/4-breakdown-att-train.log | head -10
timeout 230 bash -c 'python3 -m pytest -q tests/test_gpu.py -k "(suite_gradients and att) or att_long_memory or training_memory"; python3 -m pytest -q -n 12 tests/test_gpu.py -k "attention_awkward or attention_gradients_awkward or every_backward_config"' 2>&1 | grep -v DEBUG | tee $OUT/4-tests.log | grep -E "passed|failed|FAILED|Error" | head
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -m gpu tests/test_gpu.py -k "gradients_awkward and 17-5 or gradients_awkward and 97-3" 2>&1 | tee $OUT/4-memcheck.log | tail -3

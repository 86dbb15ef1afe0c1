export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session9
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
( for v in "fused bfloat16 1" "fused bfloat16 2" "trans bfloat16" "old bfloat16" "fused float32 1" "old float32"; do
    timeout 80 python3 $L/att_bwd_probe.py $v 2>&1 | grep -E "^==|forward\+backward|_row_attention|_gate|Error|error" | head -12
  done
  timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 --host 2>&1 | grep -v Warn | head -40
) 2>&1 | tee $OUT/2-probe.log
timeout 300 python3 -m pytest -q -x tests/test_gpu.py -k "attention_gradients_awkward or (suite_gradients and att) or every_backward_config or training_memory or att_long_memory" --durations=5 2>&1 | grep -v DEBUG | tee $OUT/2-tests.log | tail -15

export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session9
( for v in "fused bfloat16 1" "fused bfloat16 2" "old bfloat16" "fused float32 1" "old float32"; do
    timeout 80 python3 $L/att_bwd_probe.py $v 2>&1 | grep -E "^==|forward\+backward|_row_attention|_gate|Error|error" | head -12
  done ) 2>&1 | tee $OUT/3-probe.log
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 --host > $OUT/3-opm32-host.log 2>&1
grep -E "host|forward" $OUT/3-opm32-host.log | head -12
timeout 300 python3 -m pytest -q tests/test_gpu.py -k "attention_gradients_awkward or (suite_gradients and att) or every_backward_config or training_memory or att_long_memory" --durations=5 2>&1 | grep -v DEBUG | tee $OUT/3-tests.log | tail -8

# session 11 run 1: the Outer Product Mean backward's out_proj weight gradient as a Triton kernel over
# X[(i p), (j q)] (bf16: cuBLAS's plain product, the scale on the gradient's side): tests, the training
# breakdown, the forward with and without the mask
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session11
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py -k "opm_gradients_awkward or (suite_gradients and opm) or training_memory" 2>&1 | grep -v DEBUG | tee $OUT/1-tests.log | grep -E "passed|failed|FAILED|Error" | head -12
timeout 100 python3 -m pytest -q tests/test_autograd.py tests/test_library.py -k "determin or opcheck or eager" 2>&1 | grep -v DEBUG | tee $OUT/1-tests2.log | grep -E "passed|failed|FAILED" | head -6
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train 2>&1 | grep -v Warn | tee $OUT/1-breakdown-opm-train.log | head -26
timeout 60 python3 $L/fwd_mask.py opm-af2-main 2>&1 | tee $OUT/1-fwd-mask.log

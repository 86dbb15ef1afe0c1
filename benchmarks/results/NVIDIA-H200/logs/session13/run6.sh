# session 13 run 6: row coordinates split in 32 bits past a tile's first row (LayerNorm, projections, attention gate
# backward kernels: no 64-bit division calls) and Gs made once for both backward blocks: every GPU test (OPM on 16
# workers, row attention on 4), the projections kernel's launch shapes alone (lnfwd_probe.py), the training breakdown
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session13
timeout 150 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py -k "opm or ln_linear or layer_norm or row_coords or backward_kernels" 2>&1 | grep -v DEBUG > $OUT/6-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/6-tests.log | head -12
timeout 90 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py 2>&1 | grep -v DEBUG > $OUT/6-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/6-tests2.log | head -6
timeout 45 python3 $L/lnfwd_probe.py > $OUT/6-lnfwd-probe.log 2>&1; grep -v Warn $OUT/6-lnfwd-probe.log
timeout 40 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/6-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/6-breakdown-opm-train.log | head -14
timeout 240 python3 -m pytest -q -n 4 tests/test_gpu.py tests/test_attention_kernel.py -k "not opm" 2>&1 | grep -v DEBUG > $OUT/6-tests-att.log; grep -E "passed|failed|FAILED|Error" $OUT/6-tests-att.log | head -12

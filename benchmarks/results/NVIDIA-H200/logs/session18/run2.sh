# session 18 run 2: a's pass-major form for the Gluon kernel (one 128-byte-swizzled box a stage instead of eight
# 32-byte ones; a permuted copy in the launcher for now) against run 1's form, at opm-af2-main; then its gpu tests.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session18
timeout 200 python3 $L/wgmma_probe.py opm-af2-main 0,1 2>&1 | grep -v Warn | tee $OUT/2-wgmma-probe.log | tail -30
timeout 200 python3 -m pytest -q -n 16 tests/test_gpu.py -k "wgmma or (opm_awkward and tiled) or (suite_shapes and opm)" > $OUT/2-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/2-tests.log | head -20

# session 18 run 1: Hopper's Gluon kernel for the bf16 Outer Product Mean (outer_product_mean_wgmma), first time on
# the card: its correctness at awkward shapes and its speed beside the multi-pass kernel (wgmma_probe.py), then the
# OPM gpu tests that go through it (its every-config test, the awkward shapes, the suite shapes).
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session18
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
timeout 240 python3 $L/wgmma_probe.py opm-af2-main,opm-af2-extra,opm-long 2>&1 | grep -v Warn | tee $OUT/1-wgmma-probe.log | tail -30
timeout 250 python3 -m pytest -q -n 16 tests/test_gpu.py -k "wgmma or opm_awkward or (suite_shapes and opm) or (every_candidate and opm)" > $OUT/1-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -20

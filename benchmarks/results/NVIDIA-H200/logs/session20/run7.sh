# session 20 run 7: the Gs pass over several blocks of pairs a program (fewer partial sums to end): its tiles timed
# (gs_tiles.py), the backward's gpu tests, the step's kernels.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session20
timeout 60 python3 $L/gs_tiles.py > $OUT/7-gs-tiles.log 2>&1; grep -v -E "Warn|warn_once" $OUT/7-gs-tiles.log
timeout 150 python3 -m pytest -q -n 16 tests/test_partial_sums.py tests/test_tape.py tests/test_autograd.py tests/test_library.py tests/test_gpu.py tests/test_opm_kernel.py -k "sums or fixed_order or tape or (opm and (autograd or library or gradients or training)) or backward_kernels or (test_autograd and opm) or (test_library and opm)" > $OUT/7-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/7-tests.log | head -20
timeout 45 python3 benchmarks/breakdown.py opm-af2-main --dtype bfloat16 --train > $OUT/7-breakdown.log 2>&1; grep -v -E "Warn|warn_once" $OUT/7-breakdown.log | head -22

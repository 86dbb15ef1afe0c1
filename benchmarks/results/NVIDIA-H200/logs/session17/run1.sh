# session 17 run 1: the float32 OPM forward's operands from three launches instead of ~65 small PyTorch ones
# (split_ln_weights: the projections' normalized float16 weights; _out_weight_kernel: out_proj's halves;
# _float16_split_kernel: a and b, scaled by the maxima the projections kernel now writes (AMAX)).
# GPU tests of the changed kernels, A/B of the forward against main at dc9962a (.out/ab/main, carried),
# and the forward's breakdown with its host time.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session17; P=benchmarks/results/NVIDIA-H200/logs/session16
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/1-host-speed.log
timeout 250 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_opm_kernel.py tests/test_linear_kernel.py -k "opm or backward_kernels or autotuned or split or ceil or ln_linear" 2>&1 | grep -v DEBUG > $OUT/1-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -12
timeout 60 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k opm 2>&1 | grep -v DEBUG > $OUT/1-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/1-tests2.log | head -6
for v in main new main new; do
  if [ $v = main ]; then PP=.out/ab/main; else PP=$PWD; fi
  PYTHONPATH=$PP timeout 60 python3 $P/ab_probe.py 512 2>&1 | grep -v Warn | tee -a $OUT/1-ab.log
done
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 --host > $OUT/1-breakdown-fp32.log 2>&1; grep -v -E "Warn|warn_once" $OUT/1-breakdown-fp32.log | head -40

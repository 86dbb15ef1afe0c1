# session 15 run 1: the host trims (tensors to Triton's launcher as addresses; dW's partial sums carried across row
# blocks in the kernel, one sum; block views by split): GPU tests of the changed paths, memcheck over the backward
# kernels, `evofuse check`, the training breakdown, then A/B of the training step against session 14's final code
# (s15_base/, carried) in alternating processes (ab_step.py)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session15
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/1-host-speed.log
timeout 170 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_cached_launch.py -k "opm or ln_linear or backward_kernels or autotuned or launch" 2>&1 | grep -v DEBUG > $OUT/1-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/1-tests.log | head -12
timeout 90 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept or graph" 2>&1 | grep -v DEBUG > $OUT/1-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/1-tests2.log | head -6
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x tests/test_gpu.py tests/test_opm_kernel.py tests/test_autograd.py -k "(opm_gradients_awkward and (17 or 33) and not float32) or backward_kernels" > $OUT/1-memcheck.log 2>&1; tail -2 $OUT/1-memcheck.log
timeout 60 python3 -m evofuse check --case att-af2-main --case opm-af2-main --dtype bfloat16 --trials 3 > $OUT/1-check.log 2>&1; tail -6 $OUT/1-check.log
timeout 40 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/1-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/1-breakdown-opm-train.log | head -16
for i in 1 2; do for v in base new; do
  if [ $v = base ]; then P=$PWD/s15_base; else P=$PWD; fi
  PYTHONPATH=$P timeout 60 python3 $L/ab_step.py opm-af2-main bfloat16 $v 2>&1 | grep -v Warn | tail -1 | tee -a $OUT/1-ab.log
done; done

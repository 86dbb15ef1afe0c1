# session 15 run 3: row attention's GPU tests (its launches now hand Triton's launcher addresses), then A/B of the
# training step against session 14's code (s15_base/, carried) in alternating processes, three rounds
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session15
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/3-host-speed.log
timeout 240 python3 -m pytest -q -n 8 tests/test_gpu.py tests/test_attention_kernel.py -k "not opm" 2>&1 | grep -v DEBUG > $OUT/3-tests-att.log; grep -E "passed|failed|FAILED|Error" $OUT/3-tests-att.log | head -12
for i in 1 2 3; do for v in base new; do
  if [ $v = base ]; then P=$PWD/s15_base; else P=$PWD; fi
  PYTHONPATH=$P timeout 60 python3 $L/ab_step.py opm-af2-main bfloat16 $v 2>&1 | grep -v Warn | tail -1 | tee -a $OUT/3-ab.log
done; done

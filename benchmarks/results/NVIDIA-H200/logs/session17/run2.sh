# session 17 run 2: after run 1, out_proj's weight halves one 1024-element block a program after PyTorch's max |w|
# (run 1's _out_weight_kernel read the whole weight in every program: 0.099 ms), and the multi-pass workspace sized
# from the configs each call (run 1's failure of test_every_candidate_config[float32]: a size cached from the
# bf16 candidates). The OPM GPU tests, the SPLIT configs with session 16's dropped BLOCK_R 32 / W_STAGES 2 one,
# A/B against main at dc9962a, the breakdown with host time, and the float32 bench beside eager and torch.compile.
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session17; P=benchmarks/results/NVIDIA-H200/logs/session16
timeout 250 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_opm_kernel.py tests/test_linear_kernel.py -k "opm or backward_kernels or autotuned or split or ceil or ln_linear" 2>&1 | grep -v DEBUG > $OUT/2-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/2-tests.log | head -12
timeout 90 python3 $L/cfg_probe.py 2>&1 | grep -v Warn | tee $OUT/2-cfg-probe.log
for v in main new main new; do
  if [ $v = main ]; then PP=.out/ab/main; else PP=$PWD; fi
  echo -n "$v: " >> $OUT/2-ab.log; PYTHONPATH=$PP timeout 60 python3 $P/ab_probe.py 512 2>&1 | grep -v Warn | tee -a $OUT/2-ab.log
done
timeout 60 python3 benchmarks/breakdown.py opm-af2-main --dtype float32 --host > $OUT/2-breakdown-fp32.log 2>&1; grep -v -E "Warn|warn_once" $OUT/2-breakdown-fp32.log | head -16
timeout 120 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype float32 --peers "eager fp32,torch.compile fp32" --out $OUT/opm32 > $OUT/2-bench-opm32.log 2>&1; tail -12 $OUT/2-bench-opm32.log

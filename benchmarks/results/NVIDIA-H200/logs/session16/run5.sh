# session 16 run 5: the SPLIT epilogue made in even / odd halves of q (spills ~770 -> ~400 bytes a thread, sm_90
# compile), w's columns ordered to match: the OPM GPU tests; A/B in alternating processes against the committed form
# (.out/ab/base, carried) and the halves with w read at stride 2 (.out/ab/stride2: ~250 bytes of spills, scalar
# loads); the float32 forward bench beside eager and torch.compile; memcheck over the multi-pass kernel's tests
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session16
timeout 190 python3 -m pytest -q -n 16 -rf tests/test_gpu.py tests/test_opm_kernel.py -k "opm or backward_kernels or autotuned" 2>&1 | grep -v -E "DEBUG|Warn|warner" > $OUT/5-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/5-tests.log | head -12
for i in 1 2; do for v in base new stride2; do
  if [ $v = new ]; then P=$PWD; else P=$PWD/.out/ab/$v; fi
  PYTHONPATH=$P:$PWD timeout 45 python3 $L/ab_probe.py 512 1024 2>&1 | grep -v Warn | sed "s/^[a-z0-9]* /$v /" | tee -a $OUT/5-ab.log
done; done
timeout 120 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype float32 --peers "eager fp32,torch.compile fp32" --out $OUT/opm32 > $OUT/5-bench-opm32.log 2>&1; grep -E "^  (opm|att)-" $OUT/5-bench-opm32.log
find $OUT/opm32 -type f ! -name results.json -delete
timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_opm_kernel.py -k "multipass_kernel_takes or chunks or hidden_dim_64" > $OUT/5-memcheck.log 2>&1; tail -2 $OUT/5-memcheck.log

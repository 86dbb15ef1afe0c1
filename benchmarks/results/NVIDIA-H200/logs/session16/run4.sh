# session 16 run 4: SPLIT's candidates without the pipelined 32-row weight blocks (run 3: wrong outputs at N = 97),
# with 16 warps and 64-pair tiles added: the OPM GPU tests (every candidate), the fp32 autograd tests, each candidate
# forced at opm-af2-main (split_probe.py --multipass), then the float32 forward bench beside eager and torch.compile
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session16
timeout 200 python3 -m pytest -q -n 16 -rf tests/test_gpu.py tests/test_opm_kernel.py -k "opm or backward_kernels or autotuned" 2>&1 | grep -v -E "DEBUG|Warn|warner" > $OUT/4-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/4-tests.log | head -12
timeout 120 python3 $L/split_probe.py 512 --multipass > $OUT/4-split-probe.log 2>&1; grep -v Warn $OUT/4-split-probe.log
timeout 90 python3 -m pytest -q -n 8 -rf tests/test_autograd.py tests/test_library.py -k "opm" 2>&1 | grep -v -E "DEBUG|Warn|warner" > $OUT/4-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/4-tests2.log | head -6
timeout 220 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype float32 --peers "eager fp32,torch.compile fp32" --out $OUT/opm32 > $OUT/4-bench-opm32.log 2>&1; grep -E "^  (opm|att)-" $OUT/4-bench-opm32.log
find $OUT/opm32 -type f ! -name results.json -delete

# session 16 run 3: the OPM GPU tests again with room to finish (run 2's were cut at 180 s with one failure unnamed);
# ncu's view of the multi-pass kernel at opm-af2-main, bf16 (two passes) and float32 (SPLIT, four passes); the float32
# forward bench, evofuse alone
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session16
timeout 300 python3 -m pytest -q -n 16 -rf tests/test_gpu.py tests/test_linear_kernel.py tests/test_opm_kernel.py tests/test_cached_launch.py -k "opm or ln_linear or backward_kernels or autotuned or launch" 2>&1 | grep -v -E "DEBUG|Warn|warner" > $OUT/3-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/3-tests.log | head -12
for dt in bfloat16 float32; do
  timeout 100 ncu --clock-control none -k regex:multipass --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats python3 $L/ncu_probe.py $dt > $OUT/3-ncu-$dt.log 2>&1; grep -E "Duration|Throughput|Pipe|Stall|Registers|Shared Memory Config|L2 Hit|L1/TEX Hit|Issued|Eligible|Active Warps|Local" $OUT/3-ncu-$dt.log | head -40
done
timeout 120 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype float32 --peers none --out $OUT/opm32 > $OUT/3-bench-opm32.log 2>&1; grep -E "^  (opm|att)-" $OUT/3-bench-opm32.log
find $OUT/opm32 -type f ! -name results.json -delete

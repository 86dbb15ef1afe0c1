# session 14 run 7, the final code (run 6's): the bench beside the peers in one run (bf16 forward and forward+backward
# at the three OPM suite shapes beside eager fp32 and the folded einsum), then the host time of the step
export PYTHONPATH=$PWD
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/7-host-speed.log
timeout 230 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/7-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/7-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete
timeout 40 python3 benchmarks/host_time.py opm-af2-main > $OUT/7-host-time.log 2>&1; grep -v Warn $OUT/7-host-time.log

# session 13 run 8: the whole-Gs buffer freed before the LayerNorm's and projections' gradients (run 7's bench read
# opm-af2-main's training peak 350 -> 386 MiB): the OPM autograd/library tests, the host's speed, the bench again (bf16
# forward and forward+backward at the three OPM suite shapes beside eager fp32 and the folded einsum), the breakdown
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session13
timeout 90 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k "opm or determin or opcheck or eager or compile or subset or empty or kept or whole" 2>&1 | grep -v DEBUG > $OUT/8-tests.log; grep -E "passed|failed|FAILED|no tests" $OUT/8-tests.log | head -6
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/8-host-speed.log
timeout 200 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/8-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/8-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete
timeout 40 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/8-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/8-breakdown-opm-train.log | head -4

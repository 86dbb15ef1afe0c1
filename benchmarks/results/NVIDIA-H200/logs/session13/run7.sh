# session 13 run 7: the projections kernel on one stage where its weight is one tile (lnfwd_probe.py, run 6), run 6's
# GPU-only failures with tolerances for binaries that contract differently: the OPM, LayerNorm and mask-dtype GPU tests,
# then the bench (bf16 forward and forward+backward at the three OPM suite shapes beside eager fp32 and the folded einsum)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session13
timeout 150 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_linear_kernel.py tests/test_attention_kernel.py -k "opm or ln_linear or layer_norm or mask_of_any or row_coords" 2>&1 | grep -v DEBUG > $OUT/7-tests.log; grep -E "passed|failed|FAILED|Error" $OUT/7-tests.log | head -12
timeout 40 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/7-breakdown-opm-train.log 2>&1; grep -v Warn $OUT/7-breakdown-opm-train.log | head -12
timeout 220 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/7-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/7-bench-opm.log
find $OUT/opm -type f ! -name results.json -delete
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/7-host-speed.log

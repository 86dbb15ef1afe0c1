# session 15 run 4, the committed code: the bench beside the peers in one run (Outer Product Mean bf16 forward and
# forward+backward at its three suite shapes beside eager fp32 and the folded einsum; row attention at att-af2-main
# beside eager fp32 and FlexAttention), then the step's A/B once more
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session15
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/4-host-speed.log
timeout 230 python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16" --out $OUT/opm > $OUT/4-bench-opm.log 2>&1; grep -E "^  (opm|att)-" $OUT/4-bench-opm.log
timeout 150 python3 -m evofuse bench --suite att-af2-main --dtype bfloat16 --train --peers "eager fp32,FlexAttention bf16" --out $OUT/att > $OUT/4-bench-att.log 2>&1; grep -E "^  (opm|att)-" $OUT/4-bench-att.log
find $OUT/opm $OUT/att -type f ! -name results.json -delete
for v in new new; do PYTHONPATH=$PWD timeout 60 python3 $L/ab_step.py opm-af2-main bfloat16 $v 2>&1 | grep -v Warn | tail -1 | tee -a $OUT/4-ab.log; done

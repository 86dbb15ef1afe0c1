# session 15 run 6: the bench with every backward on the calling thread (--backward-on-caller, new), evofuse beside the
# peers (Outer Product Mean and row attention at their af2-main shapes), then the Outer Product Mean's rows once more
# with the autograd engine's device thread (the default), evofuse alone, in the same call
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session15
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/6-host-speed.log
timeout 200 python3 -m evofuse bench --suite opm-af2-main,att-af2-main --dtype bfloat16 --train --peers "eager fp32,folded einsum bf16,FlexAttention bf16" --backward-on-caller --out $OUT/caller > $OUT/6-bench-caller.log 2>&1; grep -E "^  (opm|att)-|backward on" $OUT/6-bench-caller.log
timeout 100 python3 -m evofuse bench --suite opm-af2-main --dtype bfloat16 --train --peers none --out $OUT/engine > $OUT/6-bench-engine.log 2>&1; grep -E "^  (opm|att)-|backward on" $OUT/6-bench-engine.log
find $OUT/caller $OUT/engine -type f ! -name results.json -delete

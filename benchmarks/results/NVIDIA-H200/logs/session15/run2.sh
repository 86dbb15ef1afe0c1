# session 15 run 2: where the warm training step's host time goes (call_probe.py, host_lines.py), and the bf16
# two-pass kernel's configs forced one at a time (two_pass_configs.py)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session15
python3 -c "import torch; x = torch.zeros(1, device='cuda'); import time; [x.add_(1) for _ in range(1000)]; torch.cuda.synchronize(); t = time.perf_counter(); [x.add_(1) for _ in range(20000)]; torch.cuda.synchronize(); print(f'host: {(time.perf_counter() - t) / 20000 * 1e6:.1f} us a x.add_(1)')" | tee $OUT/2-host-speed.log
timeout 100 python3 $L/call_probe.py opm-af2-main > $OUT/2-call-probe.log 2>&1; cat $OUT/2-call-probe.log | grep -v Warn | head -60
timeout 100 python3 benchmarks/host_lines.py opm-af2-main --train --top 45 > $OUT/2-lines-train.log 2>&1; grep -v Warn $OUT/2-lines-train.log | head -8
timeout 200 python3 $L/two_pass_configs.py > $OUT/2-two-pass.log 2>&1; grep -v Warn $OUT/2-two-pass.log

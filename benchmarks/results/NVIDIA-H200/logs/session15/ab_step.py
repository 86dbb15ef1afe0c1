"""One training step of a suite case (the bench's: forward, backward with an all-ones output gradient, gradients
accumulating), in one process: the host's own time a step with the device kept busy (torch.cuda._sleep queued first,
so that no call waits on it: the host's steady-state cost), then the bench's do_bench median, five times in a row.
Run once per code version (PYTHONPATH) and alternated, so that versions meet the same host (session 15, run 1)."""
import statistics
import sys
import time
import warnings

import torch
import triton.testing

import evofuse
from evofuse.bench import training_step
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
name, dtype, tag = sys.argv[1], getattr(torch, sys.argv[2]), sys.argv[3]
if "one-thread" in sys.argv[4:]:  # (run 5) the backward on the calling thread, not the autograd engine's device thread
    torch.autograd.set_multithreading_enabled(False)
case = next(c for c in SUITE if c.name == name)
mod = make_module(case).cuda().to(dtype)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in make_inputs(case, "cuda", dtype, fully_masked=False)]
step = training_step(lambda: mod(*inputs))
for _ in range(5):
    step()
torch.cuda.synchronize()
x = torch.zeros(1, device="cuda")
host = []
for _ in range(7):
    torch.cuda._sleep(200_000_000)  # ~0.1 s of device time queued ahead of the steps
    t0 = time.perf_counter()
    for _ in range(20):
        step()
    host.append((time.perf_counter() - t0) / 20 * 1e6)
    torch.cuda.synchronize()
t0 = time.perf_counter()  # (run 1 timed these behind a queued sleep: 2000 launches fill the launch queue, so its
for _ in range(2000):     # 17.8 us was the queue's wait; from run 3 on, the host's own time as in the host-speed line)
    x.add_(1)
torch.cuda.synchronize()
add = (time.perf_counter() - t0) / 2000 * 1e6
bench = [triton.testing.do_bench(step, return_mode="median") for _ in range(5)]
print(f"{tag:5s} {name} {sys.argv[2]} ({evofuse.__file__.split('/')[-3]}): host {statistics.median(host):7.1f} us a step "
      f"(min {min(host):.1f}), x.add_ {add:.1f} us; do_bench ms: " + " ".join(f"{b:.3f}" for b in bench))

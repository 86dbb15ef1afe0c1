"""Where a training step's host time goes: cProfile of 20 steps (tottime and cumulative, 40 rows each),
and the host time of one step alone: python3 host_probe.py CASE."""
import cProfile
import pstats
import sys
import time

import torch

from evofuse.bench import training_step
from evofuse.suite import SUITE, make_inputs, make_module

case = next(c for c in SUITE if c.name == sys.argv[1])
mod = make_module(case).cuda().to(torch.bfloat16)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in make_inputs(case, "cuda", torch.bfloat16, fully_masked=False)]
step = training_step(lambda: mod(*inputs))
for _ in range(5):
    step()
torch.cuda.synchronize()
times = []
for _ in range(20):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
torch.cuda.synchronize()
print("host alone, us:", sorted(round(t * 1e6) for t in times))
prof = cProfile.Profile()
prof.enable()
for _ in range(20):
    step()
prof.disable()
torch.cuda.synchronize()
stats = pstats.Stats(prof)
stats.sort_stats("tottime").print_stats(40)
stats.sort_stats("cumulative").print_stats(40)

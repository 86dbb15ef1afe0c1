"""Where the OPM training step's host time goes, warm (session 15, run 2): the bench's step (forward, backward with an
all-ones output gradient, gradients accumulating) run 20 times back to back behind ~0.1 s of queued device work (no
call waits on the device), with each PyTorch call, evofuse launcher and the step's layers wrapped by a timer: host us a
step per wrapped name (inclusive: nested names are counted in their callers too), calls a step."""
import collections
import statistics
import sys
import time
import warnings

import torch

import evofuse._backward as bw
import evofuse._library as lib
import evofuse.functional as functional
from evofuse.bench import training_step
from evofuse.ops import _common
from evofuse.ops import outer_product_mean as opm
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
name = sys.argv[1] if len(sys.argv) > 1 else "opm-af2-main"
case = next(c for c in SUITE if c.name == name)
dtype = torch.bfloat16
mod = make_module(case).cuda().to(dtype)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in make_inputs(case, "cuda", dtype, fully_masked=False)]
times = collections.defaultdict(float)
counts = collections.defaultdict(int)


def timed(label, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            times[label] += time.perf_counter() - start
            counts[label] += 1
    return wrapper


step = training_step(lambda: mod(*inputs))


def run(n=20, reps=5):
    per = []
    for _ in range(reps):
        torch.cuda._sleep(200_000_000)
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        per.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


for _ in range(5):
    step()
print(f"{name} bf16 step, host us warm (unwrapped): {run():.0f}")
for fn in ("bmm", "baddbmm", "mm", "addmm", "empty", "empty_like", "zeros", "cat", "ones_like", "stack"):
    setattr(torch, fn, timed("torch." + fn, getattr(torch, fn)))
for fn in ("to", "sum", "contiguous", "view", "__getitem__", "unbind", "split", "transpose", "reshape", "t", "add_"):
    setattr(torch.Tensor, fn, timed("Tensor." + fn, getattr(torch.Tensor, fn)))
kernels = bw._kernel_set(True)
for fn in vars(kernels):
    setattr(kernels, fn, timed("evofuse." + fn, getattr(kernels, fn)))
_common.CachedLaunch.run = timed("CachedLaunch.run", _common.CachedLaunch.run)
_common.CachedLaunch.__call__ = timed("CachedLaunch.__call__", _common.CachedLaunch.__call__)
_common.TunedLaunch.__call__ = timed("TunedLaunch.__call__", _common.TunedLaunch.__call__)
_common.CachedLaunch.bind = staticmethod(timed("CachedLaunch.bind", _common.CachedLaunch.bind))
for fn in ("project", "pair_scale", "outer_product_mean_triton"):
    setattr(opm, fn, timed("opm." + fn, getattr(opm, fn)))
bw.outer_product_mean_backward = timed("outer_product_mean_backward", bw.outer_product_mean_backward)
lib.outer_product_mean_backward = bw.outer_product_mean_backward
functional.outer_product_mean = timed("functional.outer_product_mean", functional.outer_product_mean)
import evofuse.modules as modules  # noqa: E402

modules.functional = functional
for _ in range(3):
    step()
times.clear()
counts.clear()
n, reps = 20, 5
total = run(n, reps)
steps = n * reps
print(f"wrapped step, host us warm: {total:.0f}\n  host us a step (inclusive), calls a step")
for label in sorted(times, key=lambda k: -times[k]):
    print(f"  {times[label] / steps * 1e6:8.1f} {counts[label] / steps:6.1f} x  {label}")

"""Whether the Outer Product Mean's training step waits on the device inside its backward (session 14, run 3).

Run 2's host_time.py read opm-af2-main bf16's step at 2528 us of host time against 250 (forward) + 1408
(backward) measured apart, each after a synchronize. Here: the step's phases timed with and without a
synchronize between forward and backward, then the host time of each wrapped call (PyTorch products,
empty, casts, evofuse's launchers) summed over a step in both settings: a call that waits shows up as
the one that grows when the forward's kernels are still running."""
import collections
import statistics
import time
import warnings

import torch

import evofuse._backward as bw
from evofuse.ops import _common
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
case = next(c for c in SUITE if c.name == "opm-af2-main")
dtype = torch.bfloat16
mod = make_module(case).cuda().to(dtype)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in make_inputs(case, "cuda", dtype, fully_masked=False)]
leaves = list(mod.parameters()) + [t for t in inputs if t.dim() == 4]
times = collections.defaultdict(list)


def timed(name, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            times[name].append(time.perf_counter() - start)
    return wrapper


def step(sync_between):
    for t in leaves:
        t.grad = None
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = mod(*inputs)
    t1 = time.perf_counter()
    if sync_between:
        torch.cuda.synchronize()
    t1b = time.perf_counter()
    out.backward(torch.ones_like(out))
    t2 = time.perf_counter()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1b, t3 - t2


for _ in range(5):
    step(False)
for sync_between in (False, True):
    rows = [step(sync_between) for _ in range(30)]
    f, b, d = (statistics.median(r[k] for r in rows) * 1e6 for k in range(3))
    print(f"sync between={sync_between}: forward host {f:.0f} us, backward host {b:.0f} us, then the device {d:.0f} us")

for name in ("bmm", "baddbmm", "mm", "addmm", "empty", "zeros", "cat", "ones_like"):
    setattr(torch, name, timed("torch." + name, getattr(torch, name)))
for name in ("to", "sum", "contiguous", "view", "__getitem__", "unbind"):
    setattr(torch.Tensor, name, timed("Tensor." + name, getattr(torch.Tensor, name)))
kernels = bw._kernel_set(True)
for name in vars(kernels):
    setattr(kernels, name, timed("evofuse." + name, getattr(kernels, name)))
_common.CachedLaunch.run = timed("CachedLaunch.run", _common.CachedLaunch.run)
_common.CachedLaunch.__call__ = timed("CachedLaunch.__call__", _common.CachedLaunch.__call__)
for sync_between in (False, True):
    for _ in range(3):
        step(sync_between)
    times.clear()
    n = 20
    for _ in range(n):
        step(sync_between)
    print(f"\nsync between={sync_between}: host us a step per wrapped call (sum over its calls; calls a step)")
    for name, ts in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {sum(ts) / n * 1e6:8.1f} us {len(ts) / n:5.1f} x  {name}")

torch.cuda.set_sync_debug_mode("warn")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    step(False)
print("\nsync debug mode warnings in a step:", len(caught), [str(w.message)[:80] for w in caught[:3]])

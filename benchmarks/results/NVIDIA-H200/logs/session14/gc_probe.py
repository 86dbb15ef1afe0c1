"""Why the bench reads opm-af2-main bf16's training step at 1.85-1.88 ms while breakdown.py and host_time.py read
2.28-2.37 ms on the same machine in the same call (session 14, runs 6-7): the step timed in one process the bench's
way (`evofuse.bench._measure`: a gc.collect() first) and do_bench's plain way, with the garbage collector as it is,
after gc.collect(), after gc.freeze(), and off."""
import gc
import time

import torch
import triton.testing

from evofuse.bench import _measure, training_step
from evofuse.suite import SUITE, make_inputs, make_module

case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case, seed=0).to(device="cuda", dtype=torch.bfloat16)
inputs = make_inputs(case, "cuda", torch.bfloat16, seed=1, fully_masked=False)
tensors = list(mod.parameters())
for t in inputs[:-1]:
    t.requires_grad_(True)
    tensors.append(t)
step = training_step(lambda: mod(*inputs))


def plain():
    return triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median", grad_to_none=tensors)


def counts():
    return f"gc counts {gc.get_count()}, tracked objects {len(gc.get_objects())}"


step()
print(f"plain do_bench {plain():.3f} ms ({counts()})")
print(f"bench's _measure {_measure(lambda: mod(*inputs), True, tensors)[0]:.3f} ms")
print(f"plain do_bench again {plain():.3f} ms")
gc.collect()
print(f"after gc.collect() {plain():.3f} ms")
gc.freeze()
print(f"after gc.freeze() {plain():.3f} ms ({counts()})")
gc.unfreeze()
gc.disable()
print(f"garbage collector off {plain():.3f} ms")
gc.enable()
start = time.perf_counter()
gc.collect()
print(f"a full collection here: {(time.perf_counter() - start) * 1e3:.1f} ms; thresholds {gc.get_threshold()}")

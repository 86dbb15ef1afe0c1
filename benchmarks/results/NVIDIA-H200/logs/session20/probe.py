"""Where the taped training step's host time goes (opm-af2-main bf16, session 20): what each tape holds, the host
time of the forward and backward replayed and of each tape alone, the Gluon launcher's call alone, and a cProfile
of whole steps on the calling thread."""
import collections
import cProfile
import pstats
import statistics
import time

import torch

from evofuse.ops import _tape
from evofuse.ops.outer_product_mean_wgmma import outer_products_wgmma
from evofuse.suite import SUITE, make_inputs, make_module

case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case).cuda().to(torch.bfloat16)
inputs = make_inputs(case, "cuda", torch.bfloat16, fully_masked=False)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in inputs]
leaves = list(mod.parameters()) + [t for t in inputs if t.dim() == 4]


def host_us(fn, before, calls=30):
    """Median host time of fn(before()) behind ~20 ms of queued device work (no call waits on the device)."""
    times = []
    for _ in range(calls):
        state = before()
        torch.cuda.synchronize()
        torch.cuda._sleep(40_000_000)
        start = time.perf_counter()
        fn(state)
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def prepare():
    for t in leaves:
        t.grad = None
    out = mod(*inputs)
    return out, torch.ones_like(out)


def backward(state):
    state[0].backward(state[1])


def step(_):
    out = mod(*inputs)
    out.backward(torch.ones_like(out))


for _ in range(5):
    backward(prepare())
torch.cuda.synchronize()
for key, tape in _tape.TAPES.tapes.items():
    if type(tape) is not _tape.Tape:
        print(key[0], "not taped:", tape)
        continue
    kinds = collections.Counter()
    for op, a, b, c, d, _ in tape.steps:
        kinds["empty" if op == "empty" else f"call {a.__name__}" if op == "call"
              else f"launch {a.kernel.fn.__name__}" if op is None else str(op)] += 1
    print(key[0], f"{len(tape.steps)} steps:", dict(kinds))
x = torch.zeros(1, device="cuda")
print(f"x.add_ {host_us(lambda s: x.add_(1), lambda: None):.1f} us")
print(f"step {host_us(step, lambda: [setattr(t, 'grad', None) for t in leaves]):.0f} us")
print(f"forward {host_us(lambda s: mod(*inputs), lambda: None):.0f} us (recording gradients)")
print(f"backward {host_us(backward, prepare):.0f} us (engine thread)")
got = {}
real_call = _tape.TAPES.call


def grab(options, fn, tensors):
    got[options[0]] = (_tape.TAPES.tapes[_tape.TAPES.key(options, tensors)] if not torch.is_grad_enabled() else None,
                       tensors)
    return real_call(options, fn, tensors)


_tape.TAPES.call = grab
backward(prepare())
_tape.TAPES.call = real_call
with torch.no_grad():
    for name, (tape, tensors) in got.items():
        if type(tape) is _tape.Tape:
            print(f"{name}: the tape alone {host_us(lambda s: tape(tensors), lambda: None):.0f} us, its key "
                  f"{host_us(lambda s: _tape.TAPES.key((name,), tensors), lambda: None):.0f} us")
    B, S, N, c, R = case.B, case.S, case.N, case.width, case.pair
    a = torch.randn(B, S, N, c, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    scale = torch.rand(B, N, N, device="cuda")
    w = torch.randn(R, c * c, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(R, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(B, N, N, R, device="cuda", dtype=torch.bfloat16)
    outer_products_wgmma(a, b, scale, w, bias, out, 1)
    print(f"Gluon launcher alone {host_us(lambda s: outer_products_wgmma(a, b, scale, w, bias, out, 1), lambda: None):.0f} us")
torch.autograd.set_multithreading_enabled(False)  # (the backward on this thread, where cProfile sees it)
print(f"step, backward on the calling thread {host_us(step, lambda: [setattr(t, 'grad', None) for t in leaves]):.0f} us")
prof = cProfile.Profile()
for _ in range(10):
    for t in leaves:
        t.grad = None
    torch.cuda.synchronize()
    torch.cuda._sleep(40_000_000)
    prof.enable()
    step(None)
    prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(22)

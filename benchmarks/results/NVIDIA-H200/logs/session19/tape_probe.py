"""Where the taped training step's host time goes (opm-af2-main bf16): which keys hold tapes after a few steps,
the host time of the backward replayed, run as it is (tapes off), and the tape's replay alone; a cProfile of
replayed backwards."""
import cProfile
import pstats
import statistics
import time

import torch

from evofuse import _library
from evofuse.ops import _tape
from evofuse.suite import SUITE, make_inputs, make_module

case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case).cuda().to(torch.bfloat16)
inputs = make_inputs(case, "cuda", torch.bfloat16, fully_masked=False)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in inputs]
leaves = list(mod.parameters()) + [t for t in inputs if t.dim() == 4]


def host_us(fn, before, calls=30):
    times = []
    for _ in range(calls):
        state = before()
        torch.cuda.synchronize()
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


for _ in range(4):
    backward(prepare())
torch.cuda.synchronize()
print("keys:", [(k[0], type(v).__name__ if type(v) is _tape.Tape else v) for k, v in _tape.TAPES.tapes.items()])
x = torch.zeros(1, device="cuda")
print(f"x.add_ {host_us(lambda s: x.add_(1), lambda: None):.1f} us")
print(f"backward replayed {host_us(backward, prepare):.0f} us")
real_call = _tape.TAPES.call
_tape.TAPES.call = lambda options, fn, tensors: fn(*tensors)
print(f"backward as it is {host_us(backward, prepare):.0f} us")
_tape.TAPES.call = real_call
got = {}


def grab(options, fn, tensors):
    got[options[0]] = (_tape.TAPES.tapes[_tape.TAPES.key(options, tensors)], tensors)
    return real_call(options, fn, tensors)


_library.TAPES.call = grab
backward(prepare())
_library.TAPES.call = real_call
tape, tensors = got["opm-backward"]
with torch.no_grad():
    print(f"the tape alone {host_us(lambda s: tape(tensors), lambda: None):.0f} us ({len(tape.steps)} steps)")
    print(f"its key {host_us(lambda s: _tape.TAPES.key(('opm-backward',), tensors), lambda: None):.0f} us")
torch.autograd.set_multithreading_enabled(False)  # (the backward on this thread, where cProfile sees it)
print(f"backward replayed, on the calling thread {host_us(backward, prepare):.0f} us")
prof = cProfile.Profile()
for _ in range(10):
    state = prepare()
    torch.cuda.synchronize()
    prof.enable()
    backward(state)
    prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(25)

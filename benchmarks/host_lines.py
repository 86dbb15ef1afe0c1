"""The host's time of a call line by line, in evofuse's own functions: where host-bound calls spend it.

python3 benchmarks/host_lines.py [CASE ...] [--dtype bfloat16] [--train] [--top 40]
For each case, one call (with --train the training step: forward, then backward with an all-ones output
gradient, gradients set to None before it) is traced `--calls` times, each after a synchronize (nothing
queued ahead). Every line executed in a function of the evofuse package is charged the host time until
the next line of the same function (inclusive: a line's callees are in it, nested lines listed beside it).
The backward runs on the calling thread (autograd's multithreading off) so that it is traced. The tracer
adds ~1 us a line and a call, so the lines' sum exceeds an untraced call's time (printed beside);
read it for where the time goes, not for the total.
"""

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

import torch

import evofuse
from evofuse.bench import training_step
from evofuse.suite import SUITE, make_inputs, make_module

PACKAGE = os.path.dirname(evofuse.__file__)


class LineTimes:
    """sys.settrace tracer: host nanoseconds charged to (file, line) of evofuse's frames, per traced call."""

    def __init__(self):
        self.calls: list[dict] = []
        self.counts: dict = defaultdict(int)
        self.names: dict = {}

    def trace(self, fn):
        times = defaultdict(int)
        last = {}  # frame -> (key, start ns) of its line being run

        def local(frame, event, arg):
            now = time.perf_counter_ns()
            prev = last.pop(frame, None)
            if prev is not None:
                times[prev[0]] += now - prev[1]
            if event == "line":
                key = (frame.f_code.co_filename, frame.f_lineno)
                self.names[key] = frame.f_code.co_name
                self.counts[key] += 1
                last[frame] = (key, time.perf_counter_ns())
            return local

        def global_(frame, event, arg):
            if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
                return local
            return None

        torch.cuda.synchronize()
        sys.settrace(global_)
        try:
            with torch.autograd.set_multithreading_enabled(False):  # the backward on this thread, traced
                fn()
        finally:
            sys.settrace(None)
        torch.cuda.synchronize()
        self.calls.append(times)

    def table(self, top: int) -> list[str]:
        keys = {k for c in self.calls for k in c}
        med = {k: statistics.median(c.get(k, 0) for c in self.calls) / 1e3 for k in keys}
        rows = []
        for key in sorted(keys, key=lambda k: -med[k])[:top]:
            path, line = key
            with open(path) as f:
                text = f.readlines()[line - 1].strip()
            rel = os.path.relpath(path, os.path.dirname(PACKAGE))
            n = self.counts[key] / len(self.calls)
            rows.append(f"  {med[key]:8.1f} us {n:5.1f} x  {rel}:{line} {self.names[key]}: {text[:80]}")
        return rows


def untraced_us(fn, calls=30):
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", default=["opm-af2-main"])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    by_name = {c.name: c for c in SUITE}
    for name in args.cases:
        case = by_name[name]
        mod = make_module(case).cuda().to(dtype)
        inputs = make_inputs(case, "cuda", dtype, fully_masked=False)
        if args.train:
            inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in inputs]
            leaves = list(mod.parameters()) + [t for t in inputs if t.dim() == 4]
            step = training_step(lambda: mod(*inputs))

            def call():
                for t in leaves:
                    t.grad = None
                step()
        else:
            def call():
                with torch.no_grad():
                    mod(*inputs)
        for _ in range(3):
            call()
        lines = LineTimes()
        for _ in range(args.calls):
            lines.trace(call)
        what = "training step" if args.train else "forward"
        print(f"\n{name} {args.dtype} {what}: host {untraced_us(call):.0f} us a call untraced, lines traced (median "
              f"of {args.calls} calls, inclusive of callees):")
        print("\n".join(lines.table(args.top)))


if __name__ == "__main__":
    main()

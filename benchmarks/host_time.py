"""The host's own time of each part of a call: what bounds small problems and host-bound training.

python3 benchmarks/host_time.py [CASE ...] [--dtype bfloat16] [--block-mib M ...]
For each case, the median over 50 calls of the host time of one call made after a synchronize (nothing
queued ahead, so that no wait on the device is counted): the forward without gradients, the forward
recording them, the backward alone, the whole training step; beside the device's time of the step
(do_bench median) and PyTorch's own x.add_(1). --block-mib reruns the training step with the Outer
Product Mean backward's row blocks of that many MiB (`evofuse._backward.BLOCK_BYTES`).
"""

import argparse
import statistics
import time

import torch
import triton.testing

from evofuse import _backward
from evofuse.suite import SUITE, make_inputs, make_module


def host_us(fn, before=None, calls=50):
    """Median host microseconds of fn(), each call after before() and a synchronize."""
    times = []
    for _ in range(calls):
        state = before() if before else None
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(state) if before else fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", default=["opm-seed", "att-seed", "opm-af2-main", "att-af2-main"])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--block-mib", type=int, nargs="*", default=[])
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    x = torch.zeros(1, device="cuda")
    print(f"this host: {host_us(lambda: x.add_(1)):.1f} us for x.add_(1) on a one-element CUDA tensor")
    by_name = {c.name: c for c in SUITE}
    for name in args.cases:
        case = by_name[name]
        mod = make_module(case).cuda().to(dtype)
        inputs = make_inputs(case, "cuda", dtype, fully_masked=False)
        inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in inputs]
        leaves = list(mod.parameters()) + [t for t in inputs if t.dim() == 4]

        def forward():
            return mod(*inputs)

        def no_grad():
            with torch.no_grad():
                mod(*inputs)

        def clear():
            for t in leaves:
                t.grad = None

        def step():
            clear()
            out = forward()
            out.backward(torch.ones_like(out))

        def backward(out):
            out.backward(torch.ones_like(out))

        def prepare():
            clear()
            return forward()

        step()
        ms = triton.testing.do_bench(step, warmup=10, rep=50, return_mode="median")
        parts = dict(forward_no_grad=host_us(no_grad), forward_grad=host_us(forward), backward=host_us(backward, prepare),
                     step=host_us(step))
        print(f"{name} {args.dtype}: host us a call " + ", ".join(f"{k} {v:.0f}" for k, v in parts.items())
              + f"; the step in do_bench {ms * 1e3:.0f} us (median)")
        if name.startswith("opm") and args.block_mib:
            saved = _backward.BLOCK_BYTES
            for mib in args.block_mib:
                _backward.BLOCK_BYTES = mib << 20
                step()
                ms = triton.testing.do_bench(step, warmup=10, rep=50, return_mode="median")
                print(f"  row blocks of {mib} MiB: step host {host_us(step):.0f} us, do_bench {ms * 1e3:.0f} us")
            _backward.BLOCK_BYTES = saved


if __name__ == "__main__":
    main()

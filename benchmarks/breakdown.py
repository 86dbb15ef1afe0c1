"""Where a forward's time goes, kernel by kernel, from torch.profiler's CUDA activity.

python3 benchmarks/breakdown.py [CASE ...] [--dtype bfloat16|float32]
For each case: the device time of every kernel one evofuse forward launches (mean of 10 forwards),
and their sum next to the forward's wall time, so that launch gaps show too.
"""

import argparse

import torch
import triton.testing
from torch.profiler import ProfilerActivity, profile

from evofuse.suite import SUITE, make_inputs, make_module


def breakdown(case, dtype, reps=10):
    mod = make_module(case).cuda().to(dtype)
    inputs = make_inputs(case, "cuda", dtype, fully_masked=False)
    with torch.no_grad():
        ms = triton.testing.do_bench(lambda: mod(*inputs), warmup=25, rep=100, return_mode="median")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                mod(*inputs)
            torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / reps / 1e3) for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    total = sum(t for _, t in rows)
    print(f"\n{case.name} {dtype}: forward {ms:.3f} ms (do_bench median), kernels {total:.3f} ms")
    for name, t in rows:
        print(f"  {t:8.3f} ms {100 * t / total:5.1f}%  {name[:90]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", default=["opm-af2-main", "att-af2-main"])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = parser.parse_args()
    by_name = {c.name: c for c in SUITE}
    for name in args.cases:
        breakdown(by_name[name], getattr(torch, args.dtype))

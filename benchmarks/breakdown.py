"""Where a forward's time goes, kernel by kernel, from torch.profiler's CUDA activity.

python3 benchmarks/breakdown.py [CASE ...] [--dtype bfloat16|float32] [--train] [--host]
For each case: the device time of every kernel one evofuse forward (with --train: forward and
backward) launches (mean of 10 calls), and their sum next to the call's wall time, so that launch
gaps show too. --host adds the host's time per call (wall time of calls in a row, with and without
the garbage collector, beside PyTorch's own launch time on this host; and of single calls after a
synchronize, the host's own time with nothing queued ahead), any synchronizing operation (PyTorch's sync
debug mode), where it goes (the profiler's host time per operator and CUDA call; cProfile of 500 calls,
25 with --train): what bounds small problems and host-bound training steps.
"""

import argparse
import cProfile
import gc
import pstats
import time
import warnings

import torch
import triton.testing
from host_time import host_us  # benchmarks/host_time.py, beside this script
from torch.profiler import ProfilerActivity, profile

from evofuse.bench import training_step
from evofuse.suite import SUITE, make_inputs, make_module


def breakdown(case, dtype, train=False, reps=10):
    mod = make_module(case).cuda().to(dtype)
    inputs = make_inputs(case, "cuda", dtype, fully_masked=False)
    tensors = None
    if train:  # as the bench's forward+backward rows: gradients set to None before each call
        inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in inputs]
        tensors = list(mod.parameters()) + [t for t in inputs if t.dim() == 4]
        call = training_step(lambda: mod(*inputs))
    else:
        def call():
            with torch.no_grad():
                mod(*inputs)
    ms = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median", grad_to_none=tensors)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            for t in tensors or []:
                t.grad = None
            call()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / reps / 1e3) for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    total = sum(t for _, t in rows)
    what = "forward+backward" if train else "forward"
    print(f"\n{case.name} {dtype}: {what} {ms:.3f} ms (do_bench median), kernels {total:.3f} ms")
    for name, t in rows:
        print(f"  {t:8.3f} ms {100 * t / total:5.1f}%  {name[:90]}")
    return call


def wall_per_call(call, calls):
    """Seconds a call, over `calls` calls in a row (the device's time instead where it is the longer)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    wall = (time.perf_counter() - start) / calls
    torch.cuda.synchronize()
    return wall


def host_profile(call, calls=500):
    x = torch.zeros(1, device="cuda")
    step = wall_per_call(lambda: x.add_(1), 20000)
    print(f"  this host: {step * 1e6:.1f} us a call of x.add_(1) on a one-element CUDA tensor (PyTorch's launch path)")
    wall = wall_per_call(call, 4 * calls)
    gc.disable()  # how much of it the garbage collector takes (its collections run inside whichever call allocates)
    no_gc = wall_per_call(call, 4 * calls)
    gc.enable()
    print(f"  host: {wall * 1e6:.1f} us a call ({no_gc * 1e6:.1f} with the garbage collector off; wall time of "
          f"{4 * calls} calls in a row, no profiler; the device's time instead where the kernels take longer)")
    print(f"  host: {host_us(call, calls=min(calls, 100)):.1f} us a call alone (median of single calls each after a "
          f"synchronize: the host's own time, nothing queued ahead)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        call()
        torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message).splitlines()[0] for w in caught  # (the mode's own notice, on its first use, is not one)
             if "synchroniz" in str(w.message) and "prototype feature" not in str(w.message)]
    print(f"  host: {len(syncs)} synchronizing operations a call (PyTorch's sync debug mode){': ' if syncs else ''}"
          + "; ".join(sorted(set(syncs)))[:300])
    reps = 10
    with profile(activities=[ProfilerActivity.CPU]) as cpu:
        for _ in range(reps):
            call()
        torch.cuda.synchronize()
    rows = sorted(cpu.key_averages(), key=lambda e: -e.self_cpu_time_total)[:16]
    print(f"  host time per operator and CUDA call (torch.profiler, self time, {reps} calls; it adds its own):")
    for e in rows:
        print(f"  {e.self_cpu_time_total / reps:9.1f} us {e.count / reps:6.1f} x  {e.key[:80]}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call()
    prof.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(prof)
    print(f"  host: {stats.total_tt / calls * 1e6:.1f} us a call under cProfile (it adds ~1 us a function call)")
    stats.sort_stats("tottime").print_stats(14)
    stats.sort_stats("cumulative").print_stats(24)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", default=["opm-af2-main", "att-af2-main"])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--train", action="store_true", help="profile forward and backward")
    parser.add_argument("--host", action="store_true", help="also profile the host's time per call")
    args = parser.parse_args()
    by_name = {c.name: c for c in SUITE}
    for name in args.cases:
        call = breakdown(by_name[name], getattr(torch, args.dtype), args.train)
        if args.host:
            host_profile(call, calls=25 if args.train else 500)

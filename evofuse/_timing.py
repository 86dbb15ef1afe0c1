"""Timing helpers shared by `evofuse bench`, its grid and the benchmark scripts."""

from __future__ import annotations

import gc
import statistics
import time

import torch


def training_step(fn, leaves=()):
    """The forward+backward row's call: the leaves' gradients set to None first (each step's own, none
    accumulated: under CUDA graphs a gradient is a graph's output, which the next replay overwrites), the
    output's gradient all ones."""
    def step():
        for t in leaves:
            t.grad = None
        out = fn()
        out.backward(torch.ones_like(out))
    return step


def measure(fn, train: bool, tensors: list[torch.Tensor]) -> tuple[float, float]:
    """(median ms, peak MiB beyond what is allocated before the call); `tensors`, the leaves of a training row."""
    import triton.testing

    run = training_step(fn, tensors) if train else fn
    run()
    torch.cuda.synchronize()
    gc.collect()  # an earlier row's garbage freed during this call would hide its peak (opm-long: 0 MiB)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    ms = triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median")
    return ms, peak


def kernel_launches(run) -> int:
    """The GPU kernels (memory copies and fills included) one call of `run` enqueues, counted by torch.profiler
    after a first call (compilation and autotuning outside the count): what a regression in the call path shows."""
    run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return sum(1 for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA)


def host_ms(run, synchronize, calls: int = 200) -> float:
    """The median host time of one call of `run` (ms) with the device idle: `synchronize` (the device's) before each
    call, the clock stopped when the call returns, before its kernels finish. What a call waits for beyond its own
    host work (a synchronization inside it) shows too."""
    run()
    synchronize()
    times = []
    for _ in range(calls):
        synchronize()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    synchronize()
    return statistics.median(times) * 1e3

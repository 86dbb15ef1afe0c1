"""Timing helpers shared by `evofuse bench`, its grid, its peers and the benchmark scripts: the training step a row
times, the measurement, and the ways a call is run (under autocast, captured in CUDA graphs, compiled)."""

from __future__ import annotations

import gc
import statistics
import time

import torch

from ._runtime import cuda_graph


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
    first = _event_ms(run)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    if first > SLOW_CALL_MS:  # (do_bench would spend 7 calls or more: 3 suffice at this length)
        return statistics.median([first] + [_event_ms(run) for _ in range(2)]), peak
    ms = triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median")
    return ms, peak


# a call longer than this (ms) is timed by three calls, not by do_bench's estimate, warm-up and repeats
SLOW_CALL_MS = 500.0


def _event_ms(run) -> float:
    """One call of `run` between CUDA events, ms."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


# cuBLAS's reduction after a product split over K: its heuristics split a product on one card and not on another
SPLIT_K_REDUCTION = "splitKreduce"


def kernel_names(run) -> list[str]:
    """The GPU kernels (memory copies and fills included) one call of `run` enqueues, by name in their order, from
    torch.profiler after a first call (compilation and autotuning outside them): what a regression in the call path
    shows. cuBLAS's split-K reductions are left out, so that the list is the same on every card."""
    run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [event.name for event in prof.events()
            if event.device_type == torch.autograd.DeviceType.CUDA and SPLIT_K_REDUCTION not in event.name]


def kernel_launches(run) -> int:
    """How many kernels one call of `run` enqueues (`kernel_names`)."""
    return len(kernel_names(run))


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


def autocast_call(fn):
    """`fn` called under CUDA bfloat16 autocast."""
    def run(*inputs):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return fn(*inputs)
    return run


def reduce_overhead(mod):
    """The module under torch.compile(mode="reduce-overhead"): its forward and backward replayed as CUDA graphs."""
    torch.compiler.reset()  # a fresh compile per row, as for torch.compile's rows
    return torch.compile(mod, mode="reduce-overhead", dynamic=False)


def graphed(mod):
    """The module captured once in CUDA graphs and replayed, its inputs the captured ones (as inside a captured
    model: no copies into the graph's buffers, which reduce-overhead's replays make). A forward row: the forward
    by `_runtime.cuda_graph` (its warm-up call autotunes and compiles outside the capture); a training row
    (grad enabled at the first call): forward and backward by `torch.cuda.make_graphed_callables`."""
    state = {}

    def run(*inputs):
        if "graphed" in state:
            return state["graphed"](*inputs)
        if torch.is_grad_enabled():
            state["graphed"] = torch.cuda.make_graphed_callables(mod, inputs)
            return state["graphed"](*inputs)
        if "graph" not in state:
            state["graph"], state["out"] = cuda_graph(lambda: mod(*inputs))
        state["graph"].replay()
        return state["out"]

    return run


def graphed_step(fn, train: bool):
    """fn's call (with `train`, a training step: its backward too) captured once as one CUDA graph after a warm-up on
    a side stream, then replayed: a model block's GPU time without its host's (`benchmarks/models.py --graphs`)."""
    graph = None

    def step():
        out = fn()
        if train:
            out.backward()

    def replay():
        nonlocal graph
        if graph is None:
            graph, _ = cuda_graph(step)
        graph.replay()
    return replay


def graphed_reference(mod):
    """Eager PyTorch's reference (the module's `impl="torch"` path, the eager rows' function) captured as
    `graphed` captures evofuse: the GPU's time of the peer without its host's."""
    mod.impl = "torch"
    return graphed(mod)


def compiled_reduce_overhead(mod):
    """torch.compile's row under `mode="reduce-overhead"`, as evofuse's reduce-overhead row runs: the reference
    (the module's `impl="torch"` path) compiled, its forward and backward replayed as CUDA graphs."""
    mod.impl = "torch"
    return reduce_overhead(mod)


def graphed_compiled(mod):
    """torch.compile's row captured as `graphed` captures evofuse: the compiled reference's GPU time without its
    host's, beside evofuse's CUDA graph row."""
    mod.impl = "torch"
    torch.compiler.reset()
    return graphed(torch.compile(mod, dynamic=False))

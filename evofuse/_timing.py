"""Timing and parameter helpers shared by `evofuse bench` and its grid."""

from __future__ import annotations

import gc
import statistics
import time

import torch


def opm_params(mod):
    return (mod.layer_norm.weight, mod.layer_norm.bias, mod.proj_a.weight, mod.proj_a.bias,
            mod.proj_b.weight, mod.proj_b.bias, mod.out_proj.weight, mod.out_proj.bias)


def att_params(mod):
    return (mod.layer_norm.weight, mod.layer_norm.bias, mod.query.weight, mod.query.bias, mod.key.weight,
            mod.key.bias, mod.value.weight, mod.value.bias, mod.gate.weight, mod.gate.bias,
            mod.out_proj.weight, mod.out_proj.bias, mod.pair_bias.weight, mod.pair_bias.bias)


def pwa_params(mod):
    return (mod.norm_m.weight, mod.norm_m.bias, mod.norm_z.weight, mod.norm_z.bias, mod.proj_m.weight,
            mod.proj_g.weight, mod.proj_z.weight, mod.proj_o.weight)


def tri_params(mod):
    mha = mod.mha
    return (mod.layer_norm.weight, mod.layer_norm.bias, mod.linear.weight, mha.linear_q.weight, mha.linear_k.weight,
            mha.linear_v.weight, mha.linear_g.weight, mha.linear_g.bias, mha.linear_o.weight, mha.linear_o.bias)


def trimul_params(mod):
    return (mod.norm_in.weight, mod.norm_in.bias, mod.p_in.weight, mod.p_in.bias, mod.g_in.weight, mod.g_in.bias,
            mod.norm_out.weight, mod.norm_out.bias, mod.p_out.weight, mod.p_out.bias, mod.g_out.weight, mod.g_out.bias)


def col_params(mod):
    ln, mha = mod._msa_att.layer_norm_m, mod._msa_att.mha
    return (ln.weight, ln.bias, mha.linear_q.weight, mha.linear_k.weight, mha.linear_v.weight, mha.linear_g.weight,
            mha.linear_g.bias, mha.linear_o.weight, mha.linear_o.bias)


def gcol_params(mod):
    att = mod.global_attention
    return (mod.layer_norm_m.weight, mod.layer_norm_m.bias, *(t for name in "qkvgo" for t in (
        getattr(att, f"linear_{name}").weight, getattr(att, f"linear_{name}").bias)))


def trans_params(mod):
    fc2 = (None, None) if mod.fc2 is None else (mod.fc2.weight, mod.fc2.bias)
    return (mod.norm.weight, mod.norm.bias, mod.fc1.weight, mod.fc1.bias, *fc2, mod.fc3.weight, mod.fc3.bias)


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

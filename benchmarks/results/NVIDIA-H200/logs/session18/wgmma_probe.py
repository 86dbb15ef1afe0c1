"""Hopper's Gluon kernel for the bf16 Outer Product Mean (outer_product_mean_wgmma) against the multi-pass Triton
kernel, in one process: for each suite shape, the forward's do_bench median with WGMMA off, then with each of the
Gluon kernel's configs; the OPM kernels' device time (torch.profiler, 10 calls); relative error against float64
(session 18; run 2 compared a's two forms, PASS_MAJOR 0 / 1, with the code of that run); argv: the suite cases.
Small awkward shapes run first, so that a wrong or hanging kernel shows before the timings."""
import dataclasses
import os
import sys
import warnings

import torch
import triton.testing
from torch.profiler import ProfilerActivity, profile

from evofuse.ops import outer_product_mean as opm
from evofuse.ops import outer_product_mean_wgmma as ow
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
os.environ["EVOFUSE_AUTOTUNE"] = "0"
cases = sys.argv[1].split(",") if len(sys.argv) > 1 else ["opm-af2-main"]
configs = ow.CONFIGS


def measure(case, dtype, timed=True):
    mod = make_module(case).cuda()
    x = make_inputs(case, "cuda", dtype, fully_masked=False)
    with torch.no_grad():
        exact = mod.double()(*[t.double() for t in x], impl="torch")
        mod = mod.to(dtype)
        out = mod(*x)
        torch.cuda.synchronize()
        err = ((out.double() - exact).norm() / exact.norm()).item()
        if not timed:
            return err, 0.0, 0.0
        ms = triton.testing.do_bench(lambda: mod(*x), return_mode="median")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                mod(*x)
            torch.cuda.synchronize()
    k = sum(e.device_time_total for e in prof.key_averages() if "_opm_" in e.key) / 10 / 1e3
    return err, ms, k


base = next(c for c in SUITE if c.name == "opm-af2-main")
opm.SMALL_MAX_N = 0
for N, S in ((17, 3), (97, 33), (130, 600)):
    small = dataclasses.replace(base, S=S, N=N, B=2)
    for cfg in configs:
        ow.CONFIGS = (cfg,)
        print(f"N={N} S={S} B=2 config {cfg}: rel err {measure(small, torch.bfloat16, timed=False)[0]:.2e}",
              flush=True)
for name in cases:
    case = next(c for c in SUITE if c.name == name)
    opm.WGMMA = False
    err, ms, k = measure(case, torch.bfloat16)
    print(f"{name} bf16 multi-pass: forward {ms:.3f} ms, OPM kernel {k:.3f} ms, rel err {err:.2e}", flush=True)
    opm.WGMMA = True
    for cfg in configs:
        ow.CONFIGS = (cfg,)
        err, ms, k = measure(case, torch.bfloat16)
        print(f"{name} bf16 wgmma {cfg}: forward {ms:.3f} ms, OPM kernel {k:.3f} ms, rel err {err:.2e}", flush=True)

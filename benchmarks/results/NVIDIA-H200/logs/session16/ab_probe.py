"""The float32 forward (default precision) at opm-af2-main's shape with S MSA rows (argv: S values), the multi-pass
kernel on its default config (autotuning off): do_bench median of the forward, the OPM kernel's device time
(torch.profiler) and the relative error against float64, for whichever evofuse is first on the path (run 5 A/B of
the SPLIT epilogue's forms, session 16)."""
import dataclasses
import os
import sys
import warnings

import torch
import triton.testing
from torch.profiler import ProfilerActivity, profile

import evofuse
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
os.environ["EVOFUSE_AUTOTUNE"] = "0"
version = evofuse.__file__.split("/evofuse/")[0].rsplit("/", 1)[-1]
base = next(c for c in SUITE if c.name == "opm-af2-main")
for S in [int(a) for a in sys.argv[1:]] or [512]:
    case = dataclasses.replace(base, S=S)
    mod = make_module(case).cuda()
    x = make_inputs(case, "cuda", torch.float32, fully_masked=False)
    with torch.no_grad():
        exact = mod.double()(*[t.double() for t in x], impl="torch")
        mod = mod.float()
        out = mod(*x)
        err = ((out.double() - exact).norm() / exact.norm()).item()
        ms = triton.testing.do_bench(lambda: mod(*x), return_mode="median")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                mod(*x)
            torch.cuda.synchronize()
    k = sum(e.device_time_total for e in prof.key_averages() if "_opm_" in e.key) / 10 / 1e3
    print(f"{version} S={S}: forward {ms:.3f} ms, OPM kernel {k:.3f} ms, rel err vs float64 {err:.2e}", flush=True)

"""The float32 forward (default precision) with each candidate config of the multi-pass kernel's SPLIT form forced
(autotuning off), and bf16's default config as a check: do_bench median of the forward, the multi-pass kernel's
device time (torch.profiler) and the output's relative error against the float64 reference (session 16)."""
import os
import sys
import warnings

import torch
import triton
import triton.testing
from torch.profiler import ProfilerActivity, profile

from evofuse.functional import clear_replays
from evofuse.ops import outer_product_mean as opm
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
os.environ["EVOFUSE_AUTOTUNE"] = "0"
every = opm._multipass_configs()
for name in sys.argv[1:] or ["opm-af2-main"]:
    case = next(c for c in SUITE if c.name == name)
    mod = make_module(case).cuda()
    inputs = make_inputs(case, "cuda", torch.float32, fully_masked=False)
    with torch.no_grad():
        exact = mod.double()(*[t.double() for t in inputs], impl="torch")
    for dtype in (torch.float32, torch.bfloat16):
        mod = mod.to(dtype)
        x = [t.to(dtype) if t.dim() == 4 else t for t in inputs]
        for cfg in opm._multipass_prune(every, {}, SPLIT=dtype == torch.float32):
            opm._multipass_configs = lambda cfg=cfg: [cfg]
            clear_replays()
            try:
                with torch.no_grad():
                    out = mod(*x)
                    err = ((out.double() - exact).norm() / exact.norm()).item()
                    ms = triton.testing.do_bench(lambda: mod(*x), return_mode="median")
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(10):
                            mod(*x)
                        torch.cuda.synchronize()
                k = sum(e.device_time_total for e in prof.key_averages() if "multipass" in e.key) / 10 / 1e3
                print(f"{name} {dtype} {cfg}: forward {ms:.3f} ms, kernel {k:.3f} ms, rel err vs float64 {err:.2e}",
                      flush=True)
            except Exception as e:  # out of resources
                print(f"{name} {dtype} {cfg}: {type(e).__name__} {str(e)[:100]}", flush=True)
        opm._multipass_configs = lambda: every

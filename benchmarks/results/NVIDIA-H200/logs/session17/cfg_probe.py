"""The float32 forward (default precision) on the multi-pass kernel with each SPLIT config forced, plus the pipelined
32-row weight blocks (BLOCK_R 32, W_STAGES 2) that session 16 dropped for wrong outputs at N = 97: at opm-af2-main's
shape (S = 512) the do_bench median of the forward, the OPM kernel's device time (torch.profiler) and the relative
error against float64; at the GPU test's awkward shape (N = 97, S = 33, hidden_dim 32, R = 128) the relative error.
Each config runs alone in its process state (the workspace is sized from the configs each call, session 17)."""
import dataclasses
import os
import warnings

import torch
import triton
import triton.testing
from torch.profiler import ProfilerActivity, profile

from evofuse.ops import outer_product_mean as opm
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
os.environ["EVOFUSE_AUTOTUNE"] = "0"
split = opm._multipass_prune(opm._multipass_configs(), {}, SPLIT=True)
extra = triton.Config({**split[0].kwargs, "BLOCK_R": 32, "W_STAGES": 2}, num_warps=8, num_stages=3)
base = next(c for c in SUITE if c.name == "opm-af2-main")
awkward = dataclasses.replace(base, S=33, N=97)
for cfg in split + [extra]:
    opm._multipass_configs = lambda cfg=cfg: [cfg]
    errs = []
    for case in (base, awkward):
        mod = make_module(case).cuda()
        x = make_inputs(case, "cuda", torch.float32, fully_masked=False)
        with torch.no_grad():
            exact = mod.double()(*[t.double() for t in x], impl="torch")
            mod = mod.float()
            out = mod(*x)
            errs.append(((out.double() - exact).norm() / exact.norm()).item())
            if case is base:
                ms = triton.testing.do_bench(lambda: mod(*x), return_mode="median")
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        mod(*x)
                    torch.cuda.synchronize()
    k = sum(e.device_time_total for e in prof.key_averages() if "_opm_" in e.key) / 10 / 1e3
    m = cfg.kwargs
    print(f"{m['TILE_ROWS']}x{m['TILE_COLS']} BLOCK_S {m['BLOCK_S']} BLOCK_R {m['BLOCK_R']} W_STAGES {m['W_STAGES']} "
          f"stages {cfg.num_stages}: forward {ms:.3f} ms, OPM kernel {k:.3f} ms, rel err {errs[0]:.2e}; "
          f"N=97 S=33 rel err {errs[1]:.2e}", flush=True)

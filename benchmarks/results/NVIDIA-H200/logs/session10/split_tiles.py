"""Session 10 probe: the float32 SPLIT LayerNorm-projection kernel at opm-af2-main under each row tile and warps.

python3 split_tiles.py: one line per (rows, warps): its mean device time (torch.profiler, 20 forwards) and the forward's.
"""
import sys

import torch
import triton.testing
from torch.profiler import ProfilerActivity, profile

import evofuse.ops.layer_norm_linear as lnl
from evofuse.suite import SUITE, make_inputs, make_module

default = lnl._launch_tiles
case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case).cuda().float()
inputs = make_inputs(case, "cuda", torch.float32, fully_masked=False)
for rows, warps in ((32, 8), (16, 4), (16, 8), (32, 4), (64, 8), (8, 4), (64, 4)):
    def tiles(D, K, split, rows=rows, warps=warps):
        r, bd, bk, w = default(D, K, split)
        return (rows, bd, bk, warps) if split else (r, bd, bk, w)
    lnl._launch_tiles = tiles
    try:
        with torch.no_grad():
            ms = triton.testing.do_bench(lambda: mod(*inputs), warmup=5, rep=40, return_mode="median")
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    mod(*inputs)
                torch.cuda.synchronize()
    except Exception as err:
        print(f"  rows {rows} warps {warps}: {type(err).__name__} {str(err)[:120]}")
        continue
    t = sum(e.device_time_total for e in prof.key_averages() if "_ln_linear" in e.key) / 20e3
    print(f"  rows {rows:3d} warps {warps}: ln_linear {t:.3f} ms, forward {ms:.3f} ms", flush=True)
sys.exit(0)

"""The bf16 forward at opm-af2-main with each candidate config of the two-pass kernel forced (autotuning off): do_bench
median of the forward (device-bound: its host time is ~0.3 ms against ~0.6 of kernels) and of the kernel alone
(torch.profiler), session 15 run 2."""
import warnings

import torch
import triton
import triton.testing
from torch.profiler import ProfilerActivity, profile

from evofuse.functional import clear_replays
from evofuse.ops import outer_product_mean as opm
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case).cuda().to(torch.bfloat16)
inputs = make_inputs(case, "cuda", torch.bfloat16, fully_masked=False)
ref = None
for tr, tc, bs, br, gi, w, st in [(128, 256, 64, 64, 8, 8, 3), (128, 256, 64, 64, 8, 8, 2), (128, 256, 32, 64, 8, 8, 3),
                                  (128, 256, 32, 64, 8, 8, 4), (128, 256, 32, 64, 8, 8, 2), (128, 256, 64, 64, 4, 8, 3),
                                  (128, 256, 64, 64, 16, 8, 3), (128, 256, 32, 64, 16, 8, 3), (128, 256, 64, 64, 8, 16, 2),
                                  (128, 256, 32, 64, 8, 16, 3), (128, 256, 64, 64, 48, 8, 3), (128, 256, 32, 64, 48, 8, 3)]:
    cfg = triton.Config({"TILE_ROWS": tr, "TILE_COLS": tc, "BLOCK_S": bs, "BLOCK_R": br, "GROUP_I": gi}, num_warps=w,
                        num_stages=st)
    opm._two_pass_configs = lambda cfg=cfg: [cfg]
    opm._workspace_size.cache_clear()
    clear_replays()
    import os
    os.environ["EVOFUSE_AUTOTUNE"] = "0"
    try:
        with torch.no_grad():
            out = mod(*inputs)
            if ref is None:
                ref = out
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            ms = triton.testing.do_bench(lambda: mod(*inputs), return_mode="median")
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    mod(*inputs)
                torch.cuda.synchronize()
        k = sum(e.device_time_total for e in prof.key_averages() if "two_pass" in e.key) / 10 / 1e3
        print(f"{tr} x {tc} BLOCK_S {bs} BLOCK_R {br} GROUP_I {gi} warps {w} stages {st}: forward {ms:.3f} ms, "
              f"kernel {k:.3f} ms, diff to the first {err:.1e}", flush=True)
    except Exception as e:  # out of resources
        print(f"{tr} x {tc} BLOCK_S {bs} GROUP_I {gi} warps {w} stages {st}: {type(e).__name__} {str(e)[:80]}", flush=True)

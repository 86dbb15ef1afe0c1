"""Session 10 probe: the row attention backward kernels' device time at att-af2-main (training step) under
one config at a time, with register caps (maxnreg) and persistent programs per SM for the fused kernel.

python3 bwd_configs.py DTYPE [short]: one line per config: the step's do_bench median and each backward kernel's mean
time from torch.profiler (10 steps). short: run 2's list (the tiles without register caps that led in
run 1); stages: run 3's (deeper pipelines of the 4-warp tiles); fp32: run 4's float32 candidates for the default.
"""
import os
import sys

os.environ["EVOFUSE_AUTOTUNE"] = "0"  # the first config of _bwd_configs(), patched below, is launched

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import evofuse.ops.row_attention as ra  # noqa: E402
from evofuse.bench import training_step  # noqa: E402
from evofuse.suite import SUITE, make_inputs, make_module  # noqa: E402

# (BLOCK_M, BLOCK_N, warps, stages, maxnreg, fused programs per SM)
CANDIDATES = [(64, 64, 8, 2, None, 2), (64, 64, 8, 2, 96, 2), (64, 64, 8, 2, 128, 2), (64, 64, 8, 2, 128, 3),
              (64, 64, 8, 2, 168, 2), (64, 64, 4, 2, None, 2), (64, 64, 4, 2, 128, 4), (64, 64, 8, 3, None, 2),
              (64, 64, 8, 3, 96, 2), (128, 64, 8, 2, None, 2), (128, 64, 8, 2, 128, 2), (64, 128, 8, 2, None, 2),
              (64, 128, 8, 2, 168, 2), (32, 64, 4, 2, None, 2), (32, 64, 4, 2, 128, 4), (32, 64, 4, 2, 168, 3),
              (64, 32, 4, 2, None, 2), (64, 32, 4, 2, 128, 4), (32, 32, 4, 2, None, 2), (32, 32, 4, 2, 128, 4)]

if sys.argv[2:] == ["short"]:
    CANDIDATES = [(64, 64, 4, 2, None, 2), (64, 64, 4, 2, None, 3), (128, 64, 8, 2, None, 2), (64, 128, 8, 2, None, 2),
                  (64, 64, 8, 2, None, 2), (32, 64, 4, 2, 168, 3)]
if sys.argv[2:] == ["stages"]:
    CANDIDATES = [(64, 64, 4, 2, None, 2), (64, 64, 4, 3, None, 2), (64, 64, 4, 4, None, 2), (64, 32, 4, 3, None, 3),
                  (64, 32, 4, 4, None, 3), (32, 64, 4, 3, None, 3)]
if sys.argv[2:] == ["fp32"]:
    CANDIDATES = [(64, 64, 8, 2, None, 2), (64, 64, 4, 2, None, 2), (64, 64, 4, 3, None, 2), (128, 64, 8, 2, None, 2)]
dtype = getattr(torch, sys.argv[1])
case = next(c for c in SUITE if c.name == "att-af2-main")
mod = make_module(case).cuda().to(dtype)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in make_inputs(case, "cuda", dtype, fully_masked=False)]
tensors = list(mod.parameters()) + [t for t in inputs if t.dim() == 4]
step = training_step(lambda: mod(*inputs))
print(f"att-af2-main {dtype} training step, backward kernels (ms)")
for bm, bn, w, st, mr, per_sm in CANDIDATES:
    cfg = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st, maxnreg=mr)
    ra._bwd_configs = lambda cfg=cfg: [cfg]
    ra._keys_workspace_size.cache_clear()
    ra.KEYS_PROGRAMS_PER_SM = per_sm
    tag = f"{bm:3d}x{bn:<3d} w{w} s{st} maxnreg={mr} per_sm={per_sm}"
    try:
        ms = triton.testing.do_bench(step, warmup=5, rep=40, return_mode="median", grad_to_none=tensors)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                for t in tensors:
                    t.grad = None
                step()
            torch.cuda.synchronize()
    except Exception as err:  # a config that fails to compile or launch is a finding
        print(f"  {tag}: {type(err).__name__} {str(err)[:120]}")
        continue
    times = {e.key.replace("_row_attention_bwd_", "").replace("_kernel", ""): e.device_time_total / 10e3
             for e in prof.key_averages() if "bwd" in e.key and e.device_time_total > 0}
    print(f"  {tag}: step {ms:.3f}  " + "  ".join(f"{k} {v:.3f}" for k, v in sorted(times.items())), flush=True)

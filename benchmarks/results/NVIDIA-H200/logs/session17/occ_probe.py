"""Two programs a multiprocessor for the multi-pass kernel: 4-warp configs whose shared memory (72-104 KiB) and
registers (<= 255 x 128 threads) let two programs share an SM, so that one's epilogue can overlap the other's main
loop (ncu, session 16: one 8-warp program an SM, latency-bound, nothing overlapping the epilogue). Each config is
forced (autotuning off, pruning off) with 1 or 2 persistent programs a multiprocessor; at opm-af2-main's shape
(S = 512): do_bench median of the forward, the OPM kernel's device time (torch.profiler), relative error against
float64; at the GPU test's awkward shape (N = 97, S = 33) the relative error (session 17)."""
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
sms = torch.cuda.get_device_properties(0).multi_processor_count
default = {dt: opm._multipass_prune(opm._multipass_configs(), {}, SPLIT=dt == torch.float32)[0]
           for dt in (torch.bfloat16, torch.float32)}


def cfg(tile_rows, tile_cols, passes, block_s, stages):
    return triton.Config({"PASSES": passes, "TILE_ROWS": tile_rows, "TILE_COLS": tile_cols, "BLOCK_S": block_s,
                          "BLOCK_R": 64, "W_STAGES": 1, "GROUP_I": 8}, num_warps=4, num_stages=stages)


runs = [(torch.bfloat16, default[torch.bfloat16], 1), (torch.bfloat16, cfg(64, 256, 4, 32, 2), 1),
        (torch.bfloat16, cfg(64, 256, 4, 32, 2), 2), (torch.bfloat16, cfg(64, 256, 4, 64, 2), 2),
        (torch.bfloat16, cfg(128, 128, 2, 32, 2), 1), (torch.bfloat16, cfg(128, 128, 2, 32, 2), 2),
        (torch.float32, default[torch.float32], 1), (torch.float32, cfg(64, 128, 4, 32, 2), 2)]
base = next(c for c in SUITE if c.name == "opm-af2-main")
awkward = dataclasses.replace(base, S=33, N=97)
opm._multipass_prune = lambda configs, named_args, **kwargs: configs
for dtype, config, per_sm in runs:
    opm._multipass_configs = lambda config=config: [config]
    opm._programs = lambda device, per_sm=per_sm: per_sm * sms
    errs = []
    for case in (base, awkward):
        mod = make_module(case).cuda()
        x = make_inputs(case, "cuda", dtype, fully_masked=False)
        with torch.no_grad():
            exact = mod.double()(*[t.double() for t in x], impl="torch")
            mod = mod.to(dtype)
            out = mod(*x)
            errs.append(((out.double() - exact).norm() / exact.norm()).item())
            if case is base:
                ms = triton.testing.do_bench(lambda: mod(*x), return_mode="median")
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        mod(*x)
                    torch.cuda.synchronize()
    k = sum(e.device_time_total for e in prof.key_averages() if "_opm_" in e.key) / 10 / 1e3
    m = config.kwargs
    print(f"{str(dtype)[6:]} {m['TILE_ROWS']}x{m['TILE_COLS']} PASSES {m['PASSES']} BLOCK_S {m['BLOCK_S']} "
          f"W_STAGES {m['W_STAGES']} warps {config.num_warps} stages {config.num_stages}, {per_sm} a SM: forward "
          f"{ms:.3f} ms, OPM kernel {k:.3f} ms, rel err {errs[0]:.2e}; N=97 S=33 rel err {errs[1]:.2e}", flush=True)

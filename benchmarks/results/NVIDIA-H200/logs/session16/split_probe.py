"""The Outer Product Mean's forward at opm-af2-main's shape with S MSA rows (argv: S values; default 512), float32 at
the default precision on the multi-pass kernel with each of its SPLIT configs forced, on the one-pass kernel
(MULTIPASS off, the form before session 16), and bf16 on its default: do_bench median of the forward, the OPM
kernel's device time (torch.profiler) and the output's relative error against the float64 reference. The kernel's
time against S separates its main loop (per row) from its epilogue (per tile) (session 16). --multipass: the
multi-pass forms only (run 4)."""
import dataclasses
import os
import sys
import warnings

import torch
import triton.testing
from torch.profiler import ProfilerActivity, profile

from evofuse.functional import clear_replays
from evofuse.ops import outer_product_mean as opm
from evofuse.suite import SUITE, make_inputs, make_module

warnings.filterwarnings("ignore")
os.environ["EVOFUSE_AUTOTUNE"] = "0"
every = opm._multipass_configs()
base = next(c for c in SUITE if c.name == "opm-af2-main")
multipass_only = "--multipass" in sys.argv
for S in [int(a) for a in sys.argv[1:] if a.isdigit()] or [512]:
    case = dataclasses.replace(base, S=S)
    mod = make_module(case).cuda()
    inputs = make_inputs(case, "cuda", torch.float32, fully_masked=False)
    with torch.no_grad():
        exact = mod.double()(*[t.double() for t in inputs], impl="torch")
    forms = [(torch.float32, True, cfg) for cfg in opm._multipass_prune(every, {}, SPLIT=True)]
    forms += [] if multipass_only else [(torch.float32, False, None)]
    forms += [(torch.bfloat16, True, every[0])]
    for dtype, multipass, cfg in forms:
        mod = mod.to(dtype)
        x = [t.to(dtype) if t.dim() == 4 else t for t in inputs]
        opm.MULTIPASS = multipass
        opm._multipass_configs = lambda cfg=cfg: [cfg] if cfg is not None else every
        clear_replays()
        what = f"S={S} {dtype} " + (f"multi-pass {cfg}" if multipass else "one-pass")
        try:
            with torch.no_grad():
                out = mod(*x)
                err = ((out.double() - exact).norm() / exact.norm()).item()
                ms = triton.testing.do_bench(lambda: mod(*x), return_mode="median")
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        mod(*x)
                    torch.cuda.synchronize()
            k = sum(e.device_time_total for e in prof.key_averages() if "_opm_" in e.key) / 10 / 1e3
            print(f"{what}: forward {ms:.3f} ms, OPM kernel {k:.3f} ms, rel err vs float64 {err:.2e}", flush=True)
        except Exception as e:  # out of resources
            print(f"{what}: {type(e).__name__} {str(e)[:100]}", flush=True)
    opm.MULTIPASS = True
    opm._multipass_configs = lambda: every

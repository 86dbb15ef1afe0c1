"""Session 9 probe: opm-af2-main float32 forward (default precision) of this tree, kernel by kernel,
and the split product's cuBLAS call with alpha 1 and 2**-12 (python3 fp32_ab.py [--shift K])."""
import argparse

import torch
import triton.testing
from torch.profiler import ProfilerActivity, profile

import evofuse.ops.split_linear as sl
from evofuse.suite import SUITE, make_inputs, make_module

ap = argparse.ArgumentParser()
ap.add_argument("--shift", type=int, default=None)
ap.add_argument("--tag", default="")
ap.add_argument("--alpha", action="store_true")
args = ap.parse_args()
if args.shift is not None:
    sl.PRODUCT_SHIFT = args.shift

case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case).cuda().float()
inputs = make_inputs(case, "cuda", torch.float32, fully_masked=False)
def call():
    with torch.no_grad():
        mod(*inputs)
for _ in range(3):
    ms = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median")
    print(f"{args.tag} forward {ms:.3f} ms", flush=True)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(10):
        call()
    torch.cuda.synchronize()
rows = sorted(((e.key, e.device_time_total / 10e3) for e in prof.key_averages() if e.device_time_total > 0), key=lambda r: -r[1])
for name, t in rows:
    print(f"  {args.tag} {t:8.3f} ms  {name[:100]}")
if args.alpha:
    a = torch.randn(196608, 768, device="cuda").half()
    b = torch.randn(768, 64, device="cuda").half()
    bias = torch.randn(64, device="cuda")
    out = torch.empty(196608, 64, device="cuda")
    for alpha in (1.0, 2.0 ** -12):
        ms = triton.testing.do_bench(lambda: torch.addmm(bias, a, b, alpha=alpha, out_dtype=torch.float32, out=out),
                                     return_mode="median")
        print(f"addmm 196608x768 @ 768x64 fp16->fp32 alpha={alpha}: {ms*1e3:.1f} us")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.addmm(bias, a, b, alpha=alpha, out_dtype=torch.float32, out=out)
            torch.cuda.synchronize()
        print("   ", [e.key[:80] for e in prof.key_averages() if e.device_time_total > 0])

"""The forward's time at a suite shape with the bench's mask, without a mask, and each normalization
(what the in-loop mask counts cost): python3 fwd_mask.py CASE [DTYPE]."""
import sys

import torch
import triton.testing

from evofuse.suite import SUITE, make_inputs, make_module

case = next(c for c in SUITE if c.name == sys.argv[1])
dtype = getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "bfloat16")
x, mask = make_inputs(case, "cuda", dtype, fully_masked=False)
for norm in ("seed", "af2"):
    mod = make_module(case).cuda().to(dtype)
    mod.normalization = norm
    for name, m in (("mask", mask), ("no mask", None)):
        with torch.no_grad():
            ms = triton.testing.do_bench(lambda: mod(x, m), warmup=25, rep=200, return_mode="median")
        print(f"{case.name} {dtype} {norm:5s} {name:8s} {ms:.3f} ms")

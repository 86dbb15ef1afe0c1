"""The Outer Product Mean backward's LayerNorm + projection gradients at opm-af2-main bf16, alone: session 11's
chain (LayerNorm recompute with statistics, one product, the mask, cat, the weight products, the LayerNorm
backward) against `ln_linear_backward` (run 2: one pass with per-program weight sums; from run 5: row tiles held
transposed, then cuBLAS's dW) at several programs a multiprocessor. python3 lnbwd_probe.py"""
import torch
import triton.testing

import evofuse._backward as bw
import evofuse.ops.layer_norm_linear as lnl
from evofuse.suite import SUITE, make_inputs, make_module

case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case).cuda().to(torch.bfloat16)
x, mask = make_inputs(case, "cuda", torch.bfloat16, fully_masked=False)
params = [p.detach() for p in mod.parameters()][:6]
B, S, N, D = x.shape
c = params[2].shape[0]
mask_f = mask.float()
da = torch.randn(B, S, N, c, device="cuda", dtype=torch.bfloat16)
db = torch.randn(B, S, N * c, device="cuda")


def old():
    y, xn, mean, rstd = lnl.ln_project(x, params[0], params[1], [params[2], params[4]], [params[3], params[5]], 1e-5)
    mx = mask.to(torch.bfloat16)[..., None]
    ad, bd = y[..., :c] * mx, y[..., c:] * mx
    dy = torch.cat([da, db.view(B, S, N, c).to(torch.bfloat16)], -1)
    return bw._ln_linear_grads(dy * mx, x, xn, mean, rstd, params, True, [True] * 6), ad, bd


w = torch.cat([params[2], params[4]])


def new():
    return lnl.ln_linear_backward(x, params[0], params[1], w, mask_f, da, db, 1e-5)


print(f"session 11 chain (recompute + grads): {triton.testing.do_bench(old, warmup=25, rep=200, return_mode='median'):.4f} ms")
print(f"ln_linear_backward (default): {triton.testing.do_bench(new, warmup=25, rep=200, return_mode='median'):.4f} ms")
for per_sm in (1, 3, 4):
    lnl.LN_LINEAR_BWD_PROGRAMS_PER_SM = per_sm
    print(f"ln_linear_backward, {per_sm} programs a multiprocessor: "
          f"{triton.testing.do_bench(new, warmup=25, rep=200, return_mode='median'):.4f} ms")

"""Launches the package's ln_linear_backward kernel, dX and dW at opm-af2-main bf16 a few times (for ncu)."""
import torch

import evofuse.ops.layer_norm_linear as lnl
import evofuse.ops.outer_product_mean as opm

torch.manual_seed(0)
B, S, N, D, c, R, n = 1, 512, 384, 256, 32, 128, 192
xm = torch.randn(B, S, N, D, device="cuda", dtype=torch.bfloat16)
mask = (torch.rand(B, S, N, device="cuda") > 0.1).float()
lnw, lnb = torch.randn(D, device="cuda", dtype=torch.bfloat16), torch.randn(D, device="cuda", dtype=torch.bfloat16)
wab = (torch.randn(2 * c, D, device="cuda") / 16).to(torch.bfloat16)
da = torch.randn(B, S, N, c, device="cuda", dtype=torch.bfloat16)
db = torch.randn(B, S, N * c, device="cuda")
gs = torch.randn(B, n, N, R, device="cuda", dtype=torch.bfloat16)
w = (torch.randn(R, c * c, device="cuda") / 16).to(torch.bfloat16)
x = torch.randn(B, n * c, N * c, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    lnl.ln_linear_backward(xm, lnw, lnb, wab, mask, da, db, 1e-5)
    opm.outer_product_grad(gs, w, c)
    opm.outer_product_weight_grad(gs, x, c)
torch.cuda.synchronize()

"""The Outer Product Mean backward's LayerNorm + projection gradients at opm-af2-main bf16, alone: session 11's
chain (LayerNorm recompute with statistics, one product, the mask, cat, the weight products, the LayerNorm
backward) against `ln_linear_backward` at several launch settings. python3 lnbwd_probe.py"""
import torch
import triton.testing

import evofuse._backward as bw
import evofuse.ops.layer_norm_linear as lnl
from evofuse.ops._common import cached_launch, cdiv, multiprocessors
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
rows = B * S * N
part = torch.empty(multiprocessors(x.device) * 2, 2 * c * (D + 1) + 2 * D, device="cuda")
dx = torch.empty_like(x)
dy0, dy1 = da.reshape(rows, c), db.reshape(rows, c)
for block_rows, warps, stages, per_sm in ((16, 8, 3, 1), (16, 8, 2, 1), (16, 8, 4, 1), (32, 8, 2, 1), (16, 4, 3, 1),
                                          (16, 8, 3, 2)):
    programs = multiprocessors(x.device) * per_sm

    def launch():
        cached_launch(lnl._ln_linear_bwd_kernel)(
            (programs,), x, *x.stride(), params[0], params[1], w, *w.stride(), mask_f, *mask_f.stride(), dy0, c, dy1, c,
            dx, part, part.stride(0), rows, S, N, D, c, 1e-5, HAS_MASK=True, NEED_X=True, BLOCK_ROWS=block_rows,
            BLOCK_C=32, BLOCK_D=256, num_warps=warps, num_stages=stages)
    ms = triton.testing.do_bench(launch, warmup=25, rep=200, return_mode="median")
    print(f"kernel alone rows={block_rows} warps={warps} stages={stages} programs={programs}: {ms:.4f} ms, "
          f"{(2 * x.numel() * 2 + rows * c * 6) / ms / 1e9:.2f} TB/s")

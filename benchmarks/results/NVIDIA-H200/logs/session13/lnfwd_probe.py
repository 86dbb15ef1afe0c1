"""The Outer Product Mean's projections kernel (`_ln_linear_kernel`: LayerNorm, both projections, the mask) at
opm-af2-main bf16, alone, over its launch shapes (rows a program, warps, stages), with its output compared to the
default launch's. python3 lnfwd_probe.py"""
import torch
import triton.testing

import evofuse.ops.layer_norm_linear as lnl
from evofuse.ops._common import cached_launch, cdiv

torch.manual_seed(0)
B, S, N, D, c = 1, 512, 384, 256, 32
dev = "cuda"
x = torch.randn(B, S, N, D, device=dev, dtype=torch.bfloat16)
mask = (torch.rand(B, S, N, device=dev) > 0.1).float()
lnw, lnb = torch.randn(D, device=dev, dtype=torch.bfloat16), torch.randn(D, device=dev, dtype=torch.bfloat16)
w = (torch.randn(2 * c, D, device=dev) / 16).to(torch.bfloat16)
bias = torch.randn(2 * c, device=dev, dtype=torch.bfloat16)
rows = B * S * N
nbytes = rows * (D * 2 + 2 * c * 2 + 4)
ref = None
for br, warps, stages in ((64, 4, 2), (64, 4, 1), (32, 4, 1), (128, 8, 1), (64, 8, 1), (32, 2, 1), (16, 4, 1), (128, 4, 1)):
    y = torch.empty(2, B, S, N, c, device=dev, dtype=torch.bfloat16)

    def run(br=br, warps=warps, stages=stages, y=y):
        cached_launch(lnl._ln_linear_kernel)(
            (cdiv(rows, br),), x, *x.stride(), lnw, lnb, w, *w.stride(), bias, x, x, mask, *mask.stride(), y, y.stride(0),
            c, rows, S, N, D, 2 * c, 1e-5, SLOT=c, HAS_LN=True, HAS_MASK=True, SPLIT=False, ALPHA=1.0, BLOCK_ROWS=br,
            BLOCK_D=256, BLOCK_K=64, num_warps=warps, num_stages=stages)
    try:
        run()
        ref = y.clone() if ref is None else ref
        t = triton.testing.do_bench(run, warmup=25, rep=150, return_mode="median")
        print(f"rows {br} warps {warps} stages {stages}: {t:.4f} ms, {nbytes / t / 1e6:.0f} GB/s, "
              f"max diff {(y.float() - ref.float()).abs().max().item():.3g}")
    except Exception as e:
        print(f"rows {br} warps {warps} stages {stages}: {type(e).__name__} {str(e)[:200]}")

"""The float32 projections at opm-af2-main (`split_ln_linear`, x (1, 512, 384, 256), K = 64, slot 32, maxima on) with
the LayerNorm-linear kernel's num_stages forced to 1, 2 (the committed value) and 3: do_bench median of the launch
(session 17). One weight tile (K <= BLOCK_K), so a second buffer only holds the same tile."""
import torch
import triton.testing

from evofuse.ops import layer_norm_linear as lnl
from evofuse.ops import split_linear

x = torch.randn(1, 512, 384, 256, device="cuda")
mask = (torch.rand(1, 512, 384, device="cuda") > 0.1).float()
lnw, lnb = 1 + 0.1 * torch.randn(256, device="cuda"), 0.1 * torch.randn(256, device="cuda")
w, b = torch.randn(64, 256, device="cuda") / 16, torch.randn(64, device="cuda")
ref = None
for stages in (2, 1, 3, 2):
    # Triton's own launch (its cache keys on num_stages), the same for every row
    lnl.cached_launch = lambda kernel, stages=stages: (
        lambda grid, *a, **kw: kernel[grid](*a, **{**kw, "num_stages": stages}))
    weights = split_linear.split_ln_weights(lnw, lnb, [w[:32], w[32:]], [b[:32], b[32:]], slots=2)
    out = split_linear.split_ln_linear(x, weights, mask, slot=32, eps=1e-5, amax=True)
    ref = out if ref is None else ref
    ms = triton.testing.do_bench(lambda: split_linear.split_ln_linear(x, weights, mask, slot=32, eps=1e-5, amax=True),
                                 return_mode="median")
    print(f"num_stages {stages}: {ms:.4f} ms, equal to the first: {torch.equal(out, ref)}", flush=True)

"""The OPM backward's Gs pass and the partial sums ended after it at opm-af2-main bf16 (af2), by the Gs kernel's
(BLOCK_P, PAIR_BLOCKS, num_warps): do_bench medians of normalized_grad alone and of it with sum_partials over its
partial sums (session 20 run 7)."""
import torch
import triton.testing

from evofuse.ops import outer_product_mean as opm
from evofuse.ops.partial_sums import sum_partials

B, N, R = 1, 384, 128
g = torch.randn(B, N, N, R, device="cuda", dtype=torch.bfloat16)
scale = torch.rand(B, N, N, device="cuda")
ref = None
for tiles in ((32, 1, 4), (16, 16, 4), (16, 8, 4), (32, 8, 8), (16, 16, 8)):
    opm.GS_TILES = tiles
    gs, parts = opm.normalized_grad(g, scale, True)
    (total,) = sum_partials([parts], torch.float32)
    exact = (g.double() * scale.double()[..., None]).sum((0, 1, 2))
    err = ((total.double() - exact).norm() / exact.norm()).item()
    ref = gs if ref is None else ref
    alone = triton.testing.do_bench(lambda: opm.normalized_grad(g, scale, True), rep=200)
    both = triton.testing.do_bench(lambda: sum_partials([opm.normalized_grad(g, scale, True)[1]], torch.float32), rep=200)
    print(f"{tiles}: rows {parts.shape[0]:5d}  Gs pass {alone * 1e3:6.1f} us  with the sums {both * 1e3:6.1f} us  "
          f"sum rel err {err:.1e}  Gs equal {torch.equal(gs, ref)}")

"""The 16-bit projections kernel (ln_linear, LayerNorm + both projections + mask) at opm-af2-main's shape with a
written as it is (a_passes 1) and pass-major (a_passes 2, for the Hopper OPM kernel), in alternating do_bench
readings of one process; outputs compared (session 18)."""
import torch
import triton.testing

from evofuse.ops.layer_norm_linear import ln_linear

g = torch.Generator(device="cuda").manual_seed(0)
B, S, N, D, c = 1, 512, 384, 256, 32
x = torch.randn(B, S, N, D, device="cuda", generator=g).bfloat16()
w = (torch.randn(2 * c, D, device="cuda", generator=g) / 16).bfloat16()
bias = torch.randn(2 * c, device="cuda", generator=g).bfloat16()
lnw, lnb = torch.ones(D, device="cuda"), torch.zeros(D, device="cuda")
mask = (torch.rand(B, S, N, device="cuda", generator=g) > 0.1).float()
plain = ln_linear(x, w, bias, lnw, lnb, mask, slot=c, a_passes=1)
passes = ln_linear(x, w, bias, lnw, lnb, mask, slot=c, a_passes=2)
first = passes[0].reshape(B, S, 2, N, c // 2).permute(0, 1, 3, 2, 4).reshape(B, S, N, c)
print("pass-major layout equal:", torch.equal(first, plain[0]) and torch.equal(passes[1], plain[1]))
for ap in (1, 2, 1, 2, 1, 2):
    ms = triton.testing.do_bench(lambda: ln_linear(x, w, bias, lnw, lnb, mask, slot=c, a_passes=ap),
                                 return_mode="median")
    print(f"a_passes {ap}: {ms * 1e3:.1f} us", flush=True)

"""The dW kernel's forms at opm-af2-main bf16 (one backward block of 192 rows), session 14 run 5: run 4 read the
kernel with Gs made on chip on its gradient side at 0.279 ms a step against 0.133 with Gs from memory.

Forms: Gs read from memory (`normalized_grad` first, as before session 14); g scaled on chip on the gradient side
(SCALE_G 1, the wgmma's shared operand then written by the threads); the scale on the outer products' side (SCALE_G
2); g as read with outer products normalized by evofuse's `outer_products` kernel (SCALE_G 0), whose time is given
beside cuBLAS's plain a^T b. Each with and without the bias gradient's sums (BIAS)."""
import torch
import triton.testing

from evofuse.ops import outer_product_mean as opm

torch.manual_seed(0)
B, S, N, n, c, R = 1, 512, 384, 192, 32, 128
dev = "cuda"
a = torch.randn(B, S, n, c, device=dev, dtype=torch.bfloat16)
b = torch.randn(B, S, N, c, device=dev, dtype=torch.bfloat16)
g = torch.randn(B, n, N, R, device=dev, dtype=torch.bfloat16)
sc = torch.rand(B, n, N, device=dev) * 0.01


def ms(fn):
    fn()
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


x = torch.bmm(a.reshape(B, S, n * c).transpose(1, 2), b.reshape(B, S, N * c))
xn = opm.outer_products(a, b, sc)
gs, _ = opm.normalized_grad(g, sc, True)
print(f"X by cuBLAS bmm {ms(lambda: torch.bmm(a.reshape(B, S, n * c).transpose(1, 2), b.reshape(B, S, N * c))):.4f} ms, "
      f"normalized by outer_products {ms(lambda: opm.outer_products(a, b, sc)):.4f} ms, Gs kernel "
      f"{ms(lambda: opm.normalized_grad(g, sc, True)):.4f} ms")
ref = opm.outer_product_weight_grad(gs, x, c)
for name, args in (("Gs from memory", (gs, x, c, None, 0, 0)), ("Gs from memory + bias", (gs, x, c, sc, 0, 1)),
                   ("g scaled on chip", (g, x, c, sc, 1, 0)), ("g scaled on chip + bias", (g, x, c, sc, 1, 2)),
                   ("x scaled on chip", (g, x, c, sc, 2, 0)), ("x scaled on chip + bias", (g, x, c, sc, 2, 2)),
                   ("normalized X", (g, xn, c, sc, 0, 0)), ("normalized X + bias", (g, xn, c, sc, 0, 2))):
    out = opm.outer_product_weight_grad(*args)[:, :c * c]
    err = ((out - ref).norm() / ref.norm()).item()
    print(f"dW {name:26s} {ms(lambda args=args: opm.outer_product_weight_grad(*args)):.4f} ms (rel. diff {err:.1e})")

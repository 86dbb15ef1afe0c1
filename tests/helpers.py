"""Random modules and inputs for the tests, and the contract assertion."""

import torch

from evofuse import MSARowAttentionWithPairBias, OuterProductMean
from evofuse.numerics import FP32_ALLCLOSE, bound, rel_error


def randomize(mod: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter random (LayerNorm included), at the scale of nn.Linear's initialisation."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in mod.named_parameters():
            if name.startswith("layer_norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return mod


def opm_module(D, pair, c, seed=0, **kw):
    return randomize(OuterProductMean(D, pair, c, **kw), seed)


def att_module(D, pair, h, seed=0, **kw):
    return randomize(MSARowAttentionWithPairBias(D, pair, h, **kw), seed)


def random_mask(B, S, N, kind: str, seed: int) -> torch.Tensor | None:
    """kind: "random" (~30% zeros), "ones", "none", "rows" (random + a fully masked MSA row and a
    residue masked in every row), "empty" (all zeros)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "none":
        return None
    if kind == "ones":
        return torch.ones(B, S, N)
    if kind == "empty":
        return torch.zeros(B, S, N)
    mask = (torch.rand(B, S, N, generator=g) > 0.3).float()
    if kind == "rows":
        mask[:, S // 2, :] = 0
        mask[:, :, N // 2] = 0
    return mask


def assert_contract(out, exact, dtype, precision="default", lowp_ref=None, ref_fp32=None, what="output"):
    """The numerics contract for one tensor: `exact` is the float64 reference, `lowp_ref` the reference run in a
    16-bit dtype, `ref_fp32` the reference in float32 (for the allclose condition)."""
    assert out.dtype == dtype, f"{what}: dtype {out.dtype}, expected {dtype}"
    assert out.shape == exact.shape, f"{what}: shape {tuple(out.shape)}, expected {tuple(exact.shape)}"
    err = rel_error(out, exact)
    limit = bound(dtype, precision, None if lowp_ref is None else rel_error(lowp_ref, exact))
    assert err <= limit, f"{what}: rel error {err:.3e} > {limit:.3e}"
    if ref_fp32 is not None and precision == "default":
        assert torch.allclose(out.float(), ref_fp32.float(), **FP32_ALLCLOSE), f"{what}: not allclose to the fp32 reference"
    return err


def grads(mod, inputs, impl, seed=0):
    """Output and named gradients (the 4-D floating inputs as input0, input1, then every parameter)
    of `mod` on `inputs` for a seeded random output gradient."""
    for p in mod.parameters():
        p.grad = None
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point() and t.dim() == 4) if t is not None else None
              for t in inputs]
    out = mod(*leaves, impl=impl)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out)
    out.backward(g)
    named = {f"input{k}": t.grad for k, t in enumerate(leaves) if t is not None and t.requires_grad}
    named.update({n: p.grad.clone() for n, p in mod.named_parameters()})
    return out, named


# softmax is shift-invariant per row, so key.bias, pair_bias.bias and (pair-weighted averaging) norm_z.bias
# have exact gradient 0: those are judged on the scale of their weights' gradients
ZERO_GRADS = {"key.bias": "key.weight", "pair_bias.bias": "pair_bias.weight", "norm_z.bias": "norm_z.weight"}


def compare(got, exact, dtype, lowp=None):
    """The numerics contract for every gradient in `got` against the float64 ones in `exact`."""
    for name, g in got.items():
        if name in ZERO_GRADS and exact[name].norm() < 1e-9 * exact[ZERO_GRADS[name]].norm():
            # exactly 0 in exact arithmetic (softmax ignores a constant per row): the contract with the
            # sibling gradient's norm as the scale; 16-bit: twice what the reference in that dtype
            # leaves, + 1e-3 (bf16 rounding of o leaves ~1e-3 in the row sums, PyTorch's own as well)
            scale = exact[ZERO_GRADS[name]].norm()
            limit = 1e-3 * scale + (0 if lowp is None else 2 * lowp[name].double().norm())
            assert g.double().norm() <= limit, f"{name}: norm {g.double().norm():.3e} > {limit:.3e}"
            continue
        assert_contract(g, exact[name], dtype, lowp_ref=None if lowp is None else lowp[name], what=name)

"""Gradients through the fused forward (its backward recomputes the reference) against float64 autograd."""

import copy

import pytest
import torch

from .conftest import DEVICE
from .helpers import assert_contract, att_module, opm_module, random_mask


def grads(mod, inputs, impl):
    for p in mod.parameters():
        p.grad = None
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point() and t.dim() == 4) if t is not None else None
              for t in inputs]
    out = mod(*leaves, impl=impl)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(out)
    out.backward(g)
    named = {f"input{k}": t.grad for k, t in enumerate(leaves) if t is not None and t.requires_grad}
    named.update({n: p.grad.clone() for n, p in mod.named_parameters()})
    return out, named


@pytest.mark.parametrize("normalization", ["seed", "af2", "boltz"])
def test_opm_gradients(normalization):
    mod = opm_module(12, 5, 8, seed=1, normalization=normalization).to(DEVICE)
    x = torch.randn(2, 4, 9, 12, device=DEVICE)
    mask = random_mask(2, 4, 9, "rows", 2).to(DEVICE)
    out, got = grads(mod, (x, mask), "triton")
    exact_out, exact = grads(copy.deepcopy(mod).double(), (x.double(), mask), "torch")
    assert_contract(out, exact_out, torch.float32)
    for name, g in got.items():
        assert_contract(g, exact[name], torch.float32, what=name)


def test_attention_gradients():
    mod = att_module(16, 4, 2, seed=3).to(DEVICE)
    x, z = torch.randn(2, 3, 10, 16, device=DEVICE), torch.randn(2, 10, 10, 4, device=DEVICE)
    mask = random_mask(2, 3, 10, "rows", 4).to(DEVICE)
    out, got = grads(mod, (x, z, mask), "triton")
    exact_out, exact = grads(copy.deepcopy(mod).double(), (x.double(), z.double(), mask), "torch")
    assert_contract(out, exact_out, torch.float32)
    # softmax is shift-invariant per row, so key.bias and pair_bias.bias have exact gradient 0:
    # those are judged on the scale of their weights' gradients
    assert got.pop("key.bias").norm() <= 1e-5 * exact["key.weight"].norm()
    assert got.pop("pair_bias.bias").norm() <= 1e-5 * exact["pair_bias.weight"].norm()
    for name, g in got.items():
        assert_contract(g, exact[name], torch.float32, what=name)


def test_backward_is_deterministic():
    mod = att_module(16, 4, 2, seed=5).to(DEVICE)
    x, z = torch.randn(1, 3, 9, 16, device=DEVICE), torch.randn(1, 9, 9, 4, device=DEVICE)
    _, first = grads(mod, (x, z, None), "triton")
    first = {k: v.clone() for k, v in first.items()}
    _, second = grads(mod, (x, z, None), "triton")
    assert all(torch.equal(first[k], second[k]) for k in first)

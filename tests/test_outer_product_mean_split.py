"""The Outer Product Mean as the two ops an MSA split by residues takes (`ops.outer_product_mean.sharded`): on plain
tensors the composition gives the fused op's output and gradients (float32 within the contract's bound, float16
within its rounding), and the three ops pass torch.library's opcheck. The split itself, on two processes, is
`tests/test_sharding.py`'s (opm:2)."""

import pytest
import torch

from evofuse.numerics import FP32_DEFAULT_BOUND, rel_error

from .conftest import DEVICE
from .helpers import opm_module, random_mask


def _inputs(normalization, masked, dtype=torch.float16):
    mod = opm_module(16, 8, 8, seed=4).to(DEVICE, dtype)
    x = torch.randn(1, 5, 7, 16, device=DEVICE, dtype=dtype, requires_grad=True)
    mask = random_mask(1, 5, 7, "rows", 5).to(DEVICE, dtype) if masked else None
    params = [p.detach().requires_grad_() for p in mod.parameters()]
    return x, mask, params


@pytest.mark.parametrize("normalization, masked, dtype", [
    ("count_ij_after", True, torch.float16), ("count_i", True, torch.float16), ("count_ij", False, torch.float16),
    ("count_ij_after", True, torch.float32), ("count_i", False, torch.float32)])
def test_the_two_ops_give_the_fused_ops_output_and_gradients(normalization, masked, dtype):
    from evofuse.ops.outer_product_mean import op, sharded

    x, mask, params = _inputs(normalization, masked, dtype)
    leaves = [x, *params]
    grad = None
    outs, grads = [], []
    for run in (lambda: op.outer_product_mean(x, mask, *params, None, normalization, 1e-3, "default", True)[0],
                lambda: sharded.outer_product_mean(x, mask, *params, normalization, 1e-3, "default", True)):
        out = run()
        grad = torch.randn_like(out) if grad is None else grad
        outs.append(out.detach())
        grads.append(torch.autograd.grad(out, leaves, grad))
    bounds = (FP32_DEFAULT_BOUND, FP32_DEFAULT_BOUND) if dtype == torch.float32 else (1e-3, 1e-2)
    assert rel_error(outs[1], outs[0]) <= bounds[0]
    for k, (got, want) in enumerate(zip(*grads)):
        assert rel_error(got, want) <= bounds[1], f"leaf {k}: {rel_error(got, want):.3e}"


@pytest.mark.no_poison
@pytest.mark.parametrize("masked", [True, False])
def test_opcheck_the_split_ops(masked):
    from evofuse.ops.outer_product_mean import op, sharded

    x, mask, (lnw, lnb, wa, ba, wb, bb, wo, bo) = _inputs("count_ij_after", masked, torch.float32)
    w, b = torch.cat([wa, wb]).detach().requires_grad_(), torch.cat([ba, bb]).detach().requires_grad_()
    torch.library.opcheck(sharded.projections_op, (x, mask, lnw, lnb, w, b, "default", True))
    with torch.no_grad():
        ab = sharded.projections_op(x, mask, lnw, lnb, w, b, "default", True)
    a, b_ = (t.clone().requires_grad_() for t in (ab[..., :8], ab[..., 8:]))
    counts = op.counts_of(mask, "count_ij_after")
    args = (a, b_, counts, wo, bo, "count_ij_after", 1e-3, "default", True)
    torch.library.opcheck(sharded.contraction_op, args)
    with torch.no_grad():
        out = sharded.contraction_op(*args)
    for need_ab, need_weight in ((1, True), (0, True), (1, False)):
        torch.library.opcheck(sharded.contraction_grads_op, (a.detach(), b_.detach(), torch.randn_like(out), counts,
                                                             wo.detach(), "count_ij_after", 1e-3, need_ab,
                                                             need_weight, "default"))

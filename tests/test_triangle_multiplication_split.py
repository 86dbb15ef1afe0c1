"""Triangle multiplication as the two ops a pair split by residues takes (`ops.triangle_multiplication.sharded`):
on plain tensors the composition gives the fused op's output and gradients (float32, the contract's bound), and
the four ops pass torch.library's opcheck. The split itself, on two processes, is `tests/test_sharding.py`'s."""

import pytest
import torch

from evofuse.numerics import FP32_DEFAULT_BOUND, rel_error

from .conftest import DEVICE
from .test_ops import _trimul_args


@pytest.mark.parametrize("outgoing, mask, bias", [(True, True, True), (False, True, False), (True, False, False)])
def test_the_two_ops_give_the_fused_ops_output_and_gradients(outgoing, mask, bias):
    from evofuse.ops.triangle_multiplication import op, sharded

    args = _trimul_args(True, outgoing=outgoing, mask=mask, bias=bias)
    leaves = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
    grad = torch.randn(args[0].shape, device=DEVICE)
    outs, grads = [], []
    for run in (lambda: op.triangle_multiplication(*args)[0], lambda: sharded.triangle_multiplication(
            *args[:12], True)):
        out = run()
        outs.append(out.detach())
        grads.append(torch.autograd.grad(out, leaves, grad))
    assert rel_error(outs[1], outs[0]) <= FP32_DEFAULT_BOUND
    for k, (got, want) in enumerate(zip(*grads)):
        assert rel_error(got, want) <= FP32_DEFAULT_BOUND, f"leaf {k}: {rel_error(got, want):.3e}"


@pytest.mark.no_poison
@pytest.mark.parametrize("outgoing, mask", [(True, True), (False, False)])
def test_opcheck_the_split_ops(outgoing, mask):
    from evofuse.ops.triangle_multiplication import sharded

    for train in (False, True):
        x, pair_mask, lnw, lnb, w, b, *out_params = _trimul_args(train, outgoing=outgoing, mask=mask)[:10]
        c = out_params[0].shape[0]
        gate_args = (x, pair_mask, lnw, lnb, w[:4 * c], b[:4 * c], "default")
        torch.library.opcheck(sharded.gates_op, (*gate_args, train))
        with torch.no_grad():
            ab = sharded.gates_op(*gate_args, train)
        a, b_planes = (t.clone().requires_grad_(train) for t in (ab[:c], ab[c:]))
        update_args = (a, b_planes, x, lnw, lnb, w[4 * c:], b[4 * c:], *out_params, int(outgoing), "default", train)
        torch.library.opcheck(sharded.update_op, update_args)
    plain = [t.detach() if isinstance(t, torch.Tensor) else t for t in update_args]
    with torch.no_grad():
        out, t = sharded.update_op(*plain)
    needs = [True] * 11 if mask else [True, True, True, False, True, True, False, True, True, True, False]
    torch.library.opcheck(sharded.update_backward_op, (torch.randn_like(out), *plain[:11], t, int(outgoing),
                                                       "default", needs))
    torch.library.opcheck(sharded.gates_backward_op, (torch.randn_like(ab), *(
        t.detach() if isinstance(t, torch.Tensor) else t for t in gate_args)))

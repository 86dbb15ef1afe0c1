"""Attention with pair bias as a single representation split by tokens takes it (`ops.attention_pair_bias.sharded`):
on plain tensors the composition gives the fused op's output and gradients, the queries of some tokens against
every token's keys (key tile by key tile) give the whole attention's rows of them, and the two ops pass
torch.library's opcheck. The split itself, on two processes, is `tests/test_sharding.py`'s."""

import math

import pytest
import torch

from evofuse.numerics import FP32_DEFAULT_BOUND, rel_error

from .conftest import DEVICE
from .test_ops import _apb_args


@pytest.mark.parametrize("given, mask", [(False, True), (True, False)])
def test_the_composition_gives_the_fused_ops_output_and_gradients(given, mask):
    from evofuse.ops.attention_pair_bias import op, sharded

    args = _apb_args(True, given=given, mask=mask)
    leaves = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
    grad = torch.randn(args[0].shape, device=DEVICE)
    outs, grads = [], []
    for run in (lambda: op.attention_pair_bias(*args)[0], lambda: sharded.attention_pair_bias(*args)):
        out = run()
        outs.append(out.detach())
        grads.append(torch.autograd.grad(out, leaves, grad))
    assert rel_error(outs[1], outs[0]) <= FP32_DEFAULT_BOUND
    scale = max(want.norm() for want in grads[0])
    for k, (got, want) in enumerate(zip(*grads)):
        if want.norm() <= 1e-6 * scale:  # (0 in exact arithmetic: the pair LayerNorm's bias, a softmax-invariant shift)
            assert got.norm() <= 1e-5 * scale, f"leaf {k}: expected ~0"
        else:
            assert rel_error(got, want) <= FP32_DEFAULT_BOUND, f"leaf {k}: {rel_error(got, want):.3e}"


def _attended(qkvg, z, mask, heads):
    """sigmoid(g) * softmax(q k^T / sqrt(d) + z, masked keys' logits -1e9) v of every token, in qkvg's dtype."""
    B, N, W = qkvg.shape
    H = W // 4
    q, k, v, g = (qkvg[..., c * H:(c + 1) * H].reshape(B, N, heads, H // heads).transpose(1, 2) for c in range(4))
    logits = q @ k.transpose(-1, -2) / math.sqrt(H // heads) + z
    if mask is not None:  # (a masked key's logit is -1e9 and passes its gradient on: the additive mask's)
        logits = torch.where(mask[:, None, None, :] != 0, logits, logits - logits.detach() - 1e9)
    o = (logits.softmax(-1) @ v).transpose(1, 2).reshape(B, N, H)
    return torch.sigmoid(g.transpose(1, 2).reshape(B, N, H)) * o


@pytest.mark.parametrize("N, masked_row", [(12, False), (12, True), (11, True)])
def test_some_tokens_queries_against_every_key(N, masked_row):
    """The queries of tokens 4-7 of N against every token's keys, key tiles of four (the last of three where N is
    11, in PyTorch; the middle tile's keys all masked, or every key of one batch element: a row that averages v over
    all keys): the whole attention's rows of them, and the gradients of qkvg, the keys and values and the bias,
    against float64."""
    from evofuse.ops.attention_pair_bias import sharded

    g = torch.Generator().manual_seed(3)
    B, H, heads = 2, 16, 2
    qkvg64 = torch.randn(B, N, 4 * H, generator=g, dtype=torch.float64)
    z64 = torch.randn(B, heads, N, N, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, N, generator=g) > 0.3).double()
    mask[:, 4:8] = 0
    if masked_row:
        mask[1] = 0
    grad = torch.randn(B, 4, H, generator=g, dtype=torch.float64)
    leaves64 = [t.clone().requires_grad_() for t in (qkvg64, z64)]
    want = _attended(leaves64[0], leaves64[1], mask, heads)[:, 4:8]
    want_grads = torch.autograd.grad(want, leaves64, grad)
    qkvg, z = (t.float().to(DEVICE).requires_grad_() for t in (qkvg64, z64))
    rows = qkvg[:, 4:8]
    got = sharded.attend(rows, qkvg[..., H:3 * H], z[:, :, 4:8], mask.float().to(DEVICE), heads, "default", True)[0]
    assert rel_error(got.detach().cpu(), want.detach()) <= FP32_DEFAULT_BOUND
    for name, got_grad, want_grad in zip(("qkvg", "z"), torch.autograd.grad(got, [qkvg, z], grad.float().to(DEVICE)),
                                         want_grads):
        assert rel_error(got_grad.cpu(), want_grad) <= FP32_DEFAULT_BOUND, name


@pytest.mark.no_poison
def test_opcheck_the_split_ops():
    from evofuse.ops.attention_pair_bias import sharded

    g = torch.Generator().manual_seed(5)
    qkvg = torch.randn(2, 4, 64, generator=g).to(DEVICE)
    kv, z = torch.randn(2, 8, 32, generator=g).to(DEVICE), torch.randn(2, 2, 4, 8, generator=g).to(DEVICE)
    mask = (torch.rand(2, 8, generator=g) > 0.3).float().to(DEVICE)
    for train in (False, True):
        torch.library.opcheck(sharded.attend_op, (*(t.clone().requires_grad_(train) for t in (qkvg, kv, z)), mask, 2,
                                                  "default", train))
    gated, o, lse = sharded.attend_op(qkvg, kv, z, mask, 2, "default", True)
    torch.library.opcheck(sharded.attend_backward_op, (torch.randn_like(gated), qkvg, kv, z, mask, o, lse, 2,
                                                       "default"))

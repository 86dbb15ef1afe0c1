"""The shared LayerNorm + linear kernel against PyTorch, and its backward."""

import pytest
import torch
import torch.nn.functional as F

from evofuse.numerics import rel_error
from evofuse.ops.layer_norm_linear import layer_norm_linear, layer_norm_linear_backward

from .conftest import DEVICE


def test_without_bias():
    g = torch.Generator().manual_seed(3)
    x, lnw, lnb, w = torch.randn(9, 24, generator=g), torch.randn(24, generator=g), torch.randn(24, generator=g), \
        torch.randn(5, 24, generator=g)
    exact = _reference(x.double(), lnw.double(), lnb.double(), w.double(), None, None)
    y = layer_norm_linear(*(t.to(DEVICE) for t in (x, lnw, lnb, w)), None, None)
    assert rel_error(y.cpu(), exact) <= 1e-6


def _reference(x, lnw, lnb, w, b, mask):
    y = F.linear(F.layer_norm(x, (x.shape[-1],), lnw, lnb, 1e-5), w, b)
    return y if mask is None else y * mask.to(y.dtype)[..., None]


LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16


@pytest.mark.parametrize("M, D, K", [(1, 8, 16), (37, 24, 10), (19, 300, 33), (5, 16, 130), (3, 200, 1030)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_matches_pytorch(M, D, K, masked, dtype):
    """Rows held whole (D <= 256 in 16 bits, 128 in float32) and rows read in chunks."""
    g = torch.Generator().manual_seed(M + D + K)
    x = 3 + torch.randn(M, D, generator=g)  # a large mean: the variance is taken about it
    lnw, lnb = 1 + torch.randn(D, generator=g), torch.randn(D, generator=g)
    w, b = torch.randn(K, D, generator=g) / D ** 0.5, torch.randn(K, generator=g)
    mask = (torch.rand(M, generator=g) > 0.3) if masked else None
    exact = _reference(*(t.double() for t in (x, lnw, lnb, w, b)), mask)
    y = layer_norm_linear(*(t.to(DEVICE, dtype) for t in (x, lnw, lnb, w, b)), None if mask is None else mask.to(DEVICE))
    assert y.shape == (M, K) and y.dtype == dtype
    if dtype == torch.float32:
        assert rel_error(y.cpu(), exact) <= 1e-6
    else:
        lowp = _reference(*(t.to(dtype) for t in (x, lnw, lnb, w, b)), mask)
        assert rel_error(y.cpu(), exact) <= 2 * rel_error(lowp, exact) + 1e-3


def test_backward_matches_autograd():
    g = torch.Generator().manual_seed(1)
    x, lnw, lnb = torch.randn(4, 6, 12, generator=g), torch.randn(12, generator=g), torch.randn(12, generator=g)
    w, dy = torch.randn(9, 12, generator=g), torch.randn(4, 6, 9, generator=g)
    leaves = [t.double().requires_grad_() for t in (x, lnw, lnb, w)]
    bias = torch.zeros(9, dtype=torch.float64, requires_grad=True)
    _reference(*leaves[:4], bias, None).backward(dy.double())
    got = layer_norm_linear_backward(x.double(), lnw.double(), lnb.double(), w.double(), dy.double(), (True,) * 5)
    for mine, leaf in zip(got, leaves + [bias]):
        torch.testing.assert_close(mine, leaf.grad)

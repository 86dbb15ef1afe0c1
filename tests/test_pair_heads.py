"""The pair's projection to the heads (`evofuse.stages.pair_heads`: row attention's pair bias, pair-weighted
averaging's head logits) against float64, in Triton's interpreter on CPU and compiled on a GPU."""

import pytest
import torch
import torch.nn.functional as F

from evofuse.stages.pair_heads import pair_heads

from .conftest import DEVICE
from .helpers import assert_contract

# the interpreter casts float32 to bfloat16 by truncation: bfloat16 is checked on the GPU
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
# (N, P, h): one pair, awkward sizes, the suite's pair width, more heads than one 16-column block
SHAPES = [(1, 3, 1), (17, 24, 3), (33, 128, 8), (9, 40, 20), pytest.param(97, 5, 4, marks=pytest.mark.full)]


@pytest.mark.parametrize("N, P, h", SHAPES)
@pytest.mark.parametrize("norm, bias", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pair_heads(N, P, h, norm, bias, dtype):
    """(LayerNorm(pair)) @ W^T + b, head major and contiguous, from a pair whose channels are strided."""
    g = torch.Generator().manual_seed(N * P + h)
    pair = torch.randn(2, N, P, N, generator=g).transpose(2, 3)  # (B, N, N, P)
    lnw, lnb = 1 + 0.3 * torch.randn(P, generator=g), 0.3 * torch.randn(P, generator=g)
    w, b = torch.randn(h, P, generator=g) / P ** 0.5, torch.randn(h, generator=g)

    def reference(x, lnw, lnb, w, b):
        x = F.layer_norm(x, (P,), lnw, lnb) if norm else x
        return F.linear(x, w, b if bias else None).permute(0, 3, 1, 2)

    exact = reference(*(t.double() for t in (pair, lnw, lnb, w, b)))
    low = [t.to(DEVICE, dtype) for t in (pair, lnw, lnb, w, b)]
    out = pair_heads(low[0], low[1] if norm else None, low[2] if norm else None, low[3], low[4] if bias else None)
    assert out.is_contiguous()
    lowp_ref = None if dtype == torch.float32 else reference(*low).cpu()  # (the reference in the 16-bit dtype)
    assert_contract(out.cpu(), exact, dtype, lowp_ref=lowp_ref, what="pair heads")


@pytest.mark.parametrize("P", [24, 128])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pair_heads_layer_norm_extremes(P, dtype):
    """The folded LayerNorm on rows far from zero (mean 40, standard deviation 1: no cancellation), constant rows
    (zero variance: the LayerNorm's bias alone) and zero rows, against float64 on the same rounded pair."""
    g = torch.Generator().manual_seed(P)
    N, h = 9, 5
    pair = torch.randn(1, N, N, P, generator=g)
    pair[0, :3] += 40.0
    pair[0, 3:5] = torch.randn(2, N, 1, generator=g) * 3  # constant along the channels
    pair[0, 5] = 0.0
    lnw, lnb = 1 + 0.3 * torch.randn(P, generator=g), 0.3 * torch.randn(P, generator=g)
    w = torch.randn(h, P, generator=g) / P ** 0.5
    low = [t.to(DEVICE, dtype) for t in (pair, lnw, lnb, w)]

    def reference(x, lnw, lnb, w):
        return F.linear(F.layer_norm(x, (P,), lnw, lnb), w).permute(0, 3, 1, 2)

    exact = reference(*(t.cpu().double() for t in low))
    out = pair_heads(*low, None)
    lowp_ref = None if dtype == torch.float32 else reference(*low).cpu()
    assert_contract(out.cpu(), exact, dtype, lowp_ref=lowp_ref, what="pair heads")
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("N, P, h", SHAPES)
@pytest.mark.parametrize("norm, bias", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pair_heads_backward(N, P, h, norm, bias, dtype):
    """Every gradient of the projection against float64 autograd, for a float32 output gradient with strides."""
    from evofuse.stages.pair_heads import pair_heads_backward

    g = torch.Generator().manual_seed(N * P + h + 1)
    pair = torch.randn(2, N, N, P + 2, generator=g)[..., 1:P + 1]  # (B, N, N, P), rows not dense
    params = [1 + 0.3 * torch.randn(P, generator=g), 0.3 * torch.randn(P, generator=g),
              torch.randn(h, P, generator=g) / P ** 0.5, torch.randn(h, generator=g)]
    grad = torch.randn(2, N, N, h, generator=g).permute(0, 3, 1, 2)  # (B, h, N, N), strided

    exact_in = [t.double().requires_grad_() for t in (pair, *params)]
    x, lnw, lnb, w, b = exact_in
    z = F.linear(F.layer_norm(x, (P,), lnw, lnb) if norm else x, w, b if bias else None).permute(0, 3, 1, 2)
    z.backward(grad.double())
    exact = [t.grad for t in exact_in]

    low = [t.to(DEVICE, dtype) for t in (pair, *params)]
    needs = (True, norm, norm, True, bias)
    got = pair_heads_backward(low[0], low[1] if norm else None, low[2] if norm else None, low[3], grad.to(DEVICE), needs)

    low_in = [t.clone().requires_grad_() for t in low]
    x, lnw, lnb, w, b = low_in
    z = F.linear(F.layer_norm(x, (P,), lnw, lnb) if norm else x, w, b if bias else None).permute(0, 3, 1, 2)
    z.backward(grad.to(DEVICE, dtype))
    for name, need, out, ref, lowp in zip(("pair", "norm weight", "norm bias", "weight", "bias"), needs, got, exact,
                                          low_in):
        if not need:
            assert out is None, name
            continue
        lowp_ref = None if dtype == torch.float32 else lowp.grad.cpu()
        assert_contract(out.cpu(), ref, dtype, lowp_ref=lowp_ref, what=f"d {name}")


def test_pair_heads_pair_transposed():
    """A pair whose (i, j) are not one index (a transposed view, which the kernels read from one copy) gives the
    same outputs and gradients as its contiguous copy, bit for bit."""
    from evofuse.stages.pair_heads import pair_heads_backward

    g = torch.Generator().manual_seed(5)
    N, P, h = 17, 24, 3
    pair = torch.randn(2, N, N, P, generator=g).transpose(1, 2)  # (B, N, N, P), i and j swapped
    lnw, lnb = 1 + 0.3 * torch.randn(P, generator=g), 0.3 * torch.randn(P, generator=g)
    w = torch.randn(h, P, generator=g) / P ** 0.5
    grad = torch.randn(2, h, N, N, generator=g).to(DEVICE)
    args = [t.to(DEVICE) for t in (lnw, lnb, w)]
    strided, dense = pair.to(DEVICE), pair.contiguous().to(DEVICE)
    assert strided.stride(1) != N * strided.stride(2)  # (i, j) not one index
    torch.testing.assert_close(pair_heads(strided, *args, None), pair_heads(dense, *args, None), rtol=0, atol=0)
    needs = (True, True, True, True, False)
    got, want = pair_heads_backward(strided, *args, grad, needs), pair_heads_backward(dense, *args, grad, needs)
    for got_one, want_one in zip(got[:4], want[:4]):
        torch.testing.assert_close(got_one, want_one, rtol=0, atol=0)

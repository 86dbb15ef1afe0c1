"""The shared LayerNorm + linear kernel against PyTorch, and its backward."""

import pytest
import torch
import torch.nn.functional as F

from evofuse.numerics import rel_error
from evofuse.stages.layer_norm_backward import layer_norm_linear_backward, projects_on_chip
from evofuse.stages.layer_norm_linear import layer_norm_linear, normalizes_first

from .conftest import DEVICE


def test_without_bias():
    g = torch.Generator().manual_seed(3)
    x, lnw, lnb, w = torch.randn(9, 24, generator=g), torch.randn(24, generator=g), torch.randn(24, generator=g), \
        torch.randn(5, 24, generator=g)
    exact = _reference(x.double(), lnw.double(), lnb.double(), w.double(), None, None)
    y = layer_norm_linear(*(t.to(DEVICE) for t in (x, lnw, lnb, w)), None, None)
    assert rel_error(y.cpu(), exact) <= 1e-6


@pytest.mark.parametrize("with_bias, masked", [(True, True), (False, False)])
def test_wide_linear_through_cublas(with_bias, masked):
    """A wide 16-bit linear over many rows: the normalized rows written, then a cuBLAS product (with the bias or
    without, the mask after it)."""
    M, D, K = 16401, 160, 1030
    assert normalizes_first(M, D, K, LOW) and not normalizes_first(M - 100, D, K, LOW)
    g = torch.Generator().manual_seed(5)
    x = 3 + torch.randn(M, D, generator=g)
    lnw, lnb = 1 + torch.randn(D, generator=g), torch.randn(D, generator=g)
    w, b = torch.randn(K, D, generator=g) / D ** 0.5, torch.randn(K, generator=g) if with_bias else None
    mask = (torch.rand(M, generator=g) > 0.3) if masked else None
    exact = _reference(*(t.double() for t in (x, lnw, lnb, w)), None if b is None else b.double(), mask)
    y = layer_norm_linear(*(t.to(DEVICE, LOW) for t in (x, lnw, lnb, w)), None if b is None else b.to(DEVICE, LOW),
                          None if mask is None else mask.to(DEVICE))
    assert y.shape == (M, K) and y.dtype == LOW
    lowp = _reference(*(t.to(LOW) for t in (x, lnw, lnb, w)), None if b is None else b.to(LOW), mask)
    assert rel_error(y.cpu(), exact) <= 2 * rel_error(lowp, exact) + 1e-3


def _reference(x, lnw, lnb, w, b, mask):
    y = F.linear(F.layer_norm(x, (x.shape[-1],), lnw, lnb, 1e-5), w, b)
    return y if mask is None else y * mask.to(y.dtype)[..., None]


LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16


@pytest.mark.parametrize("M, D, K", [(1, 8, 16), (37, 24, 10), (19, 300, 33), (5, 16, 130), (3, 200, 1030)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_matches_pytorch(M, D, K, masked, dtype):
    """Rows held whole (D <= 256) and rows read in chunks."""
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


def _degenerate_rows(M, D, g):
    """Rows of random channels, a third of them of equal channels (zero variance: the LayerNorm's bias alone) and
    a sixth far from zero (mean 40, standard deviation 1)."""
    x = torch.randn(M, D, generator=g)
    x[: M // 3] = 3 * torch.randn(M // 3, 1, generator=g)
    x[M // 3: M // 2] += 40
    return x


@pytest.mark.parametrize("D", [24, 300])  # rows held whole, rows read in chunks
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_rows_of_equal_channels(D, dtype):
    """Forward and backward on rows whose variance is zero or small against their mean, against float64 on the
    same rounded rows: a float32 row of equal channels must centre to zero (its mean's rounding, magnified by
    1 / sqrt(eps), read 2e-4 relative error before the kernels took it back)."""
    g = torch.Generator().manual_seed(D)
    M, K = 30, 12
    x = _degenerate_rows(M, D, g)
    lnw, lnb = 1 + torch.randn(D, generator=g) / 4, torch.randn(D, generator=g) / 4
    w, dy = torch.randn(K, D, generator=g) / D**0.5, torch.randn(M, K, generator=g)
    low = [t.to(dtype) for t in (x, lnw, lnb, w, dy)]

    def autograd(dtype):
        leaves = [t.to(dtype).requires_grad_() for t in low[:4]]
        y = _reference(*leaves, None, None)
        y.backward(low[4].to(dtype))
        return [y.detach().double()] + [t.grad.double() for t in leaves]

    exact = autograd(torch.float64)
    lowp = autograd(dtype) if dtype != torch.float32 else exact
    y = layer_norm_linear(*(t.to(DEVICE) for t in low[:4]), None, None)
    got = [y] + list(layer_norm_linear_backward(*(t.to(DEVICE) for t in low), (True, True, True, True, False))[:4])
    for name, mine, want, ref in zip(("y", "x", "ln_weight", "ln_bias", "weight"), got, exact, lowp):
        bound = 1e-5 if dtype == torch.float32 else 2 * rel_error(ref, want) + 1e-3
        assert rel_error(mine.cpu().double(), want) <= bound, name


@pytest.mark.parametrize("lead, D, heads, C, dtype", [
    *(((2, 5, 7), 24, 3, 8, dtype) for dtype in (torch.float32, LOW)),
    *(((1, 33, 17), 64, 4, 5, dtype) for dtype in (torch.float32, LOW)),
    ((4, 37), 32, 8, 4, LOW), ((3, 37), 16, 2, 16, torch.float32),
    ((3, 9), 300, 2, 16, torch.float32), ((3, 9), 300, 2, 16, LOW), ((1, 8, 2050), 160, 2, 520, LOW)])
def test_writes_heads_into_a_head_major_output(lead, D, heads, C, dtype):
    """`out`: the output's columns as heads of C channels, written head major, (heads, *lead, C) seen through a
    permuted view (rows of at most three leading dimensions; each head's rows one run): heads whose rows a tile
    stores as runs (C a power of two, several heads a tile), the others one element a column, the chunked rows
    and the cuBLAS route (the last shape at 16 bits), a last block of rows cut short; nothing outside the view is
    written, and a view whose heads' rows are not one run is refused."""
    g = torch.Generator().manual_seed(D + C)
    x = (3 + torch.randn(*lead, D, generator=g)).to(DEVICE, dtype)
    lnw, lnb = (1 + torch.randn(D, generator=g)).to(DEVICE, dtype), torch.randn(D, generator=g).to(DEVICE, dtype)
    w = (torch.randn(heads * C, D, generator=g) / D ** 0.5).to(DEVICE, dtype)
    assert normalizes_first(x[..., 0].numel(), D, heads * C, dtype) == (C == 520)
    storage = torch.full((heads + 1, *lead, C), float("nan"), dtype=dtype, device=DEVICE)
    out = storage[1:].permute(*range(1, len(lead) + 1), 0, len(lead) + 1)  # (*lead, heads, C)
    assert layer_norm_linear(x, lnw, lnb, w, None, None, out=out) is out
    expected = layer_norm_linear(x.contiguous(), lnw, lnb, w, None, None)
    assert torch.equal(out.reshape(*lead, heads * C), expected)
    assert storage[0].isnan().all()
    with pytest.raises(ValueError, match="heads"):
        layer_norm_linear(x, lnw, lnb, w, None, None, out=out[..., :1, :])
    padded = torch.empty(heads, *lead, C + 3, dtype=dtype, device=DEVICE)[..., :C]
    with pytest.raises(ValueError, match="one run"):
        layer_norm_linear(x, lnw, lnb, w, None, None, out=padded.permute(*range(1, len(lead) + 1), 0, len(lead) + 1))


@pytest.mark.parametrize("shape, dims", [((3, 4, 5, 24), (2, 0, 1, 3)), ((2, 3, 2, 3, 16), (4, 1, 0, 3, 2)),
                                         ((7, 300), (1, 0))])
def test_strided_rows_of_any_leading_shape(shape, dims):
    """x read through its strides (a permuted view, no copy), rows of one to four leading dimensions: the
    output of its contiguous copy (to rounding: the compiled sums' order may follow the strides); with the
    rows' mask too."""
    g = torch.Generator().manual_seed(len(shape))
    x = torch.randn(*shape, generator=g).to(DEVICE).permute(*dims)
    D, K = x.shape[-1], 11
    lnw, lnb = (1 + torch.randn(D, generator=g)).to(DEVICE), torch.randn(D, generator=g).to(DEVICE)
    w, b = torch.randn(K, D, generator=g).to(DEVICE), torch.randn(K, generator=g).to(DEVICE)
    mask = (torch.rand(x.shape[:-1], generator=g) > 0.3).to(DEVICE)
    for m in (None, mask):
        y = layer_norm_linear(x, lnw, lnb, w, b, m)
        assert y.shape == (*x.shape[:-1], K) and y.is_contiguous()
        torch.testing.assert_close(y, layer_norm_linear(x.contiguous(), lnw, lnb, w, b, m), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("precision, bound", [("default", 1e-6), ("fast", 5e-3)])
def test_float32_weights_of_any_scale(precision, bound):
    """float32 rows on float16 tensor cores: each output column's weights scaled into float16's range on chip,
    whatever their magnitude (here 1e-30 to 1e30, one column all zeros, a large LayerNorm weight); rows held
    whole and read in chunks."""
    g = torch.Generator().manual_seed(11)
    for D in (40, 300):
        x = torch.randn(23, D, generator=g)
        lnw, lnb = 1 + torch.randn(D, generator=g), torch.randn(D, generator=g)
        lnw[3] = 5e3
        w = torch.randn(6, D, generator=g) * torch.tensor([1e-30, 1e-6, 1.0, 1e4, 1e30, 0.0])[:, None]
        b = torch.randn(6, generator=g)
        exact = _reference(*(t.double() for t in (x, lnw, lnb, w, b)), None)
        y = layer_norm_linear(*(t.to(DEVICE) for t in (x, lnw, lnb, w, b)), None, precision)
        for k in range(6):  # column by column: their magnitudes are 60 orders apart
            assert rel_error(y[:, k].cpu(), exact[:, k]) <= bound, (D, k)


# bfloat16 products are checked on the GPU: Triton's interpreter gets bfloat16 tl.dot wrong
BACKWARD_DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])


@pytest.mark.parametrize("M, D, K, on_chip", [(1, 16, 130, False), (17, 24, 129, False), (97, 64, 200, False),
                                              (300, 256, 72, False),  # wide: cuBLAS products around the pass
                                              (1, 16, 1, True), (17, 24, 3, True), (97, 64, 8, True),
                                              (300, 128, 32, True), (33, 64, 40, True), (97, 64, 128, False)])
@pytest.mark.parametrize("dtype", BACKWARD_DTYPES)
def test_backward_matches_autograd(M, D, K, on_chip, dtype):
    """Every gradient against float64 autograd, x non-contiguous (a column slice), through both paths (the
    products on chip for narrow linears, cuBLAS's for wide ones); 16-bit within twice the error of PyTorch's own
    LayerNorm + linear backward in that dtype."""
    assert projects_on_chip(D, K, dtype.itemsize) == on_chip
    g = torch.Generator().manual_seed(M)
    x = torch.randn(M, 2 * D, generator=g)[:, ::2]
    lnw, lnb = 1 + torch.randn(D, generator=g) / 4, torch.randn(D, generator=g) / 4
    w, dy = torch.randn(K, D, generator=g) / D**0.5, torch.randn(M, K, generator=g)

    def autograd(dtype):
        leaves = [t.to(dtype).requires_grad_() for t in (x, lnw, lnb, w)]
        bias = torch.zeros(K, dtype=dtype, requires_grad=True)
        _reference(*leaves, bias, None).backward(dy.to(dtype))
        return [t.grad.double() for t in leaves + [bias]]

    exact = autograd(torch.float64)
    lowp = autograd(dtype) if dtype != torch.float32 else None
    got = layer_norm_linear_backward(*(t.to(DEVICE, dtype) for t in (x, lnw, lnb, w, dy)), (True,) * 5)
    for name, mine, want, ref in zip(("x", "ln_weight", "ln_bias", "weight", "bias"), got, exact, lowp or exact):
        assert mine.dtype == dtype and mine.shape == want.shape, name
        bound = 1e-5 if dtype == torch.float32 else 2 * rel_error(ref, want) + 1e-3
        assert rel_error(mine.cpu().double(), want) <= bound, name


@pytest.mark.parametrize("needs", [(True, False, False, False, False), (False, True, True, False, False),
                                   (False, False, False, True, True), (False,) * 5])
def test_backward_gives_only_what_is_needed(needs):
    g = torch.Generator().manual_seed(3)
    x, lnw, lnb = torch.randn(2, 5, 24, generator=g), torch.randn(24, generator=g), torch.randn(24, generator=g)
    w, dy = torch.randn(7, 24, generator=g), torch.randn(2, 5, 7, generator=g)
    got = layer_norm_linear_backward(*(t.to(DEVICE) for t in (x, lnw, lnb, w, dy)), needs)
    assert [t is not None for t in got] == list(needs)
    if needs[0]:
        assert got[0].shape == x.shape


@pytest.mark.parametrize("K", [9, 3])  # the gradient of LayerNorm(x) given, or the narrow projection on chip
def test_backward_with_several_blocks_a_program(monkeypatch, K):
    """At most `backward_programs` programs, each over consecutive blocks of rows, the last one short; their
    partial sums added afterwards: here 3 programs over 97 rows of 64 channels."""
    from evofuse.stages import layer_norm_backward as module

    monkeypatch.setattr(module, "backward_programs", lambda device, warps: 3)
    monkeypatch.setattr(module, "BACKWARD_TILE", 64 * 4)  # blocks of 4 rows (16 with the projection on chip)
    g = torch.Generator().manual_seed(5)
    x, lnw, lnb = torch.randn(97, 64, generator=g), 1 + torch.randn(64, generator=g) / 4, torch.randn(64, generator=g)
    w, dy = torch.randn(K, 64, generator=g) / 8, torch.randn(97, K, generator=g)
    leaves = [t.double().requires_grad_() for t in (x, lnw, lnb, w)]
    _reference(*leaves, None, None).backward(dy.double())
    got = layer_norm_linear_backward(*(t.to(DEVICE) for t in (x, lnw, lnb, w, dy)), (True, True, True, True, False))
    for name, mine, leaf in zip(("x", "ln_weight", "ln_bias", "weight"), got, leaves):
        assert rel_error(mine.cpu().double(), leaf.grad) <= 1e-5, name

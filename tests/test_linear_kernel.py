"""The fused LayerNorm + linear + row-mask kernel and the float32 split linear, against PyTorch in float64."""

import math

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from evofuse.ops.layer_norm_linear import ln_linear, row_coords
from evofuse.ops.split_linear import ceil_log2

from .conftest import DEVICE
from .helpers import assert_contract, att_module, random_mask


# bfloat16 products are wrong in Triton's interpreter (triton 3.9): checked on the GPU only
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu)], ids=str)
@pytest.mark.parametrize("D, K, slot", [(24, 40, None), (64, 96, 32), (7, 1, None)])
@pytest.mark.parametrize("with_ln, with_mask", [(True, True), (False, False)])
def test_ln_linear(dtype, D, K, slot, with_ln, with_mask):
    g = torch.Generator().manual_seed(D + K)
    # a non-contiguous input: every other residue of a wider tensor, channels last
    x = torch.randn(2, 3, 2 * 17, D, generator=g)[:, :, ::2]
    w, bias = torch.randn(K, D, generator=g) / D ** 0.5, torch.randn(K, generator=g)
    lnw, lnb = 1 + 0.3 * torch.randn(D, generator=g), 0.3 * torch.randn(D, generator=g)
    mask = random_mask(2, 3, 17, "rows", 1) if with_mask else None
    dev = [t.to(DEVICE) if t is not None else None for t in (x, w, bias, lnw, lnb, mask)]
    xd, wd, bd, lnwd, lnbd, md = dev
    out = ln_linear(xd.to(dtype), wd.to(dtype), bd.to(dtype), lnwd if with_ln else None, lnbd if with_ln else None,
                    md, slot=slot, eps=1e-5)
    xe = x.to(dtype).double()
    if with_ln:
        xe = F.layer_norm(xe, (D,), lnw.double(), lnb.double(), 1e-5)
    exact = F.linear(xe, w.to(dtype).double(), bias.to(dtype).double())
    if with_mask:
        exact = exact * mask.double()[..., None]
    if slot is not None:
        exact = exact.reshape(2, 3, 17, K // slot, slot).permute(3, 0, 1, 2, 4)
    assert out.shape == exact.shape and out.dtype == dtype
    err = ((out.double().cpu() - exact).norm() / exact.norm()).item()
    assert err <= (2e-3 if dtype == torch.float16 else 1.6e-2), err


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu)], ids=str)
@pytest.mark.parametrize("N, K", [(17, 64), (1, 64), (9, 128)])
def test_ln_linear_first_slot_pass_major(dtype, N, K):
    """a_passes = 2: the first slot's memory holds (B, S, 2, N, slot // 2), each value where the pass-major
    layout puts it (the Outer Product Mean's Hopper kernel reads it so); the other slots as without it; with
    a_copy, every slot as without it and the pass-major first slot as a second output. Every element is written
    (the outputs are poisoned in the tests). Two stacked weights give what their concatenation gives."""
    g = torch.Generator().manual_seed(N + K)
    D, slot = 24, 32
    x = torch.randn(2, 3, N, D, generator=g)
    w, bias = torch.randn(K, D, generator=g) / D ** 0.5, torch.randn(K, generator=g)
    lnw, lnb = 1 + 0.3 * torch.randn(D, generator=g), 0.3 * torch.randn(D, generator=g)
    mask = random_mask(2, 3, N, "random", 2)
    args = [t.to(DEVICE) for t in (x.to(dtype), w.to(dtype), bias.to(dtype), lnw, lnb, mask)]
    plain = ln_linear(*args, slot=slot, eps=1e-5)
    passes = ln_linear(*args, slot=slot, eps=1e-5, a_passes=2)
    first = passes[0].reshape(2, 3, 2, N, slot // 2).permute(0, 1, 3, 2, 4).reshape(2, 3, N, slot)
    assert torch.equal(first, plain[0]) and torch.equal(passes[1:], plain[1:])
    # a_copy: the slots as without a_passes, and the pass-major first slot beside them
    both, copy = ln_linear(*args, slot=slot, eps=1e-5, a_passes=2, a_copy=True)
    assert copy.shape == (2, 3, 2, N, slot // 2) and copy.is_contiguous()
    assert torch.equal(both, plain) and torch.equal(copy, passes[0].view(2, 3, 2, N, slot // 2))
    # the weight and bias as two stacked parts, read where they are (same strides) or concatenated (other strides)
    wd, bd = args[1], args[2]
    h = K // 2
    for w2 in (wd[h:], wd[h:].t().contiguous().t()):
        two = ln_linear(args[0], [wd[:h], w2], [bd[:h], bd[h:]], *args[3:], slot=slot, eps=1e-5)
        assert torch.equal(two, plain)


def test_ln_linear_refuses_float32_and_wide_rows():
    x = torch.zeros(1, 1, 2, 8, device=DEVICE)
    with pytest.raises(ValueError, match="16-bit"):
        ln_linear(x, torch.zeros(4, 8, device=DEVICE), torch.zeros(4, device=DEVICE))
    wide = torch.zeros(1, 1, 2, 600, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="width"):
        ln_linear(wide, torch.zeros(4, 600, device=DEVICE, dtype=torch.float16), torch.zeros(4, device=DEVICE))


@pytest.mark.parametrize("with_ln", [True, False])
@pytest.mark.parametrize("scale_x, scale_w, scale_b", [(1.0, 1.0, 1.0), (1e3, 1e-4, 1.0), (1e-4, 30.0, 1.0),
                                                     (1.0, 1e-5, 1e-5), (1e-3, 1e-3, 1e-6), (1.0, 3e3, 3e3)])
def test_split_linear_float32_accuracy(with_ln, scale_x, scale_w, scale_b, monkeypatch):
    """float32 products on float16 halves: the float32 contract at magnitudes far from 1 (tiny weights
    with a bias of their scale: the products decide the output), on a strided view of rows, across row
    blocks (forced small)."""
    from evofuse.ops import split_linear

    monkeypatch.setattr(split_linear, "BLOCK_BYTES", 7 * 3 * 24 * 2)  # 7 rows a block
    g = torch.Generator().manual_seed(5)
    x = (scale_x * torch.randn(45, 4 * 24, generator=g))[:, :24]  # row stride 96, as out_proj reads qkvg
    w, b = scale_w * torch.randn(40, 24, generator=g), scale_b * torch.randn(40, generator=g)
    lnw, lnb = 1 + 0.3 * torch.randn(24, generator=g), 0.3 * torch.randn(24, generator=g)
    ln = (lnw.to(DEVICE), lnb.to(DEVICE), 1e-5) if with_ln else None
    out = split_linear.split_linear(x.to(DEVICE), w.to(DEVICE), b.to(DEVICE), ln=ln)
    xe = F.layer_norm(x.double(), (24,), lnw.double(), lnb.double(), 1e-5) if with_ln else x.double()
    exact = F.linear(xe, w.double(), b.double())
    assert out.dtype == torch.float32 and out.shape == (45, 40)
    err = ((out.double().cpu() - exact).norm() / exact.norm()).item()
    assert err <= 1e-6, err


@pytest.mark.parametrize("scale_w, scale_b, scale_ln", [(1.0, 1.0, 1.0), (1e-4, 1e-4, 1.0), (30.0, 1.0, 1e-3),
                                                      (3e3, 3e3, 3.0), (1e-7, 1e-7, 1e-6)])
@pytest.mark.parametrize("D, K, slot, pieces", [(24, 40, 20, 2), (7, 2, 1, 1)])
def test_split_ln_linear_float32_accuracy(D, K, slot, pieces, scale_w, scale_b, scale_ln):
    """The fused float32 LayerNorm-linear on float16 halves: the float32 contract at parameter scales far
    from 1 (the operands normalized by powers of two in `split_ln_weights`), on a strided input and a
    strided weight given in one or two blocks of rows, with a random row mask, written as (K // slot, B, S,
    N, slot) (the Outer Product Mean's a and b)."""
    from evofuse.ops import split_linear

    g = torch.Generator().manual_seed(D + K)
    x = (3 * torch.randn(2, 3, 2 * 17, D, generator=g) + 1)[:, :, ::2]  # every other residue
    w, b = (scale_w * torch.randn(D, K, generator=g)).t(), scale_b * torch.randn(K, generator=g)
    lnw, lnb = scale_ln * (1 + 0.3 * torch.randn(D, generator=g)), scale_ln * 0.3 * torch.randn(D, generator=g)
    mask = random_mask(2, 3, 17, "rows", 3)
    xd, wd, bd, lnwd, lnbd, md = (t.to(DEVICE) for t in (x, w, b, lnw, lnb, mask))
    k_a = K // pieces
    weights = split_linear.split_ln_weights(lnwd, lnbd, [wd[:k_a], wd[k_a:]][:pieces], [bd[:k_a], bd[k_a:]][:pieces])
    out = split_linear.split_ln_linear(xd, weights, md, slot=slot, eps=1e-5)
    xe = F.layer_norm(x.double(), (D,), lnw.double(), lnb.double(), 1e-5)
    exact = F.linear(xe, w.double(), b.double()) * mask.double()[..., None]
    exact = exact.reshape(2, 3, 17, K // slot, slot).permute(3, 0, 1, 2, 4)
    assert out.dtype == torch.float32 and out.shape == exact.shape
    err = ((out.double().cpu() - exact).norm() / exact.norm()).item()
    assert err <= 1e-6, err


@pytest.mark.parametrize("D, slot", [(24, 8), (40, 32)])
def test_split_ln_linear_maxima(D, slot):
    """The fused float32 LayerNorm-linear's per-slot max |output| (the Outer Product Mean's float16 scales of
    a and b), as float32 bits: exactly the output's, masked rows and all; a NaN row makes both NaN."""
    from evofuse.ops import split_linear

    g = torch.Generator().manual_seed(D)
    x = torch.randn(2, 3, 17, D, generator=g)
    w, b = torch.randn(2 * slot, D, generator=g), torch.randn(2 * slot, generator=g)
    lnw, lnb = 1 + 0.3 * torch.randn(D, generator=g), 0.3 * torch.randn(D, generator=g)
    xd, wd, bd, lnwd, lnbd, md = (t.to(DEVICE) for t in (x, w, b, lnw, lnb, random_mask(2, 3, 17, "rows", 4)))
    for nan in (False, True):
        if nan:
            xd[1, 2, 5, 3] = float("nan")
        weights = split_linear.split_ln_weights(lnwd, lnbd, [wd[:slot], wd[slot:]], [bd[:slot], bd[slot:]], slots=2)
        out = split_linear.split_ln_linear(xd, weights, md, slot=slot, eps=1e-5, amax=True)
        got = weights.maxima.view(torch.float32).cpu()
        if nan:
            assert torch.isnan(got).all()
        else:
            torch.testing.assert_close(got, out.abs().amax((1, 2, 3, 4)).cpu(), rtol=0, atol=0)
    weights = split_linear.split_ln_weights(lnwd, lnbd, [wd[:6]], [bd[:6]], slots=2)
    with pytest.raises(ValueError, match="power of two"):
        split_linear.split_ln_linear(xd, weights, md, slot=3, eps=1e-5, amax=True)


@triton.jit
def _ceil_log2_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    bits = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + offs, ceil_log2(bits, -7.0, 100.0), mask=offs < n)


def test_ceil_log2_is_exact():
    """ceil(log2(x)) from the bits, exact at and beside powers of two, subnormals included, clamped; the
    fallback for 0, Inf and NaN."""
    tiny = torch.finfo(torch.float32).tiny
    values = [1.0, 1.5, 2.0, 3.0, 0.75, 2.0 ** 20 + 1, tiny, tiny * 1.5, tiny / 8, tiny / 3, 2.0 ** -149, 3e38,
              2.0 ** -110]
    x = torch.tensor(values + [0.0, float("inf"), float("nan")], dtype=torch.float32)
    out = torch.empty_like(x)
    _ceil_log2_kernel[(1,)](x.view(torch.int32).to(DEVICE), out := out.to(DEVICE), x.numel(), BLOCK=32)
    expected = [max(-100.0, min(100.0, float(math.ceil(math.log2(float(v)))))) for v in x[:len(values)].double()]
    assert out.cpu().tolist() == expected + [-7.0, -7.0, -7.0]


def test_attention_float32_without_out_dtype_support_takes_ieee(monkeypatch):
    """Where PyTorch's cuBLAS path lacks float32 output from float16 operands, float32 attention falls
    back to IEEE products and still meets the contract."""
    from evofuse.ops import split_linear

    monkeypatch.setattr(split_linear, "available", lambda x: False)
    mod = att_module(16, 4, 2, seed=3).to(DEVICE)
    x, z = torch.randn(1, 2, 40, 16, device=DEVICE), torch.randn(1, 40, 40, 4, device=DEVICE)
    out = mod(x, z, None, impl="triton")
    exact = mod.double()(x.double(), z.double(), None, impl="torch")
    assert_contract(out, exact, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("D", [16, 24, 130])
def test_layer_norm_kernel(dtype, D):
    from evofuse.ops.layer_norm_linear import layer_norm

    g = torch.Generator().manual_seed(D)
    x = (3 + 2 * torch.randn(2, 3, 2 * 7, D, generator=g))[:, :, ::2]  # non-contiguous, mean far from 0
    w, b = 1 + 0.3 * torch.randn(D, generator=g), 0.3 * torch.randn(D, generator=g)
    out, mean, rstd = layer_norm(x.to(DEVICE, dtype), w.to(DEVICE, dtype), b.to(DEVICE, dtype), 1e-5, stats=True)
    exact = F.layer_norm(x.to(dtype).double(), (D,), w.to(dtype).double(), b.to(dtype).double(), 1e-5)
    assert out.dtype == dtype and out.shape == exact.shape and out.is_contiguous()
    err = ((out.double().cpu() - exact).norm() / exact.norm()).item()
    assert err <= (1e-6 if dtype == torch.float32 else 1e-3), err
    xd = x.to(dtype).double()  # the statistics, float32, (B, S, N, 1) as layer_norm_backward takes them
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == rstd.shape == (*x.shape[:3], 1)
    torch.testing.assert_close(mean.cpu().double(), xd.mean(-1, keepdim=True), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.cpu().double(), 1 / torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + 1e-5),
                               rtol=1e-5, atol=0)
    # the same rows with or without the statistics: bit for bit in the interpreter; on a GPU the two binaries may
    # contract multiplies and adds differently (H200, session 13: rows 1-2 units in the last place apart)
    tol = (1e-6 if dtype == torch.float32 else 2e-3) if DEVICE == "cuda" else 0
    torch.testing.assert_close(layer_norm(x.to(DEVICE, dtype), w.to(DEVICE, dtype), b.to(DEVICE, dtype), 1e-5), out,
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("D, programs", [(16, 8), (24, 3), (130, 1)])
def test_layer_norm_backward_kernel(dtype, D, programs, monkeypatch):
    """The LayerNorm backward from the forward's statistics against float64 autograd: dx and the
    weight's and bias's gradients (summed over programs that each take several row tiles, the last
    short), non-contiguous x; without dx the same parameter gradients, bit for bit."""
    import evofuse.ops.layer_norm_linear as lnl

    monkeypatch.setattr(lnl, "LN_BWD_PROGRAMS", programs)
    g = torch.Generator().manual_seed(D + programs)
    x = (3 + 2 * torch.randn(2, 3, 2 * 7, D, generator=g))[:, :, ::2]  # non-contiguous, mean far from 0
    w, b = 1 + 0.3 * torch.randn(D, generator=g), 0.3 * torch.randn(D, generator=g)
    dy = torch.randn(2, 3, 7, D, generator=g)
    _, mean, rstd = lnl.layer_norm(x.to(DEVICE, dtype), w.to(DEVICE, dtype), b.to(DEVICE, dtype), 1e-5, stats=True)
    dx, dw, db = lnl.layer_norm_backward(dy.to(DEVICE, dtype), x.to(DEVICE, dtype), mean, rstd, w.to(DEVICE, dtype))
    xe, we, be = (t.to(dtype).double().requires_grad_(True) for t in (x, w, b))
    F.layer_norm(xe, (D,), we, be, 1e-5).backward(dy.to(dtype).double())
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    assert dx.dtype == dtype and dx.shape == x.shape and dw.dtype == db.dtype == torch.float32
    for got, exact in ((dx, xe.grad), (dw, we.grad), (db, be.grad)):
        err = ((got.double().cpu() - exact).norm() / exact.norm()).item()
        assert err <= tol, err
    none, dw2, db2 = lnl.layer_norm_backward(dy.to(DEVICE, dtype), x.to(DEVICE, dtype), mean, rstd,
                                             w.to(DEVICE, dtype), need_x=False)
    assert none is None
    torch.testing.assert_close(dw2, dw, rtol=0, atol=0)
    torch.testing.assert_close(db2, db, rtol=0, atol=0)


# bfloat16 products are wrong in Triton's interpreter (triton 3.9): checked on the GPU only
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu)], ids=str)
@pytest.mark.parametrize("D, C, with_mask, layout", [(24, 5, True, "residues-of-a-wider"), (64, 32, True, "transposed"),
                                                     (130, 8, False, "residues-of-a-wider"), (256, 32, True, "contiguous"),
                                                     (40, 64, True, "contiguous")])
def test_ln_linear_backward_kernel(dtype, D, C, with_mask, layout):
    """The LayerNorm + two projections + row mask backward against float64 autograd through the forward
    it differentiates: dx and every parameter's gradient (the LayerNorm recomputed on chip; programs
    that each take several row tiles, the last short), a non-contiguous x with a mean far from 0, one
    gradient in float32 (as the Outer Product Mean's summed db comes), a fully masked MSA row; x with
    evenly strided rows (a view), with rows that are not (copied) and contiguous; without dx the same
    parameter gradients, bit for bit, and in x's dtype those rounded once."""
    from evofuse.ops.layer_norm_linear import ln_linear_backward, ln_linear_backward_fits

    assert ln_linear_backward_fits(dtype, D, C)
    g = torch.Generator().manual_seed(D + C)
    B, S, N = 2, 3, 17
    x = 3 + 2 * torch.randn(B, S, 2 * N, D, generator=g)
    x = {"residues-of-a-wider": x[:, :, ::2], "transposed": x[:, :, :N].transpose(1, 2).contiguous().transpose(1, 2),
         "contiguous": x[:, :, :N].contiguous()}[layout]  # rows evenly strided, then not (copied), then contiguous
    lnw, lnb = 1 + 0.3 * torch.randn(D, generator=g), 0.3 * torch.randn(D, generator=g)
    w, bias = torch.randn(2 * C, D, generator=g) / D ** 0.5, torch.randn(2 * C, generator=g)
    dy0, dy1 = torch.randn(B, S, N, C, generator=g), torch.randn(B, S, N * C, generator=g)
    mask = random_mask(B, S, N, "rows", 2) if with_mask else None
    if with_mask:
        mask[0, 1] = 0
    dev = {k: v.to(DEVICE) for k, v in dict(lnw=lnw, lnb=lnb, dy1=dy1).items()}
    m = None if mask is None else mask.to(DEVICE, torch.float32)
    args = (x.to(DEVICE, dtype), dev["lnw"], dev["lnb"], w.to(DEVICE, dtype), m, dy0.to(DEVICE, dtype), dev["dy1"],
            1e-5)
    dx, dlnw, dlnb, dw, db = ln_linear_backward(*args)

    xe, lnwe, lnbe = x.to(dtype).double().requires_grad_(True), lnw.double().requires_grad_(True), \
        lnb.double().requires_grad_(True)
    we, be = w.to(dtype).double().requires_grad_(True), bias.double().requires_grad_(True)
    y = F.linear(F.layer_norm(xe, (D,), lnwe, lnbe, 1e-5), we, be)
    if with_mask:
        y = y * mask.double()[..., None]
    dye = torch.cat([dy0.to(dtype).double(), dy1.reshape(B, S, N, C).to(dtype).double()], -1)
    y.backward(dye)
    assert dx.dtype == dtype and dx.shape == x.shape
    for got, exact in ((dx, xe.grad), (dlnw, lnwe.grad), (dlnb, lnbe.grad), (dw, we.grad), (db, be.grad)):
        assert got.shape == exact.shape
        err = ((got.double().cpu() - exact).norm() / exact.norm()).item()
        assert err <= (2e-3 if dtype == torch.float16 else 1.6e-2), err
    if with_mask:
        assert (dx[0, 1] == 0).all()
    none, *params = ln_linear_backward(*args, need_x=False)
    assert none is None
    for got, again in zip((dlnw, dlnb, dw, db), params):
        torch.testing.assert_close(again, got, rtol=0, atol=0)
    _, *rounded = ln_linear_backward(*args, need_x=False, out_dtype=dtype)  # the float32 sums rounded once
    for got, again in zip((dlnw, dlnb, dw, db), rounded):
        assert again.dtype == dtype
        torch.testing.assert_close(again, got.to(dtype), rtol=0, atol=0)



@triton.jit
def _row_coords_kernel(out_ptr, first, S, N, BLOCK_ROWS: tl.constexpr):
    rows, b, s, i = row_coords(tl.cast(first, tl.int64) + tl.program_id(0) * BLOCK_ROWS, BLOCK_ROWS, S, N)
    offs = (tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)) * 4
    tl.store(out_ptr + offs, rows)
    tl.store(out_ptr + offs + 1, b)
    tl.store(out_ptr + offs + 2, s)
    tl.store(out_ptr + offs + 3, i)


@pytest.mark.parametrize("first, S, N", [(0, 3, 17), (5, 2, 7), (3 * 2**31 + 11, 1000, 997)])
def test_row_coords(first, S, N):
    """The kernels' row -> (b, s, i) split (64-bit division of a tile's first row only) against integer
    arithmetic: tiles that cross residue and MSA-row boundaries, rows past 2**32."""
    tiles, block = 5, 16
    out = torch.empty(tiles * block, 4, dtype=torch.int64, device=DEVICE)
    _row_coords_kernel[(tiles,)](out, first, S, N, BLOCK_ROWS=block)
    rows = first + torch.arange(tiles * block, dtype=torch.int64)
    exact = torch.stack([rows, rows // (S * N), rows // N % S, rows % N], 1)
    assert torch.equal(out.cpu(), exact)

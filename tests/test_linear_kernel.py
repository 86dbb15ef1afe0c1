"""The fused LayerNorm + linear + row-mask kernel on its own, against PyTorch in float64."""

import pytest
import torch
import torch.nn.functional as F

from evofuse.ops.layer_norm_linear import ln_linear

from .conftest import DEVICE
from .helpers import random_mask


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


def test_ln_linear_refuses_float32_and_wide_rows():
    x = torch.zeros(1, 1, 2, 8, device=DEVICE)
    with pytest.raises(ValueError, match="16-bit"):
        ln_linear(x, torch.zeros(4, 8, device=DEVICE), torch.zeros(4, device=DEVICE))
    wide = torch.zeros(1, 1, 2, 600, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="width"):
        ln_linear(wide, torch.zeros(4, 600, device=DEVICE, dtype=torch.float16), torch.zeros(4, device=DEVICE))

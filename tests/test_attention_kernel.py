"""The fused row attention against the float64 reference (Triton's interpreter on CI)."""

import itertools

import pytest
import torch

from .conftest import DEVICE
from .helpers import assert_contract, att_module, random_mask

NS, SS, HEADS, HEAD_DIMS = (1, 7, 17, 40), (1, 3), (1, 2, 4), (8, 16)
MASKS = ("random", "rows", "ones", "none", "empty")
GRID = [(N, S, HEADS[k % 3], HEAD_DIMS[k % 2], MASKS[k % 5]) for k, (N, S) in enumerate(itertools.product(NS, SS))]


def run(mod, x, z, mask, dtype):
    """(triton output, float64 reference, reference in dtype, reference in float32)."""
    mod = mod.to(DEVICE)
    x, z, m = x.to(DEVICE), z.to(DEVICE), None if mask is None else mask.to(DEVICE)
    out = mod.to(dtype)(x.to(dtype), z.to(dtype), m, impl="triton")
    exact = mod.double()(x.double(), z.double(), m, impl="torch")
    ref_dtype = mod.to(dtype)(x.to(dtype), z.to(dtype), m, impl="torch")
    ref32 = mod.float()(x.float(), z.float(), m, impl="torch")
    return out, exact, ref_dtype, ref32


@pytest.fixture(params=["single-launch", "tiled"])
def path(request, monkeypatch):
    """Small problems take the single-launch kernel; "tiled" forces projections + flash kernel."""
    import evofuse.ops.row_attention as ra

    if request.param == "tiled":
        monkeypatch.setattr(ra, "SMALL_MAX_N", 0)
    return request.param


@pytest.mark.parametrize("N, S, h, d, mask_kind", GRID)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_forward_awkward_shapes(N, S, h, d, mask_kind, dtype, path):
    B, P = 2, 5
    mod = att_module(h * d, P, h, seed=N * 10 + S)
    x, z = torch.randn(B, S, N, h * d), torch.randn(B, N, N, P)
    out, exact, ref_dtype, ref32 = run(mod, x, z, random_mask(B, S, N, mask_kind, seed=N + S), dtype)
    if dtype == torch.float32:
        assert_contract(out, exact, dtype, ref_fp32=ref32)
    else:
        assert_contract(out, exact, dtype, lowp_ref=ref_dtype)


@pytest.mark.parametrize("d", [24, 32])
def test_head_dims_that_are_padded_or_wide(d, path):
    mod = att_module(2 * d, 3, 2, seed=d)
    x, z = torch.randn(1, 2, 19, 2 * d), torch.randn(1, 19, 19, 3)
    out, exact, _, ref32 = run(mod, x, z, random_mask(1, 2, 19, "rows", 3), torch.float32)
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)


def test_fully_masked_row_is_uniform_and_finite(path):
    mod = att_module(16, 4, 2, seed=1).to(DEVICE)
    x, z = torch.randn(1, 2, 21, 16, device=DEVICE), torch.randn(1, 21, 21, 4, device=DEVICE)
    mask = torch.ones(1, 2, 21, device=DEVICE)
    mask[0, 0] = 0
    out = mod(x, z, mask, impl="triton")
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, mod(x, z, mask, impl="torch"), rtol=1e-4, atol=1e-4)


def test_fast_precision(path):
    mod = att_module(32, 4, 2, seed=2, precision="fast")
    x, z = torch.randn(2, 2, 18, 32), torch.randn(2, 18, 18, 4)
    out, exact, _, _ = run(mod, x, z, random_mask(2, 2, 18, "rows", 4), torch.float32)
    assert_contract(out, exact, torch.float32, precision="fast")


def test_non_contiguous_and_broadcast_inputs(path):
    mod = att_module(16, 4, 2, seed=3)
    x = torch.randn(1, 9, 3, 16).transpose(1, 2)  # (1, 3, 9, 16)
    z = torch.randn(1, 9, 9, 4).transpose(1, 2)
    mask = (torch.rand(1, 1, 9) > 0.3).float().expand(1, 3, 9)
    out, exact, _, ref32 = run(mod, x, z, mask, torch.float32)
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)


def test_deterministic(path):
    mod = att_module(16, 4, 4, seed=4).to(DEVICE)
    x, z = torch.randn(2, 2, 13, 16, device=DEVICE), torch.randn(2, 13, 13, 4, device=DEVICE)
    mask = random_mask(2, 2, 13, "rows", 5).to(DEVICE)
    assert torch.equal(mod(x, z, mask, impl="triton"), mod(x, z, mask, impl="triton"))


def test_nan_propagates_like_the_reference(path):
    mod = att_module(8, 3, 2, seed=5).to(DEVICE)
    x, z = torch.randn(1, 3, 6, 8, device=DEVICE), torch.randn(1, 6, 6, 3, device=DEVICE)
    x[0, 1, 2, 0] = float("nan")  # poisons row s=1 (LayerNorm spreads it over that residue's channels)
    mask = torch.ones(1, 3, 6, device=DEVICE)
    out, ref = mod(x, z, mask, impl="triton"), mod(x, z, mask, impl="torch")
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.isnan(out[0, 1]).all() and not torch.isnan(out[0, 0]).any()


def test_training_dropout_falls_back_with_one_warning():
    import evofuse._dispatch as dispatch

    dispatch._warned.discard("att-dropout")
    mod = att_module(8, 3, 2, seed=6, dropout=0.5).to(DEVICE).train()
    x, z = torch.randn(1, 2, 5, 8, device=DEVICE), torch.randn(1, 5, 5, 3, device=DEVICE)
    with pytest.warns(RuntimeWarning, match="dropout"):
        mod(x, z, None, impl="triton")
    mod.eval()  # eval mode takes the fused path and matches the reference
    torch.testing.assert_close(mod(x, z, None, impl="triton"), mod(x, z, None, impl="torch"), rtol=1e-4, atol=1e-4)


def test_dropout_distribution_in_training():
    """With dropout p the output is an unbiased estimate: its mean over many draws approaches the eval output."""
    mod = att_module(8, 3, 2, seed=7, dropout=0.3).to(DEVICE)
    x, z = torch.randn(1, 1, 6, 8, device=DEVICE), torch.randn(1, 6, 6, 3, device=DEVICE)
    mod.eval()
    expected = mod(x, z, None, impl="triton")
    mod.train()
    torch.manual_seed(0)
    draws = torch.stack([mod(x, z, None, impl="triton") for _ in range(2000)])
    assert not torch.allclose(draws[0], draws[1])
    se = draws.std(0) / 2000 ** 0.5
    assert ((draws.mean(0) - expected).abs() <= 5 * se + 1e-6).all()


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.float64])
def test_mask_of_any_dtype_is_read_as_it_is(mask_dtype, path):
    """The kernels read the caller's mask (bool, integer, float; here broadcast over the batch) without
    a converted copy; forward and gradients match the float mask's."""
    mod = att_module(16, 4, 2, seed=8).to(DEVICE)
    x, z = torch.randn(2, 3, 9, 16, device=DEVICE), torch.randn(2, 9, 9, 4, device=DEVICE)
    mask = random_mask(1, 3, 9, "rows", 3).to(DEVICE).expand(2, 3, 9)
    outs = []
    for m in (mask, mask.to(mask_dtype)):
        xi = x.clone().requires_grad_(True)
        out = mod(xi, z, m, impl="triton")
        out.square().sum().backward()
        outs.append((out.detach(), xi.grad))
    # bit for bit in the interpreter; on a GPU the binaries of the two mask dtypes may contract multiplies and adds
    # differently (H200, session 13: float32 results ~1e-5 relative apart)
    tol = 5e-5 if DEVICE == "cuda" else 0
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=tol, atol=tol * outs[0][0].abs().max().item())
    torch.testing.assert_close(outs[1][1], outs[0][1], rtol=tol, atol=tol * outs[0][1].abs().max().item())


def test_small_problems_take_one_launch(monkeypatch):
    """The seed shape runs the single-launch kernel and nothing else; larger rows do not take it."""
    import evofuse.ops.row_attention as ra

    mod = att_module(64, 64, 4, seed=1)
    params = list(mod.parameters())
    assert ra._small_meta(32, 64, 4, torch.bfloat16, params) is not None  # att-seed
    assert ra._small_meta(384, 256, 8, torch.bfloat16, params) is None  # att-af2-main
    assert ra._small_meta(32, 64, 4, torch.bfloat16, [params[2].t()]) is None  # a transposed weight
    monkeypatch.setattr(ra, "project", lambda *a, **k: pytest.fail("the tiled path ran"))
    monkeypatch.setattr(ra, "launch", lambda *a, **k: pytest.fail("the tiled path ran"))
    mod = att_module(16, 4, 2, seed=2).to(DEVICE)
    x, z = torch.randn(1, 3, 9, 16, device=DEVICE), torch.randn(1, 9, 9, 4, device=DEVICE)
    mask = random_mask(1, 3, 9, "rows", 1).to(DEVICE)
    with torch.no_grad():  # recording gradients takes the tiled path, which keeps what the backward needs
        torch.testing.assert_close(mod(x, z, mask, impl="triton"), mod(x, z, mask, impl="torch"), rtol=1e-4,
                                   atol=1e-5)


def test_keys_workspace_size_follows_the_candidates(monkeypatch):
    """The backward's dq workspace is sized from the candidates in force at the call (as the Outer Product
    Mean's, whose cached size was too small once the tests swapped the candidates, session 17)."""
    import triton

    from evofuse.ops import row_attention

    sizes = []
    for block_m in (32, 128):
        cfg = triton.Config({"BLOCK_M": block_m, "BLOCK_N": 64}, num_warps=4, num_stages=2)
        monkeypatch.setattr(row_attention, "_bwd_configs", lambda cfg=cfg: [cfg])
        sizes.append(row_attention._keys_workspace_size(33, 64))
    assert sizes == [64 * 64, 128 * 64]  # 33 residues rounded up to 32-row, then 128-row blocks

"""SPEC 4: bad input raises ValueError / TypeError naming the argument and the expected shape."""

import pytest
import torch

from evofuse import MSARowAttentionWithPairBias, OuterProductMean, outer_product_mean


@pytest.fixture
def opm():
    return OuterProductMean(8, 5, 4)


@pytest.fixture
def att():
    return MSARowAttentionWithPairBias(8, 3, 2)


X = torch.randn(2, 3, 4, 8)
Z = torch.randn(2, 4, 4, 3)
M = torch.ones(2, 3, 4)


@pytest.mark.parametrize("x, mask, exc, pattern", [
    (torch.randn(3, 4, 8), M, ValueError, r"msa_repr must have shape \(B, S, N, 8\).*rank 3"),
    (torch.randn(2, 3, 4, 7), M, ValueError, r"msa_repr .*last dimension is 7, expected 8"),
    (X, torch.ones(2, 3, 5), ValueError, r"msa_mask must have shape \(B, S, N\) = \(2, 3, 4\)"),
    (X, torch.ones(2, 3), ValueError, r"msa_mask must have shape"),
    (torch.randint(0, 3, (2, 3, 4, 8)), M, TypeError, r"msa_repr must be a real floating"),
    (torch.randn(2, 3, 4, 8, dtype=torch.complex64), M, TypeError, r"msa_repr must be a real floating"),
    (X, torch.ones(2, 3, 4, dtype=torch.complex64), TypeError, r"msa_mask must be bool, integer or real"),
    ([[1.0]], M, TypeError, r"msa_repr must be a torch.Tensor"),
    (X, "mask", TypeError, r"msa_mask must be a torch.Tensor"),
])
def test_opm_bad_inputs(opm, x, mask, exc, pattern):
    with pytest.raises(exc, match=pattern):
        opm(x, mask)


@pytest.mark.parametrize("x, z, mask, exc, pattern", [
    (torch.randn(2, 3, 4), Z, M, ValueError, r"msa_repr must have shape"),
    (X, torch.randn(2, 4, 4), M, ValueError, r"pair_repr must have shape \(B, N, N, 3\) = \(2, 4, 4, 3\).*rank 3"),
    (X, torch.randn(1, 4, 4, 3), M, ValueError, r"pair_repr must have shape .* to match msa_repr"),
    (X, torch.randn(2, 5, 5, 3), M, ValueError, r"pair_repr must have shape"),
    (X, torch.randn(2, 4, 4, 6), M, ValueError, r"pair_repr must have shape \(B, N, N, 3\)"),
    (X, Z, torch.ones(3, 3, 4), ValueError, r"msa_mask must have shape \(B, S, N\)"),
    (X, Z.to(torch.int32), M, TypeError, r"pair_repr must be a real floating"),
    (X, Z.to(torch.complex64), M, TypeError, r"pair_repr must be a real floating"),
])
def test_attention_bad_inputs(att, x, z, mask, exc, pattern):
    with pytest.raises(exc, match=pattern):
        att(x, z, mask)


def test_heads_must_divide_msa_dim():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MSARowAttentionWithPairBias(10, 3, 4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_tensors_on_different_devices(opm, att):
    with pytest.raises(ValueError, match="msa_mask is on"):
        opm(X, M.cuda())
    with pytest.raises(ValueError, match="pair_repr is on"):
        att(X, Z.cuda(), M)


def test_mask_on_meta_device_is_a_device_error(opm, att):
    """Device mismatch, checked without a GPU: the meta device stands in for a second device."""
    with pytest.raises(ValueError, match=r"msa_mask is on meta but msa_repr is on cpu"):
        opm(X, M.to("meta"))
    with pytest.raises(ValueError, match=r"pair_repr is on meta"):
        att(X, Z.to("meta"), M)
    params = [p.detach() for p in opm.parameters()]
    params[-1] = params[-1].to("meta")
    with pytest.raises(ValueError, match=r"out_proj_bias is on meta but msa_repr is on cpu"):
        outer_product_mean(X, M, *params)


def test_parameter_shapes_are_checked(opm):
    params = [p.detach() for p in opm.parameters()]
    params[2] = torch.randn(4, 9)  # proj_a_weight
    with pytest.raises(ValueError, match=r"proj_a_weight must have shape \(4, 8\)"):
        outer_product_mean(X, M, *params)


def test_unknown_options():
    with pytest.raises(ValueError, match="normalization"):
        OuterProductMean(8, 5, 4, normalization="mean")
    with pytest.raises(ValueError, match="precision"):
        OuterProductMean(8, 5, 4, precision="fastest")(X, M)


def test_non_contiguous_and_broadcast_inputs(opm, att):
    x = torch.randn(2, 4, 3, 8).transpose(1, 2)  # (2, 3, 4, 8), not contiguous
    mask = torch.ones(1, 1, 4).expand(2, 3, 4)  # stride 0
    torch.testing.assert_close(opm(x, mask), opm(x.contiguous(), mask.contiguous()))
    z = torch.randn(1, 4, 4, 3).expand(2, 4, 4, 3)
    torch.testing.assert_close(att(x, z, mask), att(x.contiguous(), z.contiguous(), mask.contiguous()))

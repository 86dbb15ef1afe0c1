"""The reference and the modules against the seed's definitions, in float64 (the CPU path)."""

import pytest
import torch

from evofuse import MSARowAttentionWithPairBias, OuterProductMean
from evofuse.reference import COUNT_EPS, outer_product_mean_reference

from .helpers import random_mask, randomize
from .seed_modules import SeedMSARowAttentionWithPairBias, SeedOuterProductMean


@pytest.mark.parametrize("kind", ["random", "rows", "ones", "empty"])
def test_opm_matches_seed_module(kind):
    seed_mod = randomize(SeedOuterProductMean(12, 10, 6), 1).double()
    mod = OuterProductMean(12, 10, 6, impl="torch").double()
    mod.load_state_dict(seed_mod.state_dict())
    x = torch.randn(2, 5, 7, 12, dtype=torch.float64)
    mask = random_mask(2, 5, 7, kind, 3).double()
    torch.testing.assert_close(mod(x, mask), seed_mod(x, mask), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["random", "rows", "ones", "empty"])
def test_attention_matches_seed_module(kind):
    seed_mod = randomize(SeedMSARowAttentionWithPairBias(16, 6, 4), 2).double()
    mod = MSARowAttentionWithPairBias(16, 6, 4, impl="torch").double()
    mod.load_state_dict(seed_mod.state_dict())
    x = torch.randn(2, 3, 9, 16, dtype=torch.float64)
    z = torch.randn(2, 9, 9, 6, dtype=torch.float64)
    mask = random_mask(2, 3, 9, kind, 4).double()
    torch.testing.assert_close(mod(x, z, mask), seed_mod(x, z, mask), rtol=1e-12, atol=1e-12)


def test_fully_masked_attention_row_is_mean_of_values():
    mod = randomize(MSARowAttentionWithPairBias(8, 4, 2, impl="torch"), 5).double()
    x = torch.randn(1, 2, 6, 8, dtype=torch.float64)
    z = torch.randn(1, 6, 6, 4, dtype=torch.float64)
    mask = torch.ones(1, 2, 6, dtype=torch.float64)
    mask[0, 1] = 0
    out = mod(x, z, mask)
    xl = mod.layer_norm(x)
    v = mod.value(xl)[0, 1]  # (N, D)
    g = torch.sigmoid(mod.gate(xl))[0, 1]
    expected = mod.out_proj(g * v.mean(0, keepdim=True))
    torch.testing.assert_close(out[0, 1], expected.expand(6, 8), rtol=1e-10, atol=1e-10)
    assert torch.isfinite(out).all()


def test_opm_none_mask_is_all_ones():
    mod = randomize(OuterProductMean(8, 5, 4, impl="torch"), 6).double()
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    torch.testing.assert_close(mod(x, None), mod(x, torch.ones(2, 3, 4, dtype=torch.float64)))


@pytest.mark.parametrize("normalization", ["count_ij_after", "count_ij"])
def test_opm_other_normalizations(normalization):
    """AF2: out_proj(O) / (1e-3 + sum_s m_i m_j); Boltz: out_proj(O / max(sum_s m_i m_j, 1))."""
    mod = randomize(OuterProductMean(8, 5, 4, normalization=normalization, impl="torch"), 7).double()
    x = torch.randn(2, 6, 5, 8, dtype=torch.float64)
    mask = random_mask(2, 6, 5, "rows", 8).double()
    xl = mod.layer_norm(x)
    a = mod.proj_a(xl) * mask[..., None]
    b = mod.proj_b(xl) * mask[..., None]
    o = torch.einsum("bsip,bsjq->bijpq", a, b).reshape(2, 5, 5, 16)
    norm = torch.einsum("bsi,bsj->bij", mask, mask)[..., None]
    if normalization == "count_ij_after":
        expected = mod.out_proj(o) / (COUNT_EPS + norm)
    else:
        expected = mod.out_proj(o / norm.clamp(min=1))
    torch.testing.assert_close(mod(x, mask), expected)


def test_bool_and_int_masks_match_float():
    mod = randomize(OuterProductMean(8, 5, 4, impl="torch"), 9).double()
    x = torch.randn(1, 4, 5, 8, dtype=torch.float64)
    mask = random_mask(1, 4, 5, "random", 10)
    ref = mod(x, mask.double())
    torch.testing.assert_close(mod(x, mask.bool()), ref)
    torch.testing.assert_close(mod(x, mask.long()), ref)


@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 0, 4), (2, 3, 0)])
def test_empty_dimensions(shape):
    B, S, N = shape
    opm = OuterProductMean(8, 5, 4, impl="torch")
    out = opm(torch.randn(B, S, N, 8), torch.ones(B, S, N))
    assert out.shape == (B, N, N, 5)
    assert torch.isfinite(out).all()
    if S == 0 and N > 0:  # no MSA rows: the outer product mean is 0, the output is the bias
        torch.testing.assert_close(out, opm.out_proj.bias.expand_as(out))
    att = MSARowAttentionWithPairBias(8, 3, 2, impl="torch")
    out = att(torch.randn(B, S, N, 8), torch.randn(B, N, N, 3), torch.ones(B, S, N))
    assert out.shape == (B, S, N, 8)


def test_reference_rejects_unknown_normalization():
    with pytest.raises(ValueError, match="normalization"):
        outer_product_mean_reference(*([torch.zeros(1)] * 10), normalization="mean")


def test_parameters_and_pair_take_the_inputs_dtype():
    """A float32 module on bfloat16 inputs (and a float32 pair) computes in bfloat16, as the fused path does."""
    from evofuse import MSARowAttentionWithPairBias, OuterProductMean

    x = torch.randn(1, 2, 3, 8).bfloat16()
    assert OuterProductMean(8, 4, 4)(x, None, impl="torch").dtype == torch.bfloat16
    att = MSARowAttentionWithPairBias(8, 4, 2)
    assert att(x, torch.randn(1, 3, 3, 4), None, impl="torch").dtype == torch.bfloat16

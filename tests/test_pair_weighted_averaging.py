"""Pair-weighted averaging against Boltz's own module (boltz 2.2.1) and against the float64 reference:
forward, backward, masks, input forms and bad input."""

import importlib.util

import pytest
import torch

import evofuse
from evofuse import PairWeightedAveraging

from .conftest import DEVICE
from .helpers import assert_contract, randomize

BOLTZ = importlib.util.find_spec("boltz") is not None


def _pair_mask(B, N, kind, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "none":
        return None
    mask = (torch.rand(B, N, N, generator=g) > 0.3).float()
    if kind == "rows":
        mask[:, N // 2, :] = 0  # a residue i whose pairs are all masked
    if kind == "ones":
        mask = torch.ones(B, N, N)
    return mask


def _module(c_m, c_z, c_h, h, seed=0, **kw):
    return randomize(PairWeightedAveraging(c_m, c_z, c_h, h, **kw), seed)


@pytest.mark.skipif(not BOLTZ, reason="boltz (2.2.1) is not installed: pip install --no-deps boltz==2.2.1 scipy")
@pytest.mark.parametrize("kind", ["random", "rows", "ones"])
def test_matches_boltz_module(kind):
    from boltz.model.layers.pair_averaging import PairWeightedAveraging as BoltzPWA

    boltz = randomize(BoltzPWA(16, 12, 8, 3), 1).double()
    mod = PairWeightedAveraging(16, 12, 8, 3, impl="torch").double()
    mod.load_state_dict(boltz.state_dict())
    m, z = torch.randn(2, 5, 7, 16, dtype=torch.float64), torch.randn(2, 7, 7, 12, dtype=torch.float64)
    mask = _pair_mask(2, 7, kind, 2).double()
    # Boltz adds -1e6 to a masked logit literally (1e-10 of a logit lost in float64); evofuse takes the term
    # relative to the row, the same softmax
    torch.testing.assert_close(mod(m, z, mask), boltz(m, z, mask), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(mod(m, z, mask, chunk_heads=True), boltz.eval()(m, z, mask, chunk_heads=True),
                               rtol=1e-9, atol=1e-10)


def test_parameter_names_and_zero_output_projection():
    mod = PairWeightedAveraging(16, 12, 8, 3)
    assert [n for n, _ in mod.named_parameters()] == [
        "norm_m.weight", "norm_m.bias", "norm_z.weight", "norm_z.bias", "proj_m.weight", "proj_g.weight",
        "proj_z.weight", "proj_o.weight"]
    assert not mod.proj_o.weight.any()


X = torch.randn(2, 3, 4, 8)
Z = torch.randn(2, 4, 4, 6)
PM = torch.ones(2, 4, 4)


@pytest.mark.parametrize("m, z, mask, exc, pattern", [
    (torch.randn(3, 4, 8), Z, PM, ValueError, r"msa_repr must have shape"),
    (X, torch.randn(2, 4, 4, 5), PM, ValueError, r"pair_repr must have shape \(B, N, N, 6\)"),
    (X, Z, torch.ones(2, 4, 5), ValueError, r"pair_mask must have shape \(B, N, N\) = \(2, 4, 4\)"),
    (X, Z, torch.ones(2, 4, 4, dtype=torch.complex64), TypeError, r"pair_mask must be bool, integer or real"),
    (X.to(torch.int32), Z, PM, TypeError, r"msa_repr must be a real floating"),
])
def test_bad_inputs(m, z, mask, exc, pattern):
    with pytest.raises(exc, match=pattern):
        PairWeightedAveraging(8, 6, 4, 2)(m, z, mask)


def test_bad_heads():
    params = [p for _, p in PairWeightedAveraging(8, 6, 4, 2).named_parameters()]
    with pytest.raises(ValueError, match="num_heads must be a positive integer dividing proj_m's width 8"):
        evofuse.pair_weighted_averaging(X, Z, PM, *params, num_heads=3)


@pytest.mark.parametrize("kind", ["random", "rows", "none"])
def test_reference_path_against_float64(kind):
    mod = _module(16, 12, 8, 3, seed=4)
    m, z = torch.randn(1, 4, 9, 16), torch.randn(1, 9, 9, 12)
    mask = _pair_mask(1, 9, kind, 5)
    exact = mod.double()(m.double(), z.double(), None if mask is None else mask.double(), impl="torch")
    out = mod.float().to(DEVICE)(m.to(DEVICE), z.to(DEVICE), None if mask is None else mask.to(DEVICE))
    assert_contract(out.cpu(), exact, torch.float32)

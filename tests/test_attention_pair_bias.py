"""Attention with pair bias (`evofuse.AttentionPairBias`, `evofuse.attention_pair_bias`) against Boltz-2's module and
the float64 reference: the pair projected or given, masks, input forms and bad input."""

import pytest
import torch

import evofuse
from evofuse import AttentionPairBias

from .conftest import DEVICE
from .contract import (
    AWKWARD_CASES,
    argument_id,
    bad_arguments,
    check_bad_argument,
    check_gradients,
    check_nonfinite,
    layout_case,
    mask_form,
    nonfinite_cases,
)
from .helpers import assert_contract, randomize

LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # the interpreter's bf16 products are not checked


def _module(c_s=16, c_z=8, h=2, seed=0, **kw):
    mod = randomize(AttentionPairBias(c_s, c_z, h, **kw), seed)
    if mod.proj_z is not None:
        with torch.no_grad():
            mod.proj_z[0].weight.add_(1.0)  # (a LayerNorm's scale about 1)
    return mod


def _inputs(B, N, c_s=16, channels=8, seed=0, masked_token=True):
    """The single representation (B, N, c_s), the pair (B, N, N, channels) and a token mask with ~20% zeros and, if
    masked_token, a token masked for every query."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, N, generator=g) > 0.2).float()
    mask[:, 0] = 1
    if masked_token and N > 1:
        mask[:, N // 2] = 0
    return torch.randn(B, N, c_s, generator=g), torch.randn(B, N, N, channels, generator=g), mask


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("compute_pair_bias", [True, False])
def test_matches_boltz_module(impl, compute_pair_bias):
    """Boltz-2's module (float32, its own attention arithmetic) and evofuse's with its state_dict: the bias projected
    from the pair, or given with multiplicity 2 (each pair used by two consecutive samples, as its diffusion does)."""
    attentionv2 = pytest.importorskip("boltz.model.layers.attentionv2")
    theirs = randomize(attentionv2.AttentionPairBias(16, 8 if compute_pair_bias else None, 2,
                                                     compute_pair_bias=compute_pair_bias), 1)
    ours = AttentionPairBias(16, 8, 2, compute_pair_bias=compute_pair_bias)
    ours.load_state_dict(theirs.state_dict())
    multiplicity = 1 if compute_pair_bias else 2
    s, z, mask = _inputs(2 * multiplicity, 9, channels=8 if compute_pair_bias else 2, seed=2)
    z = z[:2]
    expected = theirs(s, z, mask, s, multiplicity=multiplicity)
    ours, s, z, mask = ours.to(DEVICE), s.to(DEVICE), z.to(DEVICE), mask.to(DEVICE)
    torch.testing.assert_close(ours(s, z, mask, k_in=s, multiplicity=multiplicity, impl=impl).cpu(), expected,
                               rtol=1e-5, atol=1e-5)


def _contract_case(B, N, form, layout, seed, channels=8):
    s, z, mask = _inputs(B, N, channels=channels, seed=seed)
    return layout_case((s, z, mask_form(mask, form)), layout, [0, 0, 0])


@pytest.mark.parametrize("compute_pair_bias, dtype, layout", [
    (True, torch.float32, "strided"), (False, LOW, "plain"),
    pytest.param(True, torch.float32, "broadcast", marks=pytest.mark.full)])
def test_each_gradient_alone(compute_pair_bias, dtype, layout):
    """Every gradient, then each input's and parameter's alone (each branch of the backward), against float64."""
    mod = _module(seed=3, compute_pair_bias=compute_pair_bias)
    B = 1 if layout != "broadcast" else 2
    inputs, views = _contract_case(B, 17, "float", layout, 4, channels=8 if compute_pair_bias else 2)
    check_gradients(mod, inputs, dtype, DEVICE, 2, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("N, form, layout, dtype", [
    pytest.param(*case.values, dtype, marks=case.marks) if hasattr(case, "values") else (*case, dtype)
    for case in AWKWARD_CASES for dtype in (torch.float32, LOW)])
def test_gradients_at_awkward_shapes(N, form, layout, dtype):
    """Output and every gradient at the contract's awkward shapes, masks and layouts."""
    inputs, views = _contract_case(2, N, form, layout, 6)
    check_gradients(_module(seed=5), inputs, dtype, DEVICE, 2, views, strided_weights=layout == "strided")


def test_every_key_masked_averages_over_all_keys():
    """A batch element whose tokens are all masked: each query's keys all masked, the reference's and the kernels'
    weights alike over every key (no NaN), output and every gradient against float64."""
    s, z, mask = _inputs(2, 7, seed=8)
    mask[1] = 0
    check_gradients(_module(seed=7), (s, z, mask), torch.float32, DEVICE, 2)


def test_leading_dimensions_and_unbatched_input():
    mod = _module(seed=9).to(DEVICE)
    s, z, mask = (t.to(DEVICE) for t in _inputs(6, 5, seed=10))
    flat = mod(s, z, mask, impl="triton")
    folded = mod(s.view(2, 3, 5, 16), z.view(2, 3, 5, 5, 8), mask.view(2, 3, 5), impl="triton")
    torch.testing.assert_close(folded, flat.view(2, 3, 5, 16))
    torch.testing.assert_close(mod(s[5], z[5], mask[5], impl="triton"), flat[5])
    exact = mod.double()(s.double(), z.double(), mask.double(), impl="torch")
    assert_contract(mod.float()(s, z, mask, impl="triton").cpu(), exact.cpu(), torch.float32)


def test_given_bias_shared_by_the_samples():
    """A given bias (h = 2) as the diffusion's callers pass it, head major in memory and broadcast over 3 samples:
    inference reads it in place, training copies it; both as the samples' own copies give, and within the contract
    of float64."""
    mod = _module(compute_pair_bias=False, seed=11).to(DEVICE)
    s, _, mask = (t.to(DEVICE) for t in _inputs(3, 6, seed=12))
    heads = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(13)).to(DEVICE)
    shared = heads.movedim(1, -1).expand(3, 6, 6, 2)  # (3, N, N, h), strides (0, N, 1, N * N)
    owned = shared.contiguous()
    with torch.no_grad():
        torch.testing.assert_close(mod(s, shared, mask, impl="triton"), mod(s, owned, mask, impl="triton"))
    bias = shared.detach().requires_grad_()
    out = mod(s, bias, mask, impl="triton")
    out.square().sum().backward()
    assert bias.grad.shape == (3, 6, 6, 2) and torch.isfinite(bias.grad).all()
    exact = mod.double()(s.double(), owned.double(), mask.double(), impl="torch")
    assert_contract(out.detach().cpu(), exact.cpu(), torch.float32)


@pytest.mark.parametrize("target, value", nonfinite_cases(_module(), 2))
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value):
    mod = _module(seed=11)
    s, z, mask = _inputs(1, 5, seed=12)
    index = (0, 1, 2) if target == "input0" else (0, 1, 2, 3) if target == "input1" else \
        (1,) * mod.get_parameter(target).dim()
    check_nonfinite(mod, (s, z, mask), DEVICE, 2, target, index, value)


def _valid_arguments(compute_pair_bias=True):
    mod = _module(compute_pair_bias=compute_pair_bias)
    s, z, mask = _inputs(2, 4, channels=8 if compute_pair_bias else 2)
    args = dict(single_repr=s, pair_repr=z, mask=mask, query_weight=mod.proj_q.weight, query_bias=mod.proj_q.bias,
                key_weight=mod.proj_k.weight, value_weight=mod.proj_v.weight, gate_weight=mod.proj_g.weight,
                out_weight=mod.proj_o.weight, pair_norm_weight=None, pair_norm_bias=None, pair_weight=None)
    if compute_pair_bias:
        args.update(pair_norm_weight=mod.proj_z[0].weight, pair_norm_bias=mod.proj_z[0].bias,
                    pair_weight=mod.proj_z[1].weight)
    return {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


@pytest.mark.parametrize("name, value, exc", bad_arguments(_valid_arguments(), masks=("mask",),
                                                            optional=("query_bias", "pair_norm_weight",
                                                                      "pair_norm_bias", "pair_weight"),
                                                            leading="single_repr"), ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    check_bad_argument(evofuse.attention_pair_bias, _valid_arguments(), name, value, exc, num_heads=2)


@pytest.mark.parametrize("change, pattern", [
    (dict(num_heads=3), "num_heads must be a positive integer dividing the inner width 16"),
    (dict(pair_repr=torch.randn(2, 4, 5, 8)), r"pair_repr must have shape \(2, 4, 4, 8\)"),
    (dict(pair_norm_bias=None), "pair_norm_weight and pair_norm_bias must be given together"),
    (dict(pair_weight=None), "pair_norm_weight needs pair_weight"),
    (dict(precision="tf32"), "precision must be one of"), (dict(impl="cuda"), "impl / EVOFUSE_IMPL must be one of")])
def test_bad_options_are_named(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.attention_pair_bias(**{**_valid_arguments(), "num_heads": 2, **change})


def test_module_arguments_are_named():
    with pytest.raises(ValueError, match="num_heads must be a positive integer dividing c_s 16"):
        AttentionPairBias(16, 8, 3)
    with pytest.raises(ValueError, match="c_z must be an integer"):
        AttentionPairBias(16, None, 2)
    mod = _module()
    s, z, mask = _inputs(1, 4)
    with pytest.raises(ValueError, match="k_in must be None or s itself"):
        mod(s, z, mask, k_in=s.clone())
    with pytest.raises(ValueError, match="multiplicity must be a positive integer"):
        mod(s, z, mask, multiplicity=0)

"""Row attention's fused path (Triton's interpreter on CPU, the kernels on a GPU) against the float64
reference: forward, backward, conventions, input forms and bad input."""

import warnings

import pytest
import torch

import evofuse
from evofuse import MSARowAttentionWithPairBias
from evofuse.numerics import FP32_FAST_BOUND, rel_error

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
from .helpers import assert_contract, att_module, grads, random_mask

LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # the interpreter's bf16 products are not checked


def _inputs(B, S, N, D, P, mask_kind, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, S, N, D, generator=g), torch.randn(B, N, N, P, generator=g), random_mask(B, S, N, mask_kind, seed)


def _dev(t, dtype=None):
    return None if t is None else t.to(DEVICE, dtype) if dtype is not None and t.is_floating_point() else t.to(DEVICE)


@pytest.mark.parametrize("B, S, N, D, P, h", [
    (1, 1, 1, 8, 3, 1), (2, 3, 17, 24, 5, 3), (1, 2, 33, 64, 4, 4),
    pytest.param(1, 4, 97, 16, 2, 2, marks=pytest.mark.full), pytest.param(1, 2, 5, 96, 3, 1, marks=pytest.mark.full),
])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_forward_shapes(B, S, N, D, P, h, dtype):
    mod = att_module(D, P, h, seed=1)
    x, z, mask = _inputs(B, S, N, D, P, "rows", 2)
    exact = mod.double()(x.double(), z.double(), mask.double(), impl="torch")
    out = mod.to(DEVICE, dtype)(_dev(x, dtype), _dev(z, dtype), _dev(mask), impl="triton").cpu()
    lowp = None if dtype == torch.float32 else mod.cpu()(x.to(dtype), z.to(dtype), mask, impl="torch")
    ref32 = mod.cpu()(x, z, mask, impl="torch") if dtype == torch.float32 else None
    assert_contract(out, exact, dtype, lowp_ref=lowp, ref_fp32=ref32)


@pytest.mark.parametrize("mask_kind", ["random", "rows", "ones", "none", "empty"])
def test_forward_masks(mask_kind):
    mod = att_module(16, 4, 2, seed=3)
    x, z, mask = _inputs(2, 3, 13, 16, 4, mask_kind, 4)
    exact = mod.double()(x.double(), z.double(), None if mask is None else mask.double(), impl="torch")
    out = mod.float().to(DEVICE)(_dev(x), _dev(z), _dev(mask), impl="triton").cpu()
    assert_contract(out, exact, torch.float32)


def test_fully_masked_row_is_the_mean_of_the_values_never_nan():
    mod = att_module(8, 2, 2, seed=5).to(DEVICE)
    x, z, _ = _inputs(1, 2, 6, 8, 2, "none", 6)
    mask = torch.zeros(1, 2, 6)
    out = mod(_dev(x), _dev(z), _dev(mask), impl="triton")
    assert not out.isnan().any()
    assert_contract(out.cpu(), mod.double().cpu()(x.double(), z.double(), mask.double(), impl="torch"), torch.float32)


def test_fast_precision():
    mod = att_module(32, 4, 2, seed=7)
    x, z, mask = _inputs(1, 3, 21, 32, 4, "random", 8)
    exact = mod.double()(x.double(), z.double(), mask.double(), impl="torch")
    mod = att_module(32, 4, 2, seed=7, precision="fast").to(DEVICE)
    assert rel_error(mod(_dev(x), _dev(z), _dev(mask), impl="triton").cpu(), exact) <= FP32_FAST_BOUND


@pytest.mark.parametrize("mask_kind", ["rows", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients(mask_kind, dtype):
    mod = att_module(24, 5, 3, seed=9)
    x, z, mask = _inputs(2, 3, 11, 24, 5, mask_kind, 10)
    check_gradients(mod, (x, z, mask), dtype, DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_openfold_variant(dtype):
    """OpenFold's form: an inner width heads x head_dim unlike msa_dim, no q/k/v biases, the pair layer-normed
    before its projection (fused), the additive mask (a fully masked MSA row sends gradient to q, k and the pair
    bias): output and every gradient, the pair LayerNorm's included."""
    mod = att_module(20, 6, 3, seed=13, head_dim=8, qkv_bias=False, pair_layer_norm=True, mask_mode="add")
    assert mod.query.weight.shape == (24, 20) and mod.query.bias is None and mod.pair_norm is not None
    x, z, mask = _inputs(2, 3, 11, 20, 6, "rows", 14)
    got = check_gradients(mod, (x, z, mask), dtype, DEVICE)
    assert {"pair_norm.weight", "pair_norm.bias"} <= got.keys() and "query.bias" not in got


def test_mask_forms_and_strided_inputs():
    mod = att_module(16, 4, 2, seed=11).to(DEVICE)
    x = torch.randn(2, 9, 3, 32, device=DEVICE)[..., ::2].transpose(1, 2)  # (2, 3, 9, 16), not contiguous
    z = torch.randn(2, 9, 9, 4, device=DEVICE).transpose(1, 2)
    mask = random_mask(2, 3, 9, "random", 12).to(DEVICE)
    outs = [mod(x, z, m, impl="triton") for m in (mask, mask.bool(), mask.to(torch.int64))]
    for other in outs[1:]:  # one function; each mask dtype is its own compiled kernel
        torch.testing.assert_close(other, outs[0], rtol=1e-6, atol=1e-6)
    assert_contract(outs[0], mod.double()(x.double(), z.double(), mask.double(), impl="torch"), torch.float32)
    row = mask[:, :1].expand(2, 3, 9)  # a broadcast mask
    mod.float()
    assert_contract(mod(x, z, row, impl="triton"), mod.double()(x.double(), z.double(), row.double(), impl="torch"),
                    torch.float32)


def test_deterministic():
    mod = att_module(16, 4, 2, seed=13).to(DEVICE)
    x, z, mask = _inputs(1, 4, 10, 16, 4, "random", 14)
    first = grads(mod, (_dev(x), _dev(z), _dev(mask)), "triton")
    second = grads(mod, (_dev(x), _dev(z), _dev(mask)), "triton")
    assert torch.equal(first[0], second[0])
    assert all(torch.equal(first[1][k], second[1][k]) for k in first[1])


def test_pair_gradient_over_split_rows(monkeypatch):
    """The pair bias's gradient summed over parts of the MSA rows (few tiles: `dz_splits` > 1 here) is the one
    summed over all rows in one program, to float32 rounding."""
    from evofuse.stages.attention import core as op

    mod = att_module(16, 4, 2, seed=17).to(DEVICE)
    x, z, mask = _inputs(1, 7, 10, 16, 4, "random", 18)
    assert op.dz_splits(2, 7, torch.device(DEVICE)) > 1
    split = grads(mod, (_dev(x), _dev(z), _dev(mask)), "triton")[1]
    monkeypatch.setattr(op, "dz_splits", lambda *args: 1)
    whole = grads(mod, (_dev(x), _dev(z), _dev(mask)), "triton")[1]
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], rtol=1e-5, atol=1e-6)


def test_dropout_in_training_runs_the_reference(monkeypatch):
    monkeypatch.setattr(evofuse._dispatch, "_warned", set())
    mod = att_module(8, 2, 2, seed=15, dropout=0.5).to(DEVICE)
    x, z, _ = _inputs(1, 2, 4, 8, 2, "none", 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod.train()(_dev(x), _dev(z), None, impl="triton")
    assert any("dropout" in str(w.message) for w in caught)
    mod.eval()
    torch.testing.assert_close(mod(_dev(x), _dev(z), None, impl="triton"), mod(_dev(x), _dev(z), None, impl="torch"),
                               rtol=1e-4, atol=1e-5)


def test_leading_dimensions_and_unbatched_input():
    mod = att_module(8, 3, 2, seed=5).to(DEVICE)
    x, z = torch.randn(2, 2, 3, 5, 8, device=DEVICE), torch.randn(2, 2, 5, 5, 3, device=DEVICE)
    mask = random_mask(4, 3, 5, "rows", 2).to(DEVICE).view(2, 2, 3, 5)
    flat = mod(x.view(4, 3, 5, 8), z.view(4, 5, 5, 3), mask.view(4, 3, 5), impl="triton")
    torch.testing.assert_close(mod(x, z, mask, impl="triton"), flat.view(2, 2, 3, 5, 8))
    torch.testing.assert_close(mod(x[1, 0], z[1, 0], mask[1, 0], impl="triton"), flat[2])
    with pytest.raises(ValueError, match=r"pair_repr must have the leading dimensions \(2, 2\)"):
        mod(x, z[0], mask)


def _contract_case(B, S, N, form, layout, seed, D=16, P=5):
    """(leaves, views): an MSA (B, S, N, D), a pair (B, N, N, P) and a mask in `form` with a fully masked row and
    residue, laid out as `layout` (broadcast: one MSA row s for all, one pair for every batch element)."""
    x, z, mask = _inputs(B, S, N, D, P, "rows", seed)
    return layout_case((x, z, mask_form(mask, form)), layout, [1, 0, 1])


@pytest.mark.parametrize("variant, dtype, layout", [
    ("seed", torch.float32, "strided"),
    ("openfold", LOW, "plain"),
    pytest.param("openfold", torch.float32, "broadcast", marks=pytest.mark.full),
    pytest.param("seed", LOW, "strided", marks=pytest.mark.full)])
def test_each_gradient_alone(variant, dtype, layout):
    """Every gradient, then each input's and parameter's with no other needing one (each branch of the backward),
    against float64 at N = 17 (past one block of the interpreter's tiles): the seed's module, and OpenFold's form
    (inner width unlike msa_dim, no q/k/v biases, the pair layer-normed, the additive mask)."""
    kw = dict(head_dim=8, qkv_bias=False, pair_layer_norm=True, mask_mode="add") if variant == "openfold" else {}
    mod = att_module(16, 5, 2, seed=3, **kw)
    inputs, views = _contract_case(1, 2, 17, "float", layout, 4)
    check_gradients(mod, inputs, dtype, DEVICE, 2, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("N, form, layout", AWKWARD_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients_at_awkward_shapes(N, form, layout, dtype):
    """Output and every gradient at N = 1, 17 (97: full tier, one batch element: its layout is plain), with float,
    bool and int masks, strided inputs and weights, broadcast (stride-0) inputs; three heads of 8."""
    mod = att_module(24, 5, 3, seed=5, pair_layer_norm=N == 17, mask_mode="add" if form == "int" else "replace")
    inputs, views = _contract_case(1 if N == 97 else 2, 3, N, form, layout, 6, D=24)
    check_gradients(mod, inputs, dtype, DEVICE, 2, views, strided_weights=layout == "strided")


@pytest.mark.parametrize("target, value", nonfinite_cases(att_module(8, 3, 2, pair_layer_norm=True), 2))
@pytest.mark.parametrize("mask_mode", ["replace", "add"])
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value, mask_mode):
    """NaN in any input or parameter, Inf in the MSA or the pair: NaN and Inf in the output and every gradient where
    the reference has them (a fully masked MSA row and a masked residue among them); with the additive mask a masked
    key's NaN logit stays NaN, as the models' logit - 1e9."""
    mod = att_module(8, 3, 2, seed=2, pair_layer_norm=True, mask_mode=mask_mode)
    x, z, mask = _inputs(1, 3, 5, 8, 3, "rows", 3)
    index = {"input0": (0, 0, 2, 3), "input1": (0, 1, 2, 1)}.get(target, (1,) * mod.get_parameter(target).dim()
                                                                 if target in dict(mod.named_parameters()) else None)
    check_nonfinite(mod, (x, z, mask), DEVICE, 2, target, index, value)


def _valid_arguments():
    mod = att_module(8, 3, 2, pair_layer_norm=True)
    names = {"pair_norm.weight": "pair_norm_weight", "pair_norm.bias": "pair_norm_bias"}
    return dict(msa_repr=torch.randn(2, 3, 4, 8), pair_repr=torch.randn(2, 4, 4, 3), msa_mask=torch.ones(2, 3, 4),
                **{names.get(name, name.replace(".", "_")): p.detach() for name, p in mod.named_parameters()})


OPTIONAL = ("query_bias", "key_bias", "value_bias", "gate_bias", "out_proj_bias", "pair_bias_bias", "pair_norm_weight",
            "pair_norm_bias")  # (the pair LayerNorm's two: together, a case of its own below)


@pytest.mark.parametrize("name, value, exc", bad_arguments(_valid_arguments(), masks=("msa_mask",), optional=OPTIONAL),
                         ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    """Each tensor argument not a tensor, on another device, of a wrong dtype, rank or last dimension, or None where
    it is required: a ValueError or TypeError that names it."""
    check_bad_argument(evofuse.msa_row_attention, _valid_arguments(), name, value, exc, num_heads=2)


@pytest.mark.parametrize("options, pattern", [
    (dict(num_heads=3), "num_heads must be a positive integer dividing the inner width 8"),
    (dict(num_heads=0), "num_heads must be a positive integer"), (dict(num_heads="2"), "num_heads must be a positive"),
    (dict(num_heads=2, mask_mode="multiply"), "mask_mode must be one of"),
    (dict(num_heads=2, precision="tf32"), "precision must be one of"),
    (dict(num_heads=2, pair_norm_bias=None), "pair_norm_weight and pair_norm_bias must be given together"),
    (dict(num_heads=2, impl="cuda"), "impl / EVOFUSE_IMPL must be one of")])
def test_bad_options_are_named(options, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.msa_row_attention(**{**_valid_arguments(), **options})


@pytest.mark.parametrize("x, z, mask, pattern", [
    (torch.randn(2, 3, 4), torch.randn(2, 4, 4, 3), torch.ones(2, 3, 4), r"msa_repr must have shape"),
    (torch.randn(2, 3, 4, 8), torch.randn(1, 4, 4, 3), torch.ones(2, 3, 4), r"pair_repr must have shape"),
    (torch.randn(2, 3, 4, 8), torch.randn(2, 5, 5, 3), torch.ones(2, 3, 4), r"pair_repr must have shape"),
    (torch.randn(2, 3, 4, 8), torch.randn(2, 4, 4, 3), torch.ones(3, 3, 4), r"msa_mask must have shape \(B, S, N\)"),
])
def test_module_names_bad_inputs(x, z, mask, pattern):
    with pytest.raises(ValueError, match=pattern):
        MSARowAttentionWithPairBias(8, 3, 2)(x, z, mask)


@pytest.mark.parametrize("args, options, pattern", [
    ((10, 3, 4), {}, "divisible by num_heads"), ((8, 3, 2), dict(mask_mode="multiply"), "mask_mode must be one of"),
    ((8, 3, 2), dict(precision="tf32"), "precision must be one of"), ((8, 3, 2), dict(impl="cuda"), "impl must be")])
def test_module_names_bad_options(args, options, pattern):
    """A module's options are checked where it is built."""
    with pytest.raises(ValueError, match=pattern):
        MSARowAttentionWithPairBias(*args, **options)

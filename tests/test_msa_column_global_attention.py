"""MSA global column attention (`evofuse.MSAColumnGlobalAttention`, `evofuse.msa_column_global_attention`) against
OpenFold's module (the tests' `openfold` package) and the float64 reference: masks, biases, input forms and bad
input."""

import sys
from pathlib import Path

import pytest
import torch

import evofuse
from evofuse import MSAColumnGlobalAttention

from .conftest import DEVICE
from .contract import (
    AWKWARD_CASES,
    argument_id,
    bad_arguments,
    check_bad_argument,
    check_gradients,
    check_msa_leading_dimensions,
    check_nonfinite,
    layout_case,
    mask_form,
    nonfinite_cases,
)
from .helpers import assert_contract, masked_msa, randomize

LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # the interpreter's bf16 products are not checked


def _module(c_in, d, h, seed=0, **kw):
    return randomize(MSAColumnGlobalAttention(c_in, d, h, **kw), seed)


_inputs = masked_msa  # (B, S, N, D, seed, fully_masked=True) -> (m, mask)


def _arguments(mod, **inputs) -> dict:
    """The functional form's arguments from a module's parameters."""
    att = mod.global_attention
    names = {"q": "query", "k": "key", "v": "value", "g": "gate", "o": "out"}
    args = dict(inputs, layer_norm_weight=mod.layer_norm_m.weight.detach(),
                layer_norm_bias=mod.layer_norm_m.bias.detach())
    for short, name in names.items():
        linear = getattr(att, f"linear_{short}")
        args[f"{name}_weight"] = linear.weight.detach()
        args[f"{name}_bias"] = None if linear.bias is None else linear.bias.detach()
    return args


@pytest.fixture
def openfold(monkeypatch):
    """The tests' `openfold` package importable."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "openfold_modules"))
    from openfold.model import msa

    yield msa
    for name in [n for n in sys.modules if n == "openfold" or n.startswith("openfold.")]:
        del sys.modules[name]


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("eps", [1e-10, 1e-8])
def test_matches_openfold_module(openfold, impl, eps):
    """OpenFold's module in float32, as the models run it (the extra-MSA stack's 8 heads of 8), and evofuse's with its
    state_dict, on a mask with a fully masked column, outputs and every gradient; OpenFold's switches in the call."""
    theirs = randomize(openfold.MSAColumnGlobalAttention(16, 8, 8, eps=eps), 1)
    ours = MSAColumnGlobalAttention(16, 8, 8, eps=eps)
    ours.load_state_dict(theirs.state_dict())
    m, mask = _inputs(2, 7, 9, 16, 2)
    grad = torch.randn(2, 7, 9, 16, generator=torch.Generator().manual_seed(3))
    m_theirs = m.clone().requires_grad_()
    expected = theirs(m_theirs, mask)
    expected.backward(grad)
    ours, m_ours = ours.to(DEVICE), m.to(DEVICE).requires_grad_()
    out = ours(m_ours, mask.to(DEVICE), chunk_size=4, use_lma=False, impl=impl)
    out.backward(grad.to(DEVICE))
    torch.testing.assert_close(out.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m_ours.grad.cpu(), m_theirs.grad, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5, msg=name)


def test_no_mask_is_all_rows(openfold):
    theirs = randomize(openfold.MSAColumnGlobalAttention(8, 4, 2), 1)
    ours = MSAColumnGlobalAttention(8, 4, 2).to(DEVICE)
    ours.load_state_dict(theirs.state_dict())
    m, _ = _inputs(1, 5, 6, 8, 2)
    torch.testing.assert_close(ours(m.to(DEVICE), impl="triton").cpu(), theirs(m), rtol=1e-5, atol=1e-5)


def _contract_case(B, N, form, layout, seed):
    m, mask = _inputs(B, 6, N, 8, seed)
    return layout_case((m, mask_form(mask, form)), layout, [0, 0])


def _with_every_bias(mod: MSAColumnGlobalAttention, seed: int, linears=("q", "v")) -> MSAColumnGlobalAttention:
    """The module with biases on `linears` too (the functional form takes them; the query's is added after its mean;
    the key's gradient is exactly 0, a shift of every logit of a column, and left to the forward's check)."""
    att = mod.global_attention
    g = torch.Generator().manual_seed(seed)
    for linear in (getattr(att, f"linear_{name}") for name in linears):
        linear.bias = torch.nn.Parameter(torch.randn(linear.out_features, generator=g) * 0.5)
    return mod


@pytest.mark.parametrize("dtype, layout, bias", [
    (torch.float32, "strided", "every"), (LOW, "plain", "openfold"), (torch.float32, "plain", "none"),
    pytest.param(torch.float32, "broadcast", "openfold", marks=pytest.mark.full)])
def test_each_gradient_alone(dtype, layout, bias):
    """Every gradient, then each input's and parameter's alone (each branch of the backward), against float64: with
    OpenFold's biases (gate and output), with none, and with every projection's."""
    mod = _module(8, 4, 2, seed=3, gate_and_output_bias=bias != "none")
    if bias == "every":
        mod = _with_every_bias(mod, 4)
    inputs, views = _contract_case(1 if layout != "broadcast" else 2, 17, "float", layout, 4)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("N, form, layout, dtype", [
    pytest.param(*case.values, dtype, marks=case.marks) if hasattr(case, "values") else pytest.param(*case, dtype)
    for case in AWKWARD_CASES for dtype in (torch.float32, LOW)])
def test_gradients_at_awkward_shapes(N, form, layout, dtype):
    """Output and every gradient at the contract's awkward residue counts (the columns: their rows are the 6 MSA
    rows), masks and layouts."""
    mod = _module(8, 4, 2, seed=5)
    inputs, views = _contract_case(2, N, form, layout, 6)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided")


def test_key_bias():
    """A key's bias shifts every logit of a column by q . b_k: the output as the reference's."""
    mod = _with_every_bias(_module(8, 4, 2, seed=3), 4, linears=("q", "k", "v"))
    m, mask = _inputs(1, 6, 17, 8, 4)
    exact = mod.double()(m.double(), mask.double(), impl="torch")
    mod = mod.float().to(DEVICE)
    assert_contract(mod(m.to(DEVICE), mask.to(DEVICE), impl="triton").cpu(), exact, torch.float32)


@pytest.mark.parametrize("S", [1, 97, 300])
def test_msa_depths(S):
    """One MSA row (each column's query its only row's), a deep odd one, and one of three blocks of the columns'
    kernel (128 rows a step here: the mean and the online softmax across blocks), float32."""
    mod = _module(8, 4, 2, seed=7)
    m, mask = _inputs(1, S, 5, 8, 8, fully_masked=False)
    check_gradients(mod, (m, mask), torch.float32, DEVICE, 1)


def test_leading_dimensions_and_unbatched_input():
    check_msa_leading_dimensions(_module(8, 4, 2, seed=7), *_inputs(6, 4, 5, 8, 8), DEVICE)


@pytest.mark.parametrize("target, value", nonfinite_cases(_module(8, 4, 2), 1))
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value):
    mod = _module(8, 4, 2, seed=2)
    m, mask = _inputs(1, 4, 5, 8, 3)
    index = (0, 1, 2, 3) if target == "input0" else (1,) * mod.get_parameter(target).dim()
    check_nonfinite(mod, (m, mask), DEVICE, 1, target, index, value)


def _valid_arguments():
    return _arguments(_module(8, 4, 2), msa_repr=torch.randn(2, 3, 4, 8), msa_mask=torch.ones(2, 3, 4))


@pytest.mark.parametrize("name, value, exc", bad_arguments(
    _valid_arguments(), masks=("msa_mask",), optional=("query_bias", "key_bias", "value_bias", "gate_bias", "out_bias"),
    leading="msa_repr"), ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    check_bad_argument(evofuse.msa_column_global_attention, _valid_arguments(), name, value, exc, num_heads=2)


@pytest.mark.parametrize("change, pattern", [
    (dict(num_heads=3), r"num_heads must be a positive integer with num_heads \* 4"),
    (dict(eps=0.0), "eps must be > 0"),
    (dict(precision="tf32"), "precision must be one of"), (dict(impl="cuda"), "impl / EVOFUSE_IMPL must be one of")])
def test_bad_options_are_named(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.msa_column_global_attention(**{**_valid_arguments(), "num_heads": 2, **change})
    with pytest.raises(ValueError, match="no_heads must be a positive integer"):
        MSAColumnGlobalAttention(8, 4, 0)

"""MSA column attention (`evofuse.MSAColumnAttention`, `evofuse.msa_column_attention`) against OpenFold's module (the
tests' `openfold` package) and the float64 reference: masks, input forms and bad input."""

import sys
from pathlib import Path

import pytest
import torch

import evofuse
from evofuse import MSAColumnAttention

from .conftest import DEVICE
from .contract import (
    AWKWARD_CASES,
    argument_id,
    bad_arguments,
    check_bad_argument,
    check_gradients,
    check_msa_leading_dimensions,
    check_nonfinite,
    gated_attention_arguments,
    layout_case,
    mask_form,
    nonfinite_cases,
)
from .helpers import masked_msa, randomize

LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # the interpreter's bf16 products are not checked


def _module(c_m, d, h, seed=0, **kw):
    return randomize(MSAColumnAttention(c_m, d, h, **kw), seed)


_inputs = masked_msa  # (B, S, N, D, seed, fully_masked=True) -> (m, mask)


@pytest.fixture
def openfold(monkeypatch):
    """The tests' `openfold` package importable."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "openfold_modules"))
    from openfold.model import msa

    yield msa
    for name in [n for n in sys.modules if n == "openfold" or n.startswith("openfold.")]:
        del sys.modules[name]


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_matches_openfold_module(openfold, impl):
    """OpenFold's module in float32, as the models run it, and evofuse's with its state_dict, on a mask with a fully
    masked column; OpenFold's switches in the call."""
    theirs = randomize(openfold.MSAColumnAttention(12, 8, 3), 1)
    ours = MSAColumnAttention(12, 8, 3)
    ours.load_state_dict(theirs.state_dict())
    m, mask = _inputs(2, 7, 9, 12, 2)
    expected = theirs(m, mask)
    ours, m, mask = ours.to(DEVICE), m.to(DEVICE), mask.to(DEVICE)
    torch.testing.assert_close(ours(m, mask, chunk_size=4, use_lma=False, impl=impl).cpu(), expected, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("inf", [1e4])
def test_smaller_inf_runs_the_reference_with_a_warning(openfold, inf, monkeypatch):
    monkeypatch.setattr(evofuse._dispatch, "_warned", set())
    theirs = randomize(openfold.MSAColumnAttention(12, 8, 3, inf=inf), 1).double()
    ours = MSAColumnAttention(12, 8, 3, inf=inf).double()
    ours.load_state_dict(theirs.state_dict())
    m, mask = (t.double() for t in _inputs(2, 5, 6, 12, 2))
    with pytest.warns(RuntimeWarning, match=f"inf={inf}"):
        out = ours.to(DEVICE)(m.to(DEVICE), mask.to(DEVICE), impl="triton")
    torch.testing.assert_close(out.cpu(), theirs(m, mask), rtol=1e-10, atol=1e-12)


def _contract_case(B, N, form, layout, seed):
    m, mask = _inputs(B, 6, N, 8, seed)
    return layout_case((m, mask_form(mask, form)), layout, [0, 0])


@pytest.mark.parametrize("dtype, layout, bias", [
    (torch.float32, "strided", True), (LOW, "plain", False),
    pytest.param(torch.float32, "broadcast", True, marks=pytest.mark.full)])
def test_each_gradient_alone(dtype, layout, bias):
    """Every gradient, then each input's and parameter's alone (each branch of the backward), against float64."""
    mod = _module(8, 4, 2, seed=3, gate_and_output_bias=bias)
    inputs, views = _contract_case(1 if layout != "broadcast" else 2, 17, "float", layout, 4)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("N, form, layout, dtype", [
    pytest.param(*case.values, dtype, marks=case.marks) if hasattr(case, "values") else pytest.param(*case, dtype)
    for case in AWKWARD_CASES for dtype in (torch.float32, LOW)])
def test_gradients_at_awkward_shapes(N, form, layout, dtype):
    """Output and every gradient at the contract's awkward residue counts (here the columns: the keys are the 6 MSA
    rows), masks and layouts."""
    mod = _module(8, 4, 2, seed=5)
    inputs, views = _contract_case(2, N, form, layout, 6)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided")


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_one_msa_row(dtype):
    """S = 1: one key a column (its softmax weight 1; q's and k's gradients exactly 0)."""
    mod = _module(8, 4, 2, seed=7)
    g = torch.Generator().manual_seed(8)
    m, mask = torch.randn(2, 1, 9, 8, generator=g), torch.ones(2, 1, 9)
    check_gradients(mod, (m, mask), dtype, DEVICE, 1)


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
    return gated_attention_arguments(_module(8, 4, 2), "_msa_att.", "layer_norm_m", msa_repr=torch.randn(2, 3, 4, 8),
                                     msa_mask=torch.ones(2, 3, 4))


@pytest.mark.parametrize("name, value, exc", bad_arguments(_valid_arguments(), masks=("msa_mask",),
                                                            optional=("gate_bias", "out_bias"), leading="msa_repr"),
                         ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    check_bad_argument(evofuse.msa_column_attention, _valid_arguments(), name, value, exc, num_heads=2)


@pytest.mark.parametrize("change, pattern", [
    (dict(num_heads=3), "num_heads must be a positive integer dividing the inner width 8"),
    (dict(precision="tf32"), "precision must be one of"), (dict(impl="cuda"), "impl / EVOFUSE_IMPL must be one of")])
def test_bad_options_are_named(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.msa_column_attention(**{**_valid_arguments(), "num_heads": 2, **change})
    with pytest.raises(ValueError, match="no_heads must be a positive integer"):
        MSAColumnAttention(8, 4, 0)

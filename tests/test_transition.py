"""The transition (`evofuse.Transition`, `evofuse.transition`) against each family's own module (Boltz 2.2.1,
Protenix 2.0.0, OpenFold3 0.5.0, OpenFold's as `tests/openfold_modules` writes it) and the float64 reference: SwiGLU
and ReLU, masks, input forms, the inference call's blocks of rows and bad input."""

import importlib.util
import os
from pathlib import Path

import pytest
import torch

import evofuse
from evofuse import Transition

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


def _module(dim=8, hidden=12, activation="swiglu", seed=0, **kw):
    mod = randomize(Transition(dim, hidden, activation=activation, **kw), seed)
    with torch.no_grad():  # (a LayerNorm weight about 1, as trained ones are)
        mod.norm.weight.add_(1)
    return mod


def _inputs(lead, dim, seed):
    """Rows x (*lead, dim) and a mask of x's leading shape with ~20% zeros."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*lead, dim, generator=g), (torch.rand(lead, generator=g) > 0.2).float()


FAMILY_PACKAGES = {"boltz": ("boltz", "einops"), "protenix": ("protenix", "optree", "rdkit", "scipy"),
                   "openfold3-swiglu": ("openfold3", "ml_collections"), "openfold3-relu": ("openfold3", "ml_collections"),
                   "openfold": ()}


def _family_module(family, monkeypatch):
    """(the family's transition at c 16, n 2, its parameters' names in evofuse's, its activation, whether its call takes
    the mask); skips where the family is not installed."""
    missing = [name for name in FAMILY_PACKAGES[family] if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{family}: {', '.join(missing)} not installed")
    if family == "boltz":
        from boltz.model.layers.transition import Transition as BoltzTransition

        return BoltzTransition(16, 32), {}, "swiglu", False
    if family == "protenix":
        os.environ.setdefault("LAYERNORM_TYPE", "torch")  # Protenix's own LayerNorm builds a CUDA extension otherwise
        from protenix.model.modules.primitives import Transition as ProtenixTransition

        return ProtenixTransition(16, 2), {"layernorm1": "norm", "linear_no_bias_a": "fc1",
                                           "linear_no_bias_b": "fc2", "linear_no_bias": "fc3"}, "swiglu", False
    if family.startswith("openfold3"):
        from openfold3.core.model.layers.transition import ReLUTransition, SwiGLUTransition

        if family.endswith("swiglu"):
            return SwiGLUTransition(16, 2), {"layer_norm": "norm", "swiglu.linear_a": "fc1", "swiglu.linear_b": "fc2",
                                             "linear_out": "fc3"}, "swiglu", True
        return ReLUTransition(16, 2), {"layer_norm": "norm", "transition_mlp.layers.0.0": "fc1",
                                       "transition_mlp.linear_out": "fc3"}, "relu", True
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "openfold_modules"))  # (OpenFold's, as the tests write it)
    from openfold.model.pair_transition import PairTransition

    return PairTransition(16, 2), {"layer_norm": "norm", "linear_1": "fc1", "linear_2": "fc3"}, "relu", True


@pytest.mark.parametrize("family", list(FAMILY_PACKAGES))
@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_matches_family_module(family, impl, monkeypatch):
    """Each family's transition in float32 and evofuse's with its parameters (renamed to evofuse's), with the
    family's mask where it takes one."""
    torch.manual_seed(0)
    theirs, names, activation, masked = _family_module(family, monkeypatch)
    theirs = randomize(theirs, 1)
    state = {}
    for key, value in theirs.state_dict().items():
        prefix, _, leaf = key.rpartition(".")
        state[f"{names.get(prefix, prefix)}.{leaf}"] = value
    ours = Transition(16, 32, activation=activation, bias="fc1.bias" in state)
    ours.load_state_dict(state)
    x, mask = _inputs((2, 5, 3), 16, 2)
    expected = theirs(x, mask) if masked else theirs(x)
    ours, x, mask = ours.to(DEVICE), x.to(DEVICE), mask.to(DEVICE)
    got = ours(x, mask if masked else None, impl=impl)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def _contract_case(rows, form, layout, seed):
    x, mask = _inputs((2, rows, 3), 8, seed)
    return layout_case((x, mask_form(mask, form)), layout, [0, 0])


@pytest.mark.parametrize("activation, dtype, layout, bias", [
    ("swiglu", torch.float32, "strided", True), ("relu", LOW, "plain", False),
    pytest.param("relu", torch.float32, "broadcast", True, marks=pytest.mark.full)])
def test_each_gradient_alone(activation, dtype, layout, bias):
    """Every gradient, then each input's and parameter's alone (each branch of the backward), against float64."""
    mod = _module(activation=activation, seed=3, bias=bias)
    inputs, views = _contract_case(17, "float", layout, 4)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("rows, form, layout, dtype", [
    pytest.param(*case.values, dtype, marks=case.marks) if hasattr(case, "values") else pytest.param(*case, dtype)
    for case in AWKWARD_CASES for dtype in (torch.float32, LOW)])
def test_gradients_at_awkward_shapes(rows, form, layout, dtype):
    """Output and every gradient at the contract's awkward shapes, masks and layouts (ReLU at 17 rows); the hidden
    width 33 and input width 24 past one tile of the interpreter's and a chunk of its LayerNorm's."""
    mod = randomize(Transition(24, 33, activation="relu" if rows == 17 else "swiglu", bias=True), 5)
    x, mask = _inputs((2, rows, 3), 24, 6)
    inputs, views = layout_case((x, mask_form(mask, form)), layout, [0, 0])
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided")


def test_leading_dimensions_unbatched_and_fully_masked_rows():
    mod = _module(seed=7).to(DEVICE)
    x, mask = _inputs((6, 5), 8, 8)
    mask[1] = 0  # (a fully masked row of rows)
    x, mask = x.to(DEVICE), mask.to(DEVICE)
    flat = mod(x, mask, impl="triton")
    torch.testing.assert_close(mod(x.view(2, 3, 5, 8), mask.view(2, 3, 5), impl="triton"), flat.view(2, 3, 5, 8))
    torch.testing.assert_close(mod(x[2, 3], mask[2, 3], impl="triton"), flat[2, 3])
    assert flat[1].abs().max() == 0
    exact = mod.double()(x.double(), mask.double(), impl="torch")
    assert_contract(mod.float()(x, mask, impl="triton").cpu(), exact.cpu(), torch.float32)


@pytest.mark.parametrize("train", [False, True])
def test_rows_in_blocks_equal_one_block(train, monkeypatch):
    """The forward takes blocks of rows when their hidden rows pass BLOCK_BYTES (here 3 rows of 12 float32 channels,
    so 4 blocks of 10 rows): the output, and the training call's gradients, are those of one block (to the rounding of
    the products, which the CPU's library blocks differently for fewer rows: the weights' gradients, sums over the
    rows, differ by float32's rounding of their terms)."""
    from evofuse.ops.transition import op

    mod = _module(seed=9, bias=True).to(DEVICE)
    x, mask = (t.to(DEVICE) for t in _inputs((2, 5), 8, 10))

    def step():
        leaf = x.clone().requires_grad_(train)
        mod.zero_grad()
        with torch.set_grad_enabled(train):
            out = mod(leaf, mask, impl="triton")
        if train:
            out.square().sum().backward()
        return [out.detach()] + ([leaf.grad] + [p.grad for p in mod.parameters()] if train else [])

    whole = step()
    monkeypatch.setattr(op, "BLOCK_BYTES", 3 * 12 * 4)
    for got, want in zip(step(), whole):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.fixture
def whole_row_tiles(monkeypatch):
    """`layer_norm_glu` takes one whole-row tile (its rows normalized once, then ROW_STEPS blocks of outputs): 16 rows,
    16 outputs a step, 2 steps, a chunk of 64 channels (the GPU's: the first fitting whole-row tile)."""
    import triton

    from evofuse.stages import layer_norm_glu

    from .helpers import rebuild_kernels

    if DEVICE == "cpu":
        tile = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 64, "ROW_STEPS": 2}, num_warps=1, num_stages=1)
    else:
        tile = next(c for c in layer_norm_glu.ROW_CONFIGS if c.kwargs["BLOCK_D"] == 64)
    monkeypatch.setattr(layer_norm_glu, "_prune", lambda configs, named_args, **kwargs: [tile])
    rebuild_kernels()
    yield
    rebuild_kernels()


@pytest.mark.parametrize("activation, dtype", [("swiglu", torch.float32), ("relu", torch.float32), ("swiglu", LOW)])
def test_whole_row_tiles(activation, dtype, whole_row_tiles):
    """The forward's whole-row tiles: rows of 40 channels (one chunk), hidden 40 (three blocks of 16, the last part
    padding: a program of two steps, then one of one), the output and every gradient against float64."""
    mod = _module(40, 40, activation, seed=11, bias=activation == "relu")
    x, mask = _inputs((2, 3, 11), 40, 12)
    check_gradients(mod, (x, mask), dtype, DEVICE, 1)


def test_whole_row_tiles_in_triangle_multiplication(whole_row_tiles):
    """Triangle multiplication's gated projections (channel planes out) through the whole-row tiles, float32."""
    from evofuse import TriangleMultiplication

    mod = randomize(TriangleMultiplication(24, 20), 13)
    g = torch.Generator().manual_seed(14)
    z, mask = torch.randn(1, 9, 9, 24, generator=g), (torch.rand(1, 9, 9, generator=g) > 0.2).float()
    check_gradients(mod, (z, mask), torch.float32, DEVICE, 1)


@pytest.mark.parametrize("target, value", nonfinite_cases(_module(bias=True), 1))
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value):
    mod = _module(seed=2, bias=True)
    x, mask = _inputs((1, 5), 8, 3)
    index = (0, 1, 2) if target == "input0" else (1,) * mod.get_parameter(target).dim()
    check_nonfinite(mod, (x, mask), DEVICE, 1, target, index, value)


def _valid_arguments():
    mod = _module(bias=True)
    names = {"norm": "layer_norm", "fc1": "a", "fc2": "b", "fc3": "out"}
    return dict(x=torch.randn(2, 4, 8), mask=torch.ones(2, 4),
                **{f"{names[n.split('.')[0]]}_{n.split('.')[1]}": p.detach() for n, p in mod.named_parameters()})


def _bad_arguments():
    """`contract.bad_arguments` but x's wrong rank: x of any rank >= 1 is valid (a scalar: `test_bad_options_...`)."""
    return [(name, value, exc) for name, value, exc in bad_arguments(
        _valid_arguments(), masks=("mask",), optional=("a_bias", "b_bias", "out_bias"), leading="x")
        if not (name == "x" and isinstance(value, torch.Tensor) and value.dtype == torch.float32
                and value.device.type == "cpu" and value.shape[-1] == 8)]


@pytest.mark.parametrize("name, value, exc", _bad_arguments(), ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    check_bad_argument(evofuse.transition, _valid_arguments(), name, value, exc)


@pytest.mark.parametrize("change, pattern", [
    (dict(activation="gelu"), "activation must be one of"), (dict(activation="relu"), "b_weight and b_bias must be None"),
    (dict(precision="tf32"), "precision must be one of"), (dict(impl="cuda"), "impl / EVOFUSE_IMPL must be one of"),
    (dict(x=torch.tensor(1.0)), "x must have shape")])
def test_bad_options_are_named(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.transition(**{**_valid_arguments(), **change})
    with pytest.raises(ValueError, match="activation must be one of"):
        Transition(8, activation="gelu")

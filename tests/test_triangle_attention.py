"""Triangle attention (`evofuse.TriangleAttention`, `evofuse.triangle_attention`) against OpenFold's module (the tests'
`openfold` package) and the float64 reference: starting and ending node, masks, input forms and bad input."""

import sys
from pathlib import Path

import pytest
import torch

import evofuse
from evofuse import TriangleAttention

from .conftest import DEVICE
from .contract import (
    AWKWARD_CASES,
    argument_id,
    bad_arguments,
    check_bad_argument,
    check_gradients,
    check_nonfinite,
    gated_attention_arguments,
    layout_case,
    mask_form,
    nonfinite_cases,
)
from .helpers import assert_contract, randomize

LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # the interpreter's bf16 products are not checked


def _module(c, d, h, starting=True, seed=0, **kw):
    return randomize(TriangleAttention(c, d, h, starting=starting, **kw), seed)


def _inputs(B, N, c, seed, fully_masked=True):
    """A pair (B, N, N, c) and a mask with ~20% zeros and, if fully_masked, a residue i whose pairs are all masked
    (a row whose keys are all masked for the starting node, a key masked in every row for the ending node)."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, N, N, generator=g) > 0.2).float()
    if fully_masked:
        mask[:, N // 2] = 0
    return torch.randn(B, N, N, c, generator=g), mask


@pytest.fixture
def openfold(monkeypatch):
    """The tests' `openfold` package importable."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "openfold_modules"))
    from openfold.model import triangular_attention

    yield triangular_attention
    for name in [n for n in sys.modules if n == "openfold" or n.startswith("openfold.")]:
        del sys.modules[name]


@pytest.mark.parametrize("starting", [True, False])
@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_matches_openfold_module(openfold, starting, impl):
    """OpenFold's module in float32, as the models run it (its logit - 1e9 rounds to -1e9: a row whose keys are all
    masked weighs them alike), and evofuse's with its state_dict, on a mask with a fully masked residue."""
    cls = openfold.TriangleAttentionStartingNode if starting else openfold.TriangleAttentionEndingNode
    theirs = randomize(cls(12, 8, 3), 1)
    ours = TriangleAttention(12, 8, 3, starting=starting)
    ours.load_state_dict(theirs.state_dict())
    z, mask = _inputs(2, 9, 12, 2)
    expected = theirs(z, mask)
    ours, z, mask = ours.to(DEVICE), z.to(DEVICE), mask.to(DEVICE)
    torch.testing.assert_close(ours(z, mask, chunk_size=4, use_memory_efficient_kernel=True, inplace_safe=True,
                                    impl=impl).cpu(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("inf", [1e4, 1e5])
def test_smaller_inf_runs_the_reference_with_a_warning(openfold, inf, monkeypatch):
    """Below inf = 1e9 a masked logit is not the kernels' -1e9: the reference runs, as the models compute it."""
    monkeypatch.setattr(evofuse._dispatch, "_warned", set())
    theirs = randomize(openfold.TriangleAttention(12, 8, 3, inf=inf), 1).double()
    ours = TriangleAttention(12, 8, 3, inf=inf).double()
    ours.load_state_dict(theirs.state_dict())
    z, mask = (t.double() for t in _inputs(2, 9, 12, 2))
    with pytest.warns(RuntimeWarning, match=f"inf={inf}"):
        out = ours.to(DEVICE)(z.to(DEVICE), mask.to(DEVICE), impl="triton")
    torch.testing.assert_close(out.cpu(), theirs(z, mask), rtol=1e-10, atol=1e-12)


def _contract_case(B, N, form, layout, seed):
    z, mask = _inputs(B, N, 8, seed)
    return layout_case((z, mask_form(mask, form)), layout, [0, 0])


@pytest.mark.parametrize("starting, dtype, layout", [
    (True, torch.float32, "strided"), (False, LOW, "plain"),
    pytest.param(False, torch.float32, "broadcast", marks=pytest.mark.full)])
def test_each_gradient_alone(starting, dtype, layout):
    """Every gradient, then each input's and parameter's alone (each branch of the backward), against float64."""
    mod = _module(8, 4, 2, starting, seed=3)
    # broadcast (stride-0) inputs at N 9: what it checks is strides; the other layouts take N 17, past a tile
    B, N = (2, 9) if layout == "broadcast" else (1, 17)
    inputs, views = _contract_case(B, N, "float", layout, 4)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("N, form, layout, dtype", [
    pytest.param(*case.values, dtype, marks=case.marks) if hasattr(case, "values") else (*case, dtype)
    for case in AWKWARD_CASES for dtype in (torch.float32, LOW)])
def test_gradients_at_awkward_shapes(N, form, layout, dtype):
    """Output and every gradient at the contract's awkward shapes, masks and layouts; the ending node at N = 17. In the
    interpreter N = 97 becomes 33 (past two of its blocks of 16): a pair of 97 rows of 97 keys takes it minutes."""
    N = 33 if N == 97 and DEVICE == "cpu" else N
    mod = _module(8, 4, 2, starting=N != 17, seed=5)
    inputs, views = _contract_case(2, N, form, layout, 6)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided")


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_one_key_leaves_q_and_k_without_gradient(dtype):
    """N = 1: one key a row, whose softmax weight is 1, so the logits' gradient is exactly 0. The backward's delta is
    made exact beside dq, so q's projection takes a gradient of exactly 0 in 16-bit (its products are exact; float32's
    three TF32 products on a GPU are not: there, float32's rounding) and k's one of float32's rounding, where a delta
    from the rounded output leaves both at the 16-bit output's rounding."""
    from .helpers import grads

    mod = _module(8, 4, 2, seed=11).to(DEVICE, dtype)
    z = torch.randn(3, 1, 1, 8, generator=torch.Generator().manual_seed(12)).to(DEVICE, dtype)
    _, got = grads(mod, [z, torch.ones(3, 1, 1, device=DEVICE)], "triton", differentiable=1)
    scale = got["mha.linear_v.weight"].float().norm()
    assert scale > 0 and got["mha.linear_k.weight"].float().norm() <= 1e-5 * scale
    if dtype == LOW:
        assert torch.equal(got["mha.linear_q.weight"], torch.zeros_like(got["mha.linear_q.weight"]))
    else:
        assert got["mha.linear_q.weight"].norm() <= 1e-5 * scale


class _TransposedBias(TriangleAttention):
    """The module called with OpenFold3's transpose_bias, as its blocks call the ending node."""

    def forward(self, x, mask=None, *args, **kwargs):
        return super().forward(x, mask, *args, transpose_bias=True, **kwargs)


def _transposed_bias_definition(mod, z, mask):
    """OpenFold3's triangle attention with transpose_bias, written out in float64: the bias of key k for query j
    from x[b, k, j], a masked key's logit -1e9 (as float32 rounds logit - 1e9 in the models; the starting node)."""
    x = torch.nn.functional.layer_norm(z, z.shape[-1:], mod.layer_norm.weight, mod.layer_norm.bias)
    h, mha = mod.no_heads, mod.mha

    def heads(t):  # (B, I, J, h*d) -> (B, I, h, J, d)
        return t.unflatten(-1, (h, -1)).transpose(-2, -3)

    q, k, v = heads(mha.linear_q(x)), heads(mha.linear_k(x)), heads(mha.linear_v(x))
    bias = mod.linear(x).permute(0, 3, 2, 1)  # (B, h, J, K): linear(x)[b, k, j, h]
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias[:, None]
    logits = logits.masked_fill(mask[:, :, None, None, :] == 0, -1e9)
    o = (logits.softmax(-1) @ v).transpose(-2, -3).flatten(-2)
    return mha.linear_o(torch.sigmoid(mha.linear_g(x)) * o)


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_transposed_bias_matches_its_definition(impl):
    """transpose_bias (OpenFold3's flag): the reference and the fused path (the bias kernel on a strided view of
    the pair) against the definition written out, on a mask with a fully masked residue."""
    mod = _module(8, 4, 2, seed=9).double()
    z, mask = (t.double() for t in _inputs(2, 7, 8, 10))
    expected = _transposed_bias_definition(mod, z, mask)
    dtype = torch.float64 if impl == "torch" else torch.float32
    mod, z = mod.to(DEVICE, dtype), z.to(DEVICE, dtype)
    out = mod(z, mask.to(DEVICE), transpose_bias=True, impl=impl)
    torch.testing.assert_close(out.cpu().double(), expected, rtol=1e-5, atol=1e-5 if impl == "triton" else 1e-12)


def test_transposed_bias_gradients():
    """Every gradient with the bias transposed (each gradient alone: `test_each_gradient_alone`; the flag changes
    only which pair element feeds the bias)."""
    mod = randomize(_TransposedBias(8, 4, 2), 11)
    inputs, views = _contract_case(1, 17, "bool", "strided", 12)
    check_gradients(mod, inputs, torch.float32, DEVICE, 1, views, strided_weights=True)


@pytest.mark.parametrize("starting", [True, False])
def test_leading_dimensions_and_unbatched_input(starting):
    mod = _module(8, 4, 2, starting, seed=7).to(DEVICE)
    z, mask = _inputs(6, 5, 8, 8)
    z, mask = z.to(DEVICE).view(2, 3, 5, 5, 8), mask.to(DEVICE).view(2, 3, 5, 5)
    flat = mod(z.view(6, 5, 5, 8), mask.view(6, 5, 5), impl="triton")
    torch.testing.assert_close(mod(z, mask, impl="triton"), flat.view(2, 3, 5, 5, 8))
    torch.testing.assert_close(mod(z[1, 2], mask[1, 2], impl="triton"), flat[5])
    exact = mod.double()(z.double(), mask.double(), impl="torch")
    assert_contract(mod.float()(z, mask, impl="triton").cpu(), exact.cpu(), torch.float32)


@pytest.mark.parametrize("target, value", nonfinite_cases(_module(8, 4, 2), 1))
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value):
    mod = _module(8, 4, 2, seed=2)
    z, mask = _inputs(1, 5, 8, 3)
    index = (0, 1, 2, 3) if target == "input0" else (1,) * mod.get_parameter(target).dim()
    check_nonfinite(mod, (z, mask), DEVICE, 1, target, index, value)


def _valid_arguments():
    return gated_attention_arguments(_module(8, 4, 2), "", "layer_norm", pair_repr=torch.randn(2, 4, 4, 8),
                                     pair_mask=torch.ones(2, 4, 4))


@pytest.mark.parametrize("name, value, exc", bad_arguments(_valid_arguments(), masks=("pair_mask",),
                                                            optional=("gate_bias", "out_bias"), leading="pair_repr"),
                         ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    check_bad_argument(evofuse.triangle_attention, _valid_arguments(), name, value, exc, num_heads=2)


@pytest.mark.parametrize("starting, transpose_bias", [(True, False), (False, True)])
def test_inference_in_row_chunks_matches_one_call(starting, transpose_bias):
    """An inference call in chunks of rows (3 of 16, the last chunk short; the bias channels made once for every
    row) gives the one-call output, both nodes, and at its peak holds less than half of what the one call does (its
    projections, six times the pair here, never whole)."""
    from .helpers import peak_live_bytes

    args = gated_attention_arguments(_module(8, 4, 2, starting, seed=21), "", "layer_norm",
                                     pair_repr=_inputs(2, 16, 8, 22)[0], pair_mask=_inputs(2, 16, 8, 22)[1])
    args = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in args.items()}

    def call(chunk_size):
        with torch.no_grad():
            return evofuse.triangle_attention(**args, num_heads=2, starting=starting, transpose_bias=transpose_bias,
                                              chunk_size=chunk_size, impl="triton")
    torch.testing.assert_close(call(3), call(None), rtol=1e-5, atol=1e-6)
    assert peak_live_bytes(lambda: call(3)) < 0.5 * peak_live_bytes(lambda: call(None))


@pytest.mark.parametrize("change, pattern", [
    (dict(num_heads=3), "num_heads must be a positive integer dividing the inner width 8"),
    (dict(chunk_size=0), "chunk_size must be a positive integer or None"),
    (dict(pair_repr=torch.randn(2, 4, 5, 8)), r"pair_repr must be a tensor of shape \(\.\.\., N, N, c\)"),
    (dict(precision="tf32"), "precision must be one of"), (dict(impl="cuda"), "impl / EVOFUSE_IMPL must be one of")])
def test_bad_options_are_named(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.triangle_attention(**{**_valid_arguments(), "num_heads": 2, **change})
    with pytest.raises(ValueError, match="no_heads must be a positive integer"):
        TriangleAttention(8, 4, 0)


@pytest.mark.parametrize("transpose_bias", [False, True])
def test_bias_made_apart_matches_one_pass(transpose_bias):
    """The composition a distributed pair takes (`evofuse.sharding`): the triangle bias by its own op and the
    attention given it, against the one pass that makes the bias beside q, k, v and the gate: the output and every
    gradient, float32 within the contract's bound."""
    from evofuse.numerics import FP32_DEFAULT_BOUND, rel_error
    from evofuse.ops.triangle_attention.op import joined_projections, triangle_attention, triangle_bias

    mod = _module(8, 4, 2, seed=21).to(DEVICE)
    z, mask = (t.to(DEVICE) for t in _inputs(2, 6, 8, 22))
    z.requires_grad_()
    mha = mod.mha
    weights = [mha.linear_q.weight, mha.linear_k.weight, mha.linear_v.weight, mha.linear_g.weight]
    lnw, lnb = mod.layer_norm.weight, mod.layer_norm.bias
    probe = torch.randn(2, 6, 6, 8, generator=torch.Generator().manual_seed(23)).to(DEVICE)

    def run(apart):
        bias = triangle_bias(z, lnw, lnb, mod.linear.weight, transpose_bias, "default", True) if apart else None
        proj = joined_projections(weights, None if apart else mod.linear.weight, mha.linear_g.bias)
        out = triangle_attention(z, mask, lnw, lnb, *proj, mha.linear_o.weight, mha.linear_o.bias, bias, 2,
                                 transpose_bias, "default", 0, True)[0]
        return [out, *torch.autograd.grad((out * probe).sum(), [z, *mod.parameters()])]

    names = ["output", "pair_repr's gradient", *(f"{n}'s gradient" for n, _ in mod.named_parameters())]
    for name, got, want in zip(names, run(True), run(False)):
        assert rel_error(got, want) <= FP32_DEFAULT_BOUND, name

"""The Outer Product Mean's fused path (Triton's interpreter on CPU, the kernels on a GPU) against the float64
reference: forward, backward, conventions, input forms and bad input."""

import warnings

import pytest
import torch

import evofuse
from evofuse import OuterProductMean
from evofuse.numerics import FP32_FAST_BOUND, rel_error

from .conftest import DEVICE
from .contract import (
    AWKWARD_CASES,
    LAYOUTS,
    argument_id,
    bad_arguments,
    check_bad_argument,
    check_gradients,
    check_nonfinite,
    layout_case,
    mask_form,
    nonfinite_cases,
)
from .helpers import assert_contract, compare, grads, opm_module, random_mask

LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # the interpreter's bf16 products are not checked


def _run(B, S, N, D, c, R, dtype, normalization="count_i", mask_kind="random", seed=0, precision="default",
         count_eps=1e-3):
    mod = opm_module(D, R, c, seed=seed, normalization=normalization, precision=precision, count_eps=count_eps)
    x = torch.randn(B, S, N, D, generator=torch.Generator().manual_seed(seed + 1))
    mask = random_mask(B, S, N, mask_kind, seed + 2)
    exact = mod.double()(x.double(), None if mask is None else mask.double(), impl="torch")
    low = mod.to(DEVICE, dtype)
    out = low(x.to(DEVICE, dtype), None if mask is None else mask.to(DEVICE), impl="triton")
    lowp = None if dtype == torch.float32 else low.cpu()(x.to(dtype), mask, impl="torch")
    ref32 = mod.float().cpu()(x, mask, impl="torch") if dtype == torch.float32 else None
    return out.cpu(), exact, lowp, ref32


@pytest.mark.parametrize("B, S, N, D, c, R", [
    (1, 1, 1, 8, 8, 4), (2, 5, 17, 24, 16, 12), (1, 33, 9, 16, 32, 20),
    pytest.param(1, 3, 5, 16, 64, 7, marks=pytest.mark.full), pytest.param(1, 2, 97, 8, 8, 16, marks=pytest.mark.full),
])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_forward_shapes(B, S, N, D, c, R, dtype):
    out, exact, lowp, ref32 = _run(B, S, N, D, c, R, dtype)
    assert_contract(out, exact, dtype, lowp_ref=lowp, ref_fp32=ref32)


@pytest.mark.parametrize("normalization", ["count_i", "count_ij_after", "count_ij"])
@pytest.mark.parametrize("mask_kind", ["random", "rows", "ones", "none", "empty"])
def test_forward_normalizations_and_masks(normalization, mask_kind):
    out, exact, _, ref32 = _run(2, 6, 11, 16, 8, 10, torch.float32, normalization, mask_kind)
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)


def test_fast_precision():
    out, exact, _, _ = _run(1, 9, 13, 16, 16, 8, torch.float32, precision="fast")
    assert rel_error(out, exact) <= FP32_FAST_BOUND


@pytest.mark.parametrize("normalization", ["count_i", "count_ij_after", "count_ij"])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients(normalization, dtype):
    mod = opm_module(16, 6, 8, seed=3, normalization=normalization)
    x = torch.randn(2, 5, 9, 16)
    mask = random_mask(2, 5, 9, "rows", 4)
    check_gradients(mod, (x, mask), dtype, DEVICE)


@pytest.mark.parametrize("shape", [(1, 0, 4, 16), (1, 3, 0, 16), (0, 3, 4, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_empty_dimensions(shape, dtype):
    """No MSA rows (the output is the bias divided as the normalization says), no residues, no batch: output
    and every gradient as the reference's in float64."""
    mod = opm_module(16, 6, 8, seed=9, normalization="count_ij_after")
    got = check_gradients(mod, (torch.randn(shape), None), dtype, DEVICE)
    assert got["input0"].shape == shape


@pytest.mark.parametrize("loss", ["sum", "transposed"])
def test_gradients_for_strided_output_gradients(loss):
    """An output gradient of any strides, as autograd hands it over: out.sum() gives a broadcast one (every
    stride 0), a loss over out.transpose(1, 2) a transposed one; every gradient against float64."""
    mod = opm_module(16, 6, 8, seed=6, normalization="count_ij")
    x, mask = torch.randn(2, 5, 9, 16), random_mask(2, 5, 9, "rows", 7)
    weight = torch.randn(2, 9, 9, 6, generator=torch.Generator().manual_seed(8))

    def step(module, inputs, impl):
        leaf = inputs[0].detach().clone().requires_grad_(True)
        out = module(leaf, inputs[1], impl=impl)
        (out.sum() if loss == "sum" else (out.transpose(1, 2) * weight.to(out)).sum()).backward()
        return {"input0": leaf.grad, **{n: p.grad.clone() for n, p in module.named_parameters()}}

    exact = step(mod.double(), (x.double(), mask.double()), "torch")
    for p in mod.parameters():
        p.grad = None
    got = step(mod.to(DEVICE, torch.float32), (x.to(DEVICE), mask.to(DEVICE)), "triton")
    for name, g in got.items():
        assert_contract(g.cpu(), exact[name], torch.float32, what=name)


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients_over_several_row_blocks(monkeypatch, dtype):
    """The backward takes blocks of output rows i when N*N*c*c passes BLOCK_BYTES: here blocks of 4 rows of
    N = 9 (the last one short), every gradient against float64."""
    from evofuse.ops.outer_product_mean import op

    monkeypatch.setattr(op, "BLOCK_BYTES", 2 * 9 * 8 * 8 * 4 * (4 if dtype == torch.float32 else 2))
    mod = opm_module(16, 6, 8, seed=4, normalization="count_ij_after")
    check_gradients(mod, (torch.randn(2, 5, 9, 16), random_mask(2, 5, 9, "rows", 5)), dtype, DEVICE)


@pytest.mark.parametrize("normalization", ["count_i", "count_ij_after", "count_ij"])
def test_16bit_forward_over_several_row_blocks(monkeypatch, normalization):
    """16-bit inputs take cuBLAS's outer products a block of rows i at a time when N*N*c*c passes BLOCK_BYTES:
    here blocks of 4 rows of N = 9 (the last one short), against float64."""
    from evofuse.ops.outer_product_mean import op

    monkeypatch.setattr(op, "BLOCK_BYTES", 2 * 9 * 8 * 8 * 4 * 2)
    out, exact, lowp, _ = _run(2, 5, 9, 16, 8, 6, LOW, normalization, "rows", seed=5)
    assert_contract(out, exact, LOW, lowp_ref=lowp)


def test_16bit_outer_products_stay_in_range():
    """Summed over 1024 alike MSA rows, the outer products reach ~2e5, past float16's largest (65504), in the
    16-bit forward and in the backward's recomputation for out_proj's weight gradient: cuBLAS's sums are scaled by
    1 / 1024 before their rounding, so the output and every gradient stay finite and within float16's rounding of
    float64 (the reference in float16 overflows)."""
    mod = opm_module(16, 6, 8, seed=11)
    with torch.no_grad():
        for layer in (mod.proj_a, mod.proj_b):
            layer.weight.mul_(30)
            layer.bias.mul_(30)
    x = torch.randn(1, 1, 5, 16, generator=torch.Generator().manual_seed(12)).expand(1, 1024, 5, 16).contiguous()
    exact_out, exact = grads(mod.double(), (x.double(), None), "torch")
    out, got = grads(mod.to(DEVICE, torch.float16), (x.to(DEVICE, torch.float16), None), "triton")
    for name, value in [("output", out), *got.items()]:
        value = value.cpu()
        assert torch.isfinite(value).all(), name
        assert rel_error(value, exact_out if name == "output" else exact[name]) <= 5e-3, name


@pytest.mark.parametrize("magnitudes", [(1e-20, 1e15, 1e-6), (1e12, 1e-12, 1e25), (1.0, 0.0, 1.0)])
def test_float32_operands_of_any_magnitude(monkeypatch, magnitudes):
    """float32's float16 operands: a, b and out_proj's weight each scaled by a power of two from its largest
    magnitude, found over many programs (here row blocks of 4 and 3 programs for a and b, 64-element blocks of
    the weight), whatever that magnitude; one operand all zeros too."""
    from evofuse.ops.outer_product_mean import op

    monkeypatch.setattr(op, "OPERAND_TILE", 64)
    monkeypatch.setattr(op, "OPERAND_PROGRAMS", 3)
    mod = opm_module(16, 12, 8, seed=6, normalization="count_ij_after")
    with torch.no_grad():
        for layer, scale in zip((mod.proj_a, mod.proj_b, mod.out_proj), magnitudes):
            layer.weight.mul_(scale)
            layer.bias.mul_(scale)
    x = torch.randn(2, 7, 13, 16, generator=torch.Generator().manual_seed(7))
    mask = random_mask(2, 7, 13, "random", 8)
    exact = mod.double()(x.double(), mask.double(), impl="torch")
    out = mod.float().to(DEVICE)(x.to(DEVICE), mask.to(DEVICE), impl="triton")
    assert rel_error(out.cpu(), exact) <= 1e-5


def test_count_eps():
    """"count_ij_after" with OpenFold3's eps (1e-8): a pair no row covers divides by eps alone."""
    out, exact, _, ref32 = _run(2, 6, 11, 16, 8, 10, torch.float32, "count_ij_after", "rows", count_eps=1e-8)
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)


def test_projections_without_bias():
    """proj_a and proj_b without biases (OpenFold, AF3, Protenix, Boltz): the fused path takes None."""
    mod = opm_module(16, 6, 8, seed=4, normalization="count_ij_after", projection_bias=False)
    assert mod.proj_a.bias is None and mod.proj_b.bias is None
    x = torch.randn(2, 5, 9, 16)
    mask = random_mask(2, 5, 9, "rows", 5)
    assert "proj_a.bias" not in check_gradients(mod, (x, mask), torch.float32, DEVICE)


def test_mask_forms_and_strided_inputs():
    """bool, integer and float masks agree; a non-contiguous input and a broadcast (stride-0) mask work."""
    mod = opm_module(16, 6, 8, seed=6).to(DEVICE)
    base = torch.randn(2, 7, 5, 32, device=DEVICE)
    x = base[..., ::2].transpose(1, 2)  # (2, 5, 7, 16), neither contiguous nor dense
    mask = random_mask(2, 5, 7, "random", 7).to(DEVICE)
    outs = [mod(x, m, impl="triton") for m in (mask, mask.bool(), mask.to(torch.int32))]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    exact = mod.double()(x.double(), mask.double(), impl="torch")
    assert_contract(outs[0], exact, torch.float32)
    row = random_mask(2, 1, 7, "random", 8).to(DEVICE).expand(2, 5, 7)
    exact = mod(x.double(), row.double(), impl="torch")
    assert_contract(mod.float()(x, row, impl="triton"), exact, torch.float32)
    # the backward takes the mask too (in the LayerNorm pass): every form's gradients meet the contract against
    # float64 (not bit-equal between forms on a GPU: each mask dtype is its own kernel specialization, which may sum
    # a weight's gradient in another order)
    by_mask = grads(mod.double(), (x.double(), mask.double()), "torch")[1]
    by_row = grads(mod, (x.double(), row.double()), "torch")[1]
    mod.float()
    for m, exact in ((mask, by_mask), (mask.bool(), by_mask), (mask.to(torch.int32), by_mask), (row.contiguous(), by_row),
                     (row, by_row)):
        compare(grads(mod, (x, m), "triton")[1], exact, torch.float32)


def test_deterministic():
    mod = opm_module(16, 6, 8, seed=9).to(DEVICE)
    x = torch.randn(1, 6, 10, 16, device=DEVICE)
    mask = random_mask(1, 6, 10, "random", 1).to(DEVICE)
    first = grads(mod, (x, mask), "triton")
    second = grads(mod, (x, mask), "triton")
    assert torch.equal(first[0], second[0])
    assert all(torch.equal(first[1][k], second[1][k]) for k in first[1])


def test_unsupported_hidden_dim_runs_the_reference_with_a_warning(monkeypatch):
    monkeypatch.setattr(evofuse._dispatch, "_warned", set())
    mod = opm_module(8, 4, 5).to(DEVICE)
    x = torch.randn(1, 2, 3, 8, device=DEVICE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = mod(x, None, impl="triton")
    assert torch.equal(out, mod(x, None, impl="torch"))
    assert any("hidden_dim=5" in str(w.message) for w in caught)


def test_functional_matches_module():
    mod = opm_module(8, 4, 8, seed=4).to(DEVICE)
    x = torch.randn(1, 2, 3, 8, device=DEVICE)
    params = [p for _, p in mod.named_parameters()]
    torch.testing.assert_close(evofuse.outer_product_mean(x, None, *params, impl="triton"), mod(x, None, impl="triton"))


def test_leading_dimensions_and_unbatched_input():
    """Any leading dimensions in place of B, and an unbatched (S, N, D), give the batched result."""
    mod = opm_module(8, 4, 8, seed=3).to(DEVICE)
    x = torch.randn(2, 3, 5, 6, 8, device=DEVICE)
    mask = random_mask(6, 5, 6, "random", 1).to(DEVICE).view(2, 3, 5, 6)
    flat = mod(x.view(6, 5, 6, 8), mask.view(6, 5, 6), impl="triton")
    out = mod(x, mask, impl="triton")
    assert out.shape == (2, 3, 6, 6, 4)
    torch.testing.assert_close(out, flat.view(2, 3, 6, 6, 4))
    torch.testing.assert_close(mod(x[0, 0], mask[0, 0], impl="triton"), flat[0])


def _contract_case(B, S, N, form, layout, seed):
    """(leaves, views): an MSA (B, S, N, 16) and a mask in `form` with a fully masked row and residue, laid out as
    `layout` (broadcast: one MSA row s for all)."""
    x = torch.randn(B, S, N, 16, generator=torch.Generator().manual_seed(seed))
    return layout_case((x, mask_form(random_mask(B, S, N, "rows", seed + 1), form)), layout, [1, 1])


@pytest.mark.parametrize("normalization, dtype, layout", [
    ("count_ij_after", torch.float32, "strided"), ("count_i", LOW, "plain"),
    pytest.param("count_ij", torch.float32, "broadcast", marks=pytest.mark.full),
    pytest.param("count_ij_after", LOW, "strided", marks=pytest.mark.full)])
def test_each_gradient_alone(normalization, dtype, layout):
    """Every gradient, then each input's and parameter's with no other needing one (each branch of the backward),
    against float64 at N = 17 (past one block of the interpreter's tiles)."""
    mod = opm_module(16, 6, 8, seed=3, normalization=normalization)
    inputs, views = _contract_case(1, 2, 17, "float", layout, 4)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("N, form, layout", AWKWARD_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients_at_awkward_shapes(N, form, layout, dtype):
    """Output and every gradient at N = 1, 17 (97: full tier, one batch element: its layout is plain), with float,
    bool and int masks, strided inputs and weights, broadcast (stride-0) inputs."""
    assert layout in LAYOUTS
    mod = opm_module(16, 6, 8, seed=5, normalization="count_ij", projection_bias=N != 17)
    inputs, views = _contract_case(1 if N == 97 else 2, 3, N, form, layout, 6)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided")


@pytest.mark.parametrize("target, value", nonfinite_cases(opm_module(8, 4, 8), 1))
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value):
    """NaN in any input or parameter, Inf in the MSA: NaN and Inf in the output and every gradient where the
    reference has them (a masked MSA row among them)."""
    mod = opm_module(8, 4, 8, seed=2, normalization="count_ij_after")
    x, mask = torch.randn(1, 3, 5, 8), random_mask(1, 3, 5, "rows", 3)
    index = (0, 1, 2, 3) if target == "input0" else (1,) * mod.get_parameter(target).dim()
    check_nonfinite(mod, (x, mask), DEVICE, 1, target, index, value)


def _valid_arguments():
    mod = opm_module(8, 5, 4)
    return dict(msa_repr=torch.randn(2, 3, 4, 8), msa_mask=torch.ones(2, 3, 4),
                **{name.replace(".", "_"): p.detach() for name, p in mod.named_parameters()})


@pytest.mark.parametrize("name, value, exc", bad_arguments(_valid_arguments(), masks=("msa_mask",),
                                                            optional=("proj_a_bias", "proj_b_bias")),
                         ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    """Each tensor argument not a tensor, on another device, of a wrong dtype, rank or last dimension, or None where
    it is required: a ValueError or TypeError that names it."""
    check_bad_argument(evofuse.outer_product_mean, _valid_arguments(), name, value, exc)


@pytest.mark.parametrize("options, pattern", [
    (dict(normalization="mean"), "normalization must be one of"), (dict(precision="tf32"), "precision must be one of"),
    (dict(count_eps=0.0), "count_eps must be > 0"), (dict(impl="cuda"), "impl / EVOFUSE_IMPL must be one of")])
def test_bad_options_are_named(options, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.outer_product_mean(**_valid_arguments(), **options)


@pytest.mark.parametrize("x, mask, exc, pattern", [
    (torch.randn(3, 2, 3, 4, 8), torch.ones(2, 3, 4), ValueError, r"msa_mask must have the leading dimensions \(3, 2\)"),
    (torch.randn(2, 3, 4, 7), torch.ones(2, 3, 4), ValueError, r"msa_repr .*last dimension is 7, expected 8"),
    (torch.randn(2, 3, 4, 8), torch.ones(2, 3, 5), ValueError, r"msa_mask must have shape \(B, S, N\) = \(2, 3, 4\)"),
])
def test_module_names_bad_inputs(x, mask, exc, pattern):
    with pytest.raises(exc, match=pattern):
        OuterProductMean(8, 5, 4)(x, mask)


@pytest.mark.parametrize("options, pattern", [
    (dict(normalization="mean"), "normalization must be one of"), (dict(count_eps=0.0), "count_eps must be > 0"),
    (dict(precision="tf32"), "precision must be one of"), (dict(impl="cuda"), "impl must be None or one of")])
def test_module_names_bad_options(options, pattern):
    """A module's options are checked where it is built."""
    with pytest.raises(ValueError, match=pattern):
        OuterProductMean(8, 5, 4, **options)

"""Pair-weighted averaging against Boltz's own module (boltz 2.2.1) and against the float64 reference:
forward, backward, masks, input forms and bad input."""

import importlib.util

import pytest
import torch
import triton
import triton.language as tl

import evofuse
from evofuse import PairWeightedAveraging
from evofuse.ops.pair_weighted_averaging.kernels import _sigmoid

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
from .helpers import assert_contract, compare, grads, randomize

LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # the interpreter's bf16 products are not checked

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


@pytest.mark.parametrize("kind", ["random", "rows", "none"])
def test_reference_path_against_float64(kind):
    mod = _module(16, 12, 8, 3, seed=4)
    m, z = torch.randn(1, 4, 9, 16), torch.randn(1, 9, 9, 12)
    mask = _pair_mask(1, 9, kind, 5)
    exact = mod.double()(m.double(), z.double(), None if mask is None else mask.double(), impl="torch")
    out = mod.float().to(DEVICE)(m.to(DEVICE), z.to(DEVICE), None if mask is None else mask.to(DEVICE))
    assert_contract(out.cpu(), exact, torch.float32)


def _inputs(B, S, N, c_m, c_z, kind, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, S, N, c_m, generator=g), torch.randn(B, N, N, c_z, generator=g), _pair_mask(B, N, kind, seed)


def _dev(t, dtype=None):
    return None if t is None else t.to(DEVICE, dtype) if dtype is not None and t.is_floating_point() else t.to(DEVICE)


@pytest.mark.parametrize("B, S, N, c_m, c_z, c, h", [
    (1, 1, 1, 8, 4, 8, 1), (2, 3, 17, 16, 12, 8, 3), (1, 33, 9, 32, 8, 32, 2), (1, 3, 9, 16, 8, 64, 2),
    (1, 4, 6, 8, 4, 3, 2),
    pytest.param(1, 5, 97, 16, 8, 8, 8, marks=pytest.mark.full),
])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_forward_shapes(B, S, N, c_m, c_z, c, h, dtype):
    mod = _module(c_m, c_z, c, h, seed=6)
    m, z, mask = _inputs(B, S, N, c_m, c_z, "rows", 7)
    exact = mod.double()(m.double(), z.double(), mask.double(), impl="torch")
    out = mod.to(DEVICE, dtype)(_dev(m, dtype), _dev(z, dtype), _dev(mask), impl="triton").cpu()
    lowp = None if dtype == torch.float32 else mod.cpu()(m.to(dtype), z.to(dtype), mask, impl="torch")
    ref32 = mod.cpu()(m, z, mask, impl="torch") if dtype == torch.float32 else None
    assert_contract(out, exact, dtype, lowp_ref=lowp, ref_fp32=ref32)


@pytest.mark.parametrize("kind", ["random", "rows", "ones", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients(kind, dtype):
    mod = _module(16, 12, 8, 3, seed=8)
    m, z, mask = _inputs(2, 3, 11, 16, 12, kind, 9)
    check_gradients(mod, (m, z, mask), dtype, DEVICE)


@pytest.mark.parametrize("c, h", [(3, 2), (64, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients_head_widths(c, h, dtype):
    """Heads of 3 and 64 channels: the kernels' (row s, channel) columns hold whole heads, padded to a power
    of two."""
    mod = _module(16, 12, c, h, seed=12)
    m, z, mask = _inputs(1, 5, 10, 16, 12, "random", 13)
    check_gradients(mod, (m, z, mask), dtype, DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients_msa_width_not_a_power_of_two(dtype):
    """c_m = 24: the gate is made from the MSA rows' LayerNorm over channels padded to 32, in the gated projection
    and again in its backward."""
    mod = _module(24, 12, 8, 3, seed=14)
    m, z, mask = _inputs(1, 5, 10, 24, 12, "rows", 15)
    check_gradients(mod, (m, z, mask), dtype, DEVICE)


def test_msa_wider_than_the_kernels_runs_the_reference():
    """c_m past MAX_MSA_WIDTH (the gated projection normalizes whole MSA rows): a warning, and the reference's
    output."""
    from evofuse.ops.pair_weighted_averaging.op import MAX_MSA_WIDTH

    c_m = MAX_MSA_WIDTH + 8
    mod = _module(c_m, 8, 4, 2, seed=16).to(DEVICE)
    m, z, mask = (_dev(t) for t in _inputs(1, 2, 3, c_m, 8, "rows", 17))
    with pytest.warns(RuntimeWarning, match=f"c_m={c_m}"):
        out = mod(m, z, mask, impl="triton")
    torch.testing.assert_close(out, mod(m, z, mask, impl="torch"), rtol=0, atol=0)


@pytest.mark.parametrize("w_share", [4, 2**60])
@pytest.mark.parametrize("c, h", [(8, 8), (8, 1), (3, 5)])
def test_dv_program_orders(monkeypatch, w_share, c, h):
    """dv's programs in either order (heads fastest, or residues i fastest where w would not fit the L2 share),
    narrow heads and one head: output and every gradient against float64."""
    from evofuse.ops.pair_weighted_averaging import op

    monkeypatch.setattr(op, "W_L2_SHARE", w_share)
    mod = _module(16, 12, c, h, seed=16)
    m, z, mask = _inputs(1, 5, 19, 16, 12, "random", 17)
    check_gradients(mod, (m, z, mask), torch.float32, DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_additive_mask_mode(dtype):
    """mask_mode="add" with OpenFold3's inf 1e9: a residue whose pairs are all masked weighs every j alike, as the
    models' float32 logit - 1e9 does, and its weights' gradient flows; output and every gradient."""
    mod = _module(16, 12, 8, 3, seed=10, inf=1e9, mask_mode="add")
    m, z, mask = _inputs(2, 3, 11, 16, 12, "rows", 11)
    with torch.no_grad():
        relative = _module(16, 12, 8, 3, seed=10, inf=1e9).double()(m.double(), z.double(), mask.double(),
                                                                  impl="torch")
        added = mod.double()(m.double(), z.double(), mask.double(), impl="torch")
    assert (relative - added)[:, :, 11 // 2].abs().max() > 1e-3  # the fully masked residue differs ...
    torch.testing.assert_close(torch.cat([relative[:, :, :5], relative[:, :, 6:]], 2),
                               torch.cat([added[:, :, :5], added[:, :, 6:]], 2))  # ... and only it
    check_gradients(mod, (m, z, mask), dtype, DEVICE)


@pytest.mark.parametrize("mask_mode", ["relative", "add"])
def test_softmax_over_several_blocks_of_residues(monkeypatch, mask_mode):
    """The softmax kernels take a row of residues j in blocks (a running maximum and sum across them): here
    blocks of 16 over 37 residues, the last one short, with a residue whose pairs are all masked, three heads;
    output and every gradient against the float64 reference."""
    from evofuse.ops.pair_weighted_averaging import op

    monkeypatch.setattr(op, "SOFTMAX_BLOCK_J", 16)
    assert op._softmax_tiles(37) == dict(BLOCK_J=16, ONE_BLOCK=False)
    mod = _module(16, 12, 8, 3, seed=14, inf=1e6, mask_mode=mask_mode)
    m, z, mask = _inputs(1, 2, 37, 16, 12, "rows", 15)
    exact = mod.double()(m.double(), z.double(), mask.double(), impl="torch")
    ref32 = mod.float()(m, z, mask, impl="torch")
    out = mod.to(DEVICE)(_dev(m), _dev(z), _dev(mask), impl="triton").cpu()
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)
    check_gradients(mod.cpu(), (m, z, mask), torch.float32, DEVICE)


@triton.jit
def _sigmoid_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = the gates' sigmoid of x (float32)."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, _sigmoid(x), mask=offs < n)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp2")  # (the interpreter's exp2 of x below -88: inf)
def test_gate_sigmoid_across_its_range():
    """The gates' sigmoid (exp2 and a division) against float64 from -200 to 200, infinities and NaN: relative
    error within a few float32 roundings (and what a rounding of x itself makes) down to x = -80, absolute below
    2e-35 under it."""
    x = torch.cat([torch.linspace(-200, 200, 4001), torch.tensor([float("inf"), float("-inf"), float("nan"), -80.0,
                                                                   -79.99, 88.0, 1e-30])])
    y_dev = _dev(torch.empty_like(x))
    _sigmoid_kernel[(1,)](_dev(x), y_dev, x.numel(), BLOCK=4096)
    y = y_dev.cpu().double()
    exact = torch.sigmoid(x.double())
    assert y[-5].isnan() and not y[:-5].isnan().any() and not y[-4:].isnan().any()
    keep = ~x.isnan() & (x >= -80)
    # relative to what a rounding of x itself makes (sigmoid's relative condition number is x (1 - sigmoid(x)))
    cond = torch.where(x.isinf(), 0.0, x.double().abs() * (1 - exact))
    rel = ((y - exact).abs() / exact / (1 + cond))[keep].max().item()
    assert rel < 5e-7, rel
    assert ((y - exact).abs()[~x.isnan() & (x < -80)] < 2e-35).all()


@pytest.mark.parametrize("where", ["pair", "msa"])
def test_nan_shows_as_in_the_reference(where):
    """A NaN in the pair makes its residue i's softmax NaN (every row s of that residue); one in the MSA makes
    its row s NaN: the same outputs as the reference's, with a masked pair beside it."""
    mod = _module(16, 12, 8, 3, seed=16).to(DEVICE)
    m, z, mask = (t.to(DEVICE) for t in _inputs(1, 3, 7, 16, 12, "random", 17))
    if where == "pair":
        z[0, 2, 4, 1] = float("nan")
    else:
        m[0, 1, 5, 0] = float("nan")
    out = mod(m, z, mask, impl="triton")
    ref = mod(m, z, mask, impl="torch")
    assert torch.equal(out.isnan(), ref.isnan()) and out.isnan().any() and not out.isnan().all()


def test_mask_forms_strided_inputs_and_determinism():
    mod = _module(16, 8, 8, 2, seed=10).to(DEVICE)
    m = torch.randn(1, 9, 4, 32, device=DEVICE)[..., ::2].transpose(1, 2)  # (1, 4, 9, 16), not contiguous
    z = torch.randn(1, 9, 9, 8, device=DEVICE).transpose(1, 2)
    mask = _pair_mask(1, 9, "rows", 11).to(DEVICE)
    outs = [mod(m, z, k, impl="triton") for k in (mask, mask.bool(), mask.to(torch.int32))]
    for other in outs[1:]:
        torch.testing.assert_close(other, outs[0], rtol=1e-6, atol=1e-6)
    assert_contract(outs[0], mod.double()(m.double(), z.double(), mask.double(), impl="torch"), torch.float32)
    mod.float()
    first = grads(mod, (m, z, mask), "triton")
    second = grads(mod, (m, z, mask), "triton")
    assert torch.equal(first[0], second[0]) and all(torch.equal(first[1][k], second[1][k]) for k in first[1])


def test_leading_dimensions_and_unbatched_input():
    mod = _module(8, 6, 4, 2, seed=12).to(DEVICE)
    m, z = torch.randn(3, 1, 2, 5, 8, device=DEVICE), torch.randn(3, 1, 5, 5, 6, device=DEVICE)
    mask = _pair_mask(3, 5, "rows", 13).to(DEVICE).view(3, 1, 5, 5)
    flat = mod(m.view(3, 2, 5, 8), z.view(3, 5, 5, 6), mask.view(3, 5, 5), impl="triton")
    torch.testing.assert_close(mod(m, z, mask, impl="triton"), flat.view(3, 1, 2, 5, 8))
    torch.testing.assert_close(mod(m[2, 0], z[2, 0], mask[2, 0], impl="triton"), flat[2])


def test_strided_output_gradient():
    """An output gradient of any strides (a broadcast one, as `out.sum().backward()` gives, and a transposed one):
    every gradient against float64 for that gradient."""
    mod = _module(16, 8, 8, 2, seed=14)
    m, z, mask = _inputs(1, 5, 7, 16, 8, "rows", 15)
    g = torch.Generator().manual_seed(16)
    for grad_out in (torch.ones(1, 1, 1, 1).expand(1, 5, 7, 16),
                     torch.randn(1, 16, 7, 5, generator=g).permute(0, 3, 2, 1)):
        results = []
        for impl, dtype, device in (("torch", torch.float64, "cpu"), ("triton", torch.float32, DEVICE)):
            module = mod.to(device, dtype)
            leaves = [t.to(device, dtype).clone().requires_grad_() for t in (m, z)]
            module.zero_grad()
            module(*leaves, mask.to(device), impl=impl).backward(grad_out.to(device, dtype))
            results.append({"input0": leaves[0].grad.cpu(), "input1": leaves[1].grad.cpu(),
                            **{n: p.grad.cpu() for n, p in module.named_parameters()}})
        compare(results[1], results[0], torch.float32)


def test_gated_projection_backward_configs_fit_shared_memory():
    """The backward's config predicate drops tiles whose shared memory passes sm_90's: float32, 64 rows x 128
    columns, 8 warps, 2 stages needs 263168 bytes at 128 output channels (Triton 3.9) and 246272 at 64 (Triton 3.6
    at Boltz's widths: it failed to compile for sm_90); the same tile in bf16 fits at both; no config fits
    float32 that bf16 drops."""
    from evofuse.ops.pair_weighted_averaging import configs

    wide = next(c for c in configs.PROJECTION_CONFIGS
                if (c.kwargs["BLOCK_S"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages) == (64, 128, 8, 2))
    assert not configs.projection_fits(wide, 256, 128, 4) and not configs.projection_fits(wide, 256, 64, 4)
    assert configs.projection_fits(wide, 256, 128, 2) and configs.projection_fits(wide, 256, 64, 2)
    for element_size in (2, 4):
        for hc in (8, 64, 256, 1024):
            for block_o in (16, 64, 128, 256):
                kept = [c for c in configs.PROJECTION_CONFIGS if configs.projection_fits(c, hc, block_o, element_size)]
                assert all(configs.projection_fits(c, hc, block_o, 2) for c in kept)  # (wider elements: fewer)


def _contract_case(B, S, N, form, layout, seed, c_m=16, c_z=12):
    """(leaves, views): an MSA (B, S, N, c_m), a pair (B, N, N, c_z) and a pair mask in `form` with a residue whose
    pairs are all masked, laid out as `layout` (broadcast: one MSA row s for all, one pair and mask for every batch
    element)."""
    m, z, mask = _inputs(B, S, N, c_m, c_z, "rows", seed)
    return layout_case((m, z, mask_form(mask, form)), layout, [1, 0, 0])


@pytest.mark.parametrize("mask_mode, dtype, layout", [
    ("relative", torch.float32, "strided"), ("add", LOW, "plain"),
    pytest.param("add", torch.float32, "broadcast", marks=pytest.mark.full),
    pytest.param("relative", LOW, "strided", marks=pytest.mark.full)])
def test_each_gradient_alone(mask_mode, dtype, layout):
    """Every gradient, then each input's and parameter's with no other needing one (each branch of the backward),
    against float64 at N = 17 (past one block of the interpreter's tiles)."""
    mod = _module(16, 12, 8, 3, seed=3, mask_mode=mask_mode, inf=1e9 if mask_mode == "add" else 1e6)
    inputs, views = _contract_case(1, 2, 17, "float", layout, 4)
    check_gradients(mod, inputs, dtype, DEVICE, 2, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("N, form, layout", AWKWARD_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_gradients_at_awkward_shapes(N, form, layout, dtype):
    """Output and every gradient at N = 1, 17 (97: full tier), with float, bool and int masks, strided inputs and
    weights, broadcast (stride-0) inputs; heads of 8 and of 3 channels."""
    mod = _module(16, 12, 8 if N != 17 else 3, 3, seed=5)
    inputs, views = _contract_case(2, 3, N, form, layout, 6)
    check_gradients(mod, inputs, dtype, DEVICE, 2, views, strided_weights=layout == "strided")


@pytest.mark.parametrize("target, value", nonfinite_cases(_module(8, 6, 4, 2), 2))
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value):
    """NaN in any input or parameter, Inf in the MSA or the pair: NaN and Inf in the output and every gradient where
    the reference has them (a residue whose pairs are all masked among them)."""
    mod = _module(8, 6, 4, 2, seed=2)
    m, z, mask = _inputs(1, 3, 5, 8, 6, "rows", 3)
    index = {"input0": (0, 0, 2, 3), "input1": (0, 1, 3, 1)}.get(target) or (1,) * mod.get_parameter(target).dim()
    check_nonfinite(mod, (m, z, mask), DEVICE, 2, target, index, value)


def _valid_arguments():
    return dict(msa_repr=torch.randn(2, 3, 4, 8), pair_repr=torch.randn(2, 4, 4, 6), pair_mask=torch.ones(2, 4, 4),
                **{name.replace(".", "_"): p.detach() for name, p in _module(8, 6, 4, 2).named_parameters()})


@pytest.mark.parametrize("name, value, exc", bad_arguments(_valid_arguments(), masks=("pair_mask",)),
                         ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    """Each tensor argument not a tensor, on another device, of a wrong dtype, rank or last dimension, or None where
    it is required: a ValueError or TypeError that names it."""
    check_bad_argument(evofuse.pair_weighted_averaging, _valid_arguments(), name, value, exc, num_heads=2)


@pytest.mark.parametrize("options, pattern", [
    (dict(num_heads=3), "num_heads must be a positive integer dividing proj_m's width 8"),
    (dict(num_heads=0), "num_heads must be a positive integer"),
    (dict(num_heads=2, mask_mode="multiply"), "mask_mode must be one of"),
    (dict(num_heads=2, precision="tf32"), "precision must be one of"),
    (dict(num_heads=2, impl="cuda"), "impl / EVOFUSE_IMPL must be one of")])
def test_bad_options_are_named(options, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.pair_weighted_averaging(**{**_valid_arguments(), **options})


@pytest.mark.parametrize("m, z, mask, exc, pattern", [
    (torch.randn(4, 8), torch.randn(2, 4, 4, 6), torch.ones(2, 4, 4), ValueError, r"msa_repr must have shape"),
    (torch.randn(2, 3, 4, 8), torch.randn(2, 4, 4, 5), torch.ones(2, 4, 4), ValueError, r"pair_repr must have shape"),
    (torch.randn(2, 3, 4, 8), torch.randn(2, 4, 4, 6), torch.ones(2, 4, 5), ValueError,
     r"pair_mask must have shape \(B, N, N\) = \(2, 4, 4\)"),
])
def test_module_names_bad_inputs(m, z, mask, exc, pattern):
    with pytest.raises(exc, match=pattern):
        PairWeightedAveraging(8, 6, 4, 2)(m, z, mask)


@pytest.mark.parametrize("heads, options, pattern", [
    (0, {}, "num_heads must be a positive integer"), (2, dict(mask_mode="replace"), "mask_mode must be one of"),
    (2, dict(precision="tf32"), "precision must be one of"), (2, dict(impl="cuda"), "impl must be")])
def test_module_names_bad_options(heads, options, pattern):
    """A module's options are checked where it is built."""
    with pytest.raises(ValueError, match=pattern):
        PairWeightedAveraging(8, 6, 4, heads, **options)

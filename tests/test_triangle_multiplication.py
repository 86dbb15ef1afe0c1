"""Triangle multiplication (`evofuse.TriangleMultiplication`, `evofuse.triangle_multiplication`) against Boltz-2's
modules (boltz 2.2.1) and the float64 reference: outgoing and incoming, masks, input forms and bad input."""

import importlib.util

import pytest
import torch

import evofuse
from evofuse import TriangleMultiplication

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


def _module(c_z, c, outgoing=True, seed=0, **kw):
    return randomize(TriangleMultiplication(c_z, c, outgoing=outgoing, **kw), seed)


def _inputs(B, N, c_z, seed, fully_masked=True):
    """A pair (B, N, N, c_z) and a mask with ~20% zeros and, if fully_masked, a residue whose pairs are all masked."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, N, N, generator=g) > 0.2).float()
    if fully_masked:
        mask[:, N // 2] = 0
    return torch.randn(B, N, N, c_z, generator=g), mask


@pytest.mark.skipif(importlib.util.find_spec("boltz") is None, reason="boltz 2.2.1 is not installed")
@pytest.mark.parametrize("outgoing", [True, False])
@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_matches_boltz_module(outgoing, impl):
    """Boltz-2's TriangleMultiplicationOutgoing / Incoming in float32 and evofuse's with its state_dict, on a mask with
    a fully masked residue; Boltz's switch in the call."""
    from boltz.model.layers.triangular_mult import TriangleMultiplicationIncoming, TriangleMultiplicationOutgoing

    theirs = randomize((TriangleMultiplicationOutgoing if outgoing else TriangleMultiplicationIncoming)(16), 1)
    ours = TriangleMultiplication(16, outgoing=outgoing)
    ours.load_state_dict(theirs.state_dict())
    z, mask = _inputs(2, 9, 16, 2)
    expected = theirs(z, mask)
    ours, z, mask = ours.to(DEVICE), z.to(DEVICE), mask.to(DEVICE)
    torch.testing.assert_close(ours(z, mask, use_kernels=False, impl=impl).cpu(), expected, rtol=1e-5, atol=1e-5)


def _contract_case(B, N, form, layout, seed):
    z, mask = _inputs(B, N, 8, seed)
    return layout_case((z, mask_form(mask, form)), layout, [0, 0])


@pytest.mark.parametrize("outgoing, dtype, layout, bias", [
    (True, torch.float32, "strided", True), (False, LOW, "plain", False),
    pytest.param(False, torch.float32, "broadcast", True, marks=pytest.mark.full)])
def test_each_gradient_alone(outgoing, dtype, layout, bias):
    """Every gradient, then each input's and parameter's alone (each branch of the backward), against float64."""
    mod = _module(8, 6, outgoing, seed=3, bias=bias)
    # broadcast (stride-0) inputs at N 9: what it checks is strides; the other layouts take N 17, past a tile
    B, N = (2, 9) if layout == "broadcast" else (1, 17)
    inputs, views = _contract_case(B, N, "float", layout, 4)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided", alone=True)


@pytest.mark.parametrize("N, form, layout, dtype", [
    pytest.param(*case.values, dtype, marks=case.marks) if hasattr(case, "values") else pytest.param(*case, dtype)
    for case in AWKWARD_CASES for dtype in (torch.float32, LOW)])
def test_gradients_at_awkward_shapes(N, form, layout, dtype):
    """Output and every gradient at the contract's awkward shapes, masks and layouts; incoming at N = 17. In the
    interpreter N = 97 becomes 33 (past two of its blocks of 16)."""
    N = 33 if N == 97 and DEVICE == "cpu" else N
    mod = _module(8, 6, outgoing=N != 17, seed=5, bias=True)
    inputs, views = _contract_case(2, N, form, layout, 6)
    check_gradients(mod, inputs, dtype, DEVICE, 1, views, strided_weights=layout == "strided")


@pytest.mark.parametrize("outgoing, dtype", [(True, torch.float32), (False, LOW)])
def test_gradients_in_row_chunks(outgoing, dtype, monkeypatch):
    """A large pair's input projections' backward runs in row chunks (`input_chunks`; here every pair's, in 4 uneven
    chunks): every gradient within the contract and, in float32, as in one pass (the parameters' chunk sums added in
    float32)."""
    from evofuse.ops.triangle_multiplication import op

    inputs, views = _contract_case(2, 17, "float", "plain", 10)
    # (a module each: check_gradients moves and casts the one it is given)
    one_pass = check_gradients(_module(8, 6, outgoing, seed=9, bias=True), inputs, dtype, DEVICE, 1, views)
    monkeypatch.setattr(op, "CHUNK_BYTES", 0)
    assert op.input_chunks(2 * 17 * 17, 6, 8, 4) == 145  # (578 rows: 4 chunks, the last of 143)
    chunked = check_gradients(_module(8, 6, outgoing, seed=9, bias=True), inputs, dtype, DEVICE, 1, views)
    if dtype == torch.float32:
        torch.testing.assert_close(chunked, one_pass, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("outgoing, dtype", [(False, torch.float32), (True, LOW)])
def test_whole_row_output_tile(outgoing, dtype, monkeypatch):
    """The output kernel at a whole-row tile (t's and the pair's rows normalized once, then two blocks of 16 output
    channels a program, c_z 40: the second program's block partial), forward and with GRAD in the backward: the output
    and every gradient within the contract."""
    import triton

    from evofuse.ops.triangle_multiplication import configs

    from .helpers import rebuild_kernels

    warps, stages = (1, 1) if DEVICE == "cpu" else (4, 2)
    config = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 64, "ROW_STEPS": 2}, num_warps=warps,
                           num_stages=stages)
    monkeypatch.setattr(configs, "prune_output", lambda configs, named_args, **kwargs: [config])
    rebuild_kernels()
    try:
        z, mask = _inputs(2, 17, 40, 14)
        check_gradients(_module(40, 24, outgoing, seed=13, bias=True), (z, mask), dtype, DEVICE, 1)
    finally:
        rebuild_kernels()  # (the next call's autotuner built with the tables' own pruning again)


@pytest.mark.parametrize("chunk_bytes, most", [(None, 15.5), (0, 12.0)])
def test_training_peak_memory(chunk_bytes, most, monkeypatch):
    """A training step's peak of live storage, in pair tensors (B, N, N, c_z) at c = c_z, the output and its
    gradient included: the forward keeps t alone, the backward drops each tensor once used, and a large pair's input
    backward runs in row chunks (here forced). Measured 15.2 and 11.4 at this shape, the interpreter's copies and the
    parameters' partial sums included (13.1 and 8.7 at N 96, c 128)."""
    from evofuse.ops.triangle_multiplication import op

    from .helpers import peak_live_bytes

    if chunk_bytes is not None:
        monkeypatch.setattr(op, "CHUNK_BYTES", chunk_bytes)
    mod = _module(16, 16, seed=11).to(DEVICE)
    z, mask = (t.to(DEVICE) for t in _inputs(1, 24, 16, 12))
    z.requires_grad_()

    def step():
        out = mod(z, mask, impl="triton")
        out.backward(torch.ones_like(out))

    step()
    assert peak_live_bytes(step) / (z.numel() * z.element_size()) <= most


@pytest.mark.parametrize("outgoing", [True, False])
def test_leading_dimensions_and_unbatched_input(outgoing):
    mod = _module(8, 6, outgoing, seed=7).to(DEVICE)
    z, mask = _inputs(6, 5, 8, 8)
    z, mask = z.to(DEVICE).view(2, 3, 5, 5, 8), mask.to(DEVICE).view(2, 3, 5, 5)
    flat = mod(z.view(6, 5, 5, 8), mask.view(6, 5, 5), impl="triton")
    torch.testing.assert_close(mod(z, mask, impl="triton"), flat.view(2, 3, 5, 5, 8))
    torch.testing.assert_close(mod(z[1, 2], mask[1, 2], impl="triton"), flat[5])
    exact = mod.double()(z.double(), mask.double(), impl="torch")
    assert_contract(mod.float()(z, mask, impl="triton").cpu(), exact.cpu(), torch.float32)


@pytest.mark.parametrize("target, value", nonfinite_cases(_module(8, 6, bias=True), 1))
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value):
    mod = _module(8, 6, seed=2, bias=True)
    z, mask = _inputs(1, 5, 8, 3)
    index = (0, 1, 2, 3) if target == "input0" else (1,) * mod.get_parameter(target).dim()
    check_nonfinite(mod, (z, mask), DEVICE, 1, target, index, value)


def _valid_arguments():
    mod = _module(8, 6, bias=True)
    return dict(pair_repr=torch.randn(2, 4, 4, 8), pair_mask=torch.ones(2, 4, 4),
                **{name.replace(".", "_"): p.detach() for name, p in mod.named_parameters()})


@pytest.mark.parametrize("name, value, exc", bad_arguments(
    _valid_arguments(), masks=("pair_mask",), optional=("p_in_bias", "g_in_bias", "p_out_bias", "g_out_bias"),
    leading="pair_repr"), ids=argument_id)
def test_bad_arguments_are_named(name, value, exc):
    check_bad_argument(evofuse.triangle_multiplication, _valid_arguments(), name, value, exc)


@pytest.mark.parametrize("change, pattern", [
    (dict(chunk_size=0), "chunk_size must be a positive integer or None"),
    (dict(pair_repr=torch.randn(2, 4, 5, 8)), r"pair_repr must be a tensor of shape \(\.\.\., N, N, c\)"),
    (dict(precision="tf32"), "precision must be one of"), (dict(impl="cuda"), "impl / EVOFUSE_IMPL must be one of")])
def test_bad_options_are_named(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        evofuse.triangle_multiplication(**{**_valid_arguments(), **change})
    with pytest.raises(ValueError, match="c_hidden must be a positive integer"):
        TriangleMultiplication(8, 0)


@pytest.mark.parametrize("outgoing, dtype", [(True, torch.float32), (False, torch.float32), (False, LOW)])
def test_inference_in_row_chunks_matches_one_call(outgoing, dtype):
    """An inference call in chunks of output rows (5 of 16, the last chunk short; b made once for every pair, a
    batch element at a time, a bool mask with a fully masked residue) gives the one-call output, both directions,
    and at its peak holds less than the one call does: a and t, c planes each, never whole."""
    from .helpers import peak_live_bytes

    mod = _module(8, 16, outgoing, seed=15, bias=True).to(DEVICE, dtype)
    z, mask = _inputs(2, 16, 8, 16)
    args = dict(pair_repr=z.to(DEVICE, dtype), pair_mask=mask.bool().to(DEVICE), outgoing=outgoing, impl="triton",
                **{name.replace(".", "_"): p.detach() for name, p in mod.named_parameters()})

    def call(chunk_size):
        with torch.no_grad():
            return evofuse.triangle_multiplication(**args, chunk_size=chunk_size)
    torch.testing.assert_close(call(5), call(None), rtol=1e-5 if dtype == torch.float32 else 1e-3, atol=1e-5)
    assert peak_live_bytes(lambda: call(5)) < 0.75 * peak_live_bytes(lambda: call(None))


@pytest.mark.parametrize("kernel", ["layer_norm_glu", "output"])
def test_gpu_tiles_at_a_narrow_pair_and_a_wide_product(kernel, monkeypatch):
    """Protenix's MSA block's pair stack (c_z 16, c 128: a's and b's 256 gated channels from 16, an output row of 128
    product channels for 16 outputs): each tile a GPU's autotuner would be offered for one kernel, forced in turn (here
    in the interpreter), the forward within the float32 contract of float64."""
    import evofuse._runtime as runtime
    from evofuse.numerics import rel_error
    from evofuse.ops.triangle_multiplication import configs
    from evofuse.stages import layer_norm_glu

    from .helpers import rebuild_kernels

    mod = _module(16, 128)
    z, mask = _inputs(1, 7, 16, seed=4)
    want = mod.double()(z.double(), mask.double(), impl="torch")
    mod.float().to(DEVICE)
    with monkeypatch.context() as gpu:
        gpu.setattr(runtime, "interpreting", lambda: False)
        offered = (layer_norm_glu.candidates(49, 16, 256, 2, 4, whole_rows=True) if kernel == "layer_norm_glu" else
                   configs.prune_output(None, dict(M=49, C=128, CZ=16, z_ptr=z)))
    for config in offered:
        if kernel == "layer_norm_glu":
            monkeypatch.setattr(layer_norm_glu, "_prune", lambda *args, config=config, **kwargs: [config])
        else:
            monkeypatch.setattr(configs, "prune_output", lambda *args, config=config, **kwargs: [config])
        rebuild_kernels()
        got = mod(z.to(DEVICE), mask.to(DEVICE), impl="triton")
        assert rel_error(got.double().cpu(), want) <= 1e-5, config
    rebuild_kernels()

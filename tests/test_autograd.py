"""Gradients through the fused forward against float64 autograd of the reference (SPEC 3): the Outer
Product Mean's block-by-block recomputing backward forced to small blocks so that block edges are
crossed, and row attention's fused backward kernels."""

import copy

import pytest
import torch

import evofuse._backward as backward

from .conftest import DEVICE
from .helpers import assert_contract, att_module, compare, grads, opm_module, random_mask

BLOCKS = {"one-row-blocks": 1, "default-blocks": backward.BLOCK_BYTES}


@pytest.fixture(params=list(BLOCKS), autouse=True)
def block_bytes(request, monkeypatch):
    monkeypatch.setattr(backward, "BLOCK_BYTES", BLOCKS[request.param])


@pytest.mark.parametrize("normalization", ["seed", "af2", "boltz"])
def test_opm_gradients(normalization):
    mod = opm_module(12, 5, 8, seed=1, normalization=normalization).to(DEVICE)
    x = torch.randn(2, 4, 9, 12, device=DEVICE)
    mask = random_mask(2, 4, 9, "rows", 2).to(DEVICE)
    out, got = grads(mod, (x, mask), "triton")
    exact_out, exact = grads(copy.deepcopy(mod).double(), (x.double(), mask), "torch")
    assert_contract(out, exact_out, torch.float32)
    compare(got, exact, torch.float32)


@pytest.mark.parametrize("B, S, N, h, d, mask_kind", [(2, 3, 10, 2, 8, "rows"), (1, 1, 17, 4, 8, "none"),
                                                     (1, 2, 5, 1, 16, "ones"), (1, 3, 33, 2, 8, "random")])
def test_attention_gradients(B, S, N, h, d, mask_kind):
    """Shapes that cross the kernels' 16-wide tiles (17, 33), a fully masked MSA row ("rows"), no mask."""
    D = h * d
    mod = att_module(D, 4, h, seed=N).to(DEVICE)
    x, z = torch.randn(B, S, N, D, device=DEVICE), torch.randn(B, N, N, 4, device=DEVICE)
    mask = random_mask(B, S, N, mask_kind, 4)
    mask = None if mask is None else mask.to(DEVICE)
    out, got = grads(mod, (x, z, mask), "triton")
    exact_out, exact = grads(copy.deepcopy(mod).double(), (x.double(), z.double(), mask), "torch")
    assert_contract(out, exact_out, torch.float32)
    compare(got, exact, torch.float32)


@pytest.mark.parametrize("op", ["opm", "att"])
def test_float16_gradients(op):
    if op == "opm":
        mod = opm_module(16, 6, 8, seed=5).to(DEVICE)
        inputs = (torch.randn(1, 5, 7, 16, device=DEVICE), random_mask(1, 5, 7, "rows", 1).to(DEVICE))
    else:
        mod = att_module(16, 4, 2, seed=5).to(DEVICE)
        inputs = (torch.randn(1, 3, 7, 16, device=DEVICE), torch.randn(1, 7, 7, 4, device=DEVICE),
                  random_mask(1, 3, 7, "rows", 1).to(DEVICE))
    half = [t.half() if t is not None and t.dim() == 4 else t for t in inputs]
    _, got = grads(copy.deepcopy(mod).half(), half, "triton")
    _, lowp = grads(copy.deepcopy(mod).half(), half, "torch")
    _, exact = grads(copy.deepcopy(mod).half().double(), [t.double() if t is not None and t.dim() == 4 else t
                                                          for t in half], "torch")
    compare(got, exact, torch.float16, lowp)


@pytest.mark.parametrize("c, N, normalization", [(8, 9, "seed"), (16, 17, "af2"), (32, 5, "boltz")])
def test_opm_float16_backward_kernels(c, N, normalization, monkeypatch):
    """16-bit, hidden_dim <= 32: the outer products and dX come from Triton kernels in the layouts the
    products take, the projections' gradients are taken by hand (msa_dim 24: evofuse's LayerNorm).
    Gradients meet the float16 contract and match the all-cuBLAS path to float16 rounding (which the
    two paths apply at different places: the scale on the outer products or on the output gradient)."""
    import evofuse.ops.outer_product_mean as op

    mod = opm_module(24, 6, c, seed=c, normalization=normalization).to(DEVICE).half()
    inputs = (torch.randn(2, 7, N, 24, device=DEVICE).half(), random_mask(2, 7, N, "rows", 1).to(DEVICE))
    assert op.backward_fused(torch.float16, c)
    _, got = grads(copy.deepcopy(mod), inputs, "triton")
    _, lowp = grads(copy.deepcopy(mod), inputs, "torch")
    _, exact = grads(copy.deepcopy(mod).double(), (inputs[0].double(), inputs[1]), "torch")
    compare(got, exact, torch.float16, lowp)
    monkeypatch.setattr(op, "backward_fused", lambda dtype, c: False)
    _, cublas = grads(copy.deepcopy(mod), inputs, "triton")
    for name, g in got.items():
        torch.testing.assert_close(g, cublas[name], rtol=2e-3, atol=2e-3 * cublas[name].abs().max().item(), msg=name)


@pytest.mark.parametrize("c, N", [(16, 17), (8, 9), (64, 6)], ids=["single-launch-forward", "tiled-forward", "hidden-64"])
def test_opm_float16_projections_kept_or_recomputed(c, N, monkeypatch):
    """16-bit: the training forward keeps the masked projections and the per-pair scale, and one kernel
    (`ln_linear_backward`) takes the LayerNorm's and the projections' gradients from da and db. The
    custom op's inference form, which keeps nothing, recomputes them with the forward's kernels: the same
    gradients bit for bit. The path of wider inputs (LayerNorm recomputed with its statistics, gradients
    by hand) agrees to float16 rounding; all meet the float16 contract."""
    import evofuse._library  # noqa: F401 (registers the ops)
    import evofuse.ops.layer_norm_linear as lnl
    from evofuse.modules import _OPM_LINEARS, _linear_params
    from evofuse.ops import outer_product_mean as opm

    mod = opm_module(24, 6, c, seed=c, normalization="af2").to(DEVICE).half()
    inputs = (torch.randn(2, 5, N, 24, device=DEVICE).half(), random_mask(2, 5, N, "rows", 3).to(DEVICE))
    assert lnl.ln_linear_backward_fits(torch.float16, 24, c)
    assert (opm._small_meta(5, N, 24, c, torch.float16) is not None) == (c == 16)
    _, kept = grads(copy.deepcopy(mod), inputs, "triton")

    op_mod = copy.deepcopy(mod)
    msa = inputs[0].clone().requires_grad_(True)
    out = torch.ops.evofuse.outer_product_mean(msa, inputs[1], _linear_params(op_mod, _OPM_LINEARS), "af2",
                                         "default")
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(out))
    recomputed = {"input0": msa.grad} | {n: p.grad for n, p in op_mod.named_parameters()}
    for name, g in kept.items():
        torch.testing.assert_close(recomputed[name], g, rtol=0, atol=0, msg=name)

    _, lowp = grads(copy.deepcopy(mod), inputs, "torch")
    _, exact = grads(copy.deepcopy(mod).double(), (inputs[0].double(), inputs[1]), "torch")
    compare(kept, exact, torch.float16, lowp)
    monkeypatch.setattr(lnl, "ln_linear_backward_fits", lambda dtype, D, c: False)
    _, by_hand = grads(copy.deepcopy(mod), inputs, "triton")
    compare(by_hand, exact, torch.float16, lowp)
    for name, g in kept.items():
        torch.testing.assert_close(g, by_hand[name], rtol=2e-3, atol=2e-3 * by_hand[name].abs().max().item(), msg=name)


def test_opm_float16_normalized_gradient_whole_or_by_block(monkeypatch):
    """16-bit, blocks of one output row: the normalized gradient Gs made once for every block (small) or a
    block at a time (large, forced here) gives the same gradients bit for bit; the output bias's, summed
    in other groups of pairs, to float32 rounding."""
    mod = opm_module(24, 6, 8, seed=3, normalization="af2").to(DEVICE).half()
    inputs = (torch.randn(2, 5, 9, 24, device=DEVICE).half(), random_mask(2, 5, 9, "rows", 3).to(DEVICE))
    monkeypatch.setattr(backward, "BLOCK_BYTES", 1)
    _, whole = grads(copy.deepcopy(mod), inputs, "triton")
    monkeypatch.setattr(backward, "GS_WHOLE_BYTES", 0)
    _, by_block = grads(copy.deepcopy(mod), inputs, "triton")
    for name, g in whole.items():
        tol = 1e-3 if name == "out_proj.bias" else 0
        torch.testing.assert_close(by_block[name], g, rtol=tol, atol=tol, msg=name)


@pytest.mark.parametrize("B, S, N, h, d", [(2, 3, 10, 2, 8), (1, 2, 17, 4, 8), (1, 1, 33, 1, 16), (1, 2, 9, 1, 8)])
def test_attention_float16_projection_gradients_by_hand(B, S, N, h, d):
    """16-bit row attention recomputes its projection with evofuse's LayerNorm (and its statistics) and
    takes the projection's and LayerNorm's gradients by hand: every gradient under the float16 contract.
    (msa_dim 8 is below the LayerNorm kernel's widths: PyTorch's LayerNorm under autograd instead.)"""
    D = h * d
    mod = att_module(D, 4, h, seed=N + d).to(DEVICE).half()
    inputs = (torch.randn(B, S, N, D, device=DEVICE).half(), torch.randn(B, N, N, 4, device=DEVICE).half(),
              random_mask(B, S, N, "rows", N).to(DEVICE))
    out, got = grads(copy.deepcopy(mod), inputs, "triton")
    lowp_out, lowp = grads(copy.deepcopy(mod), inputs, "torch")
    exact_out, exact = grads(copy.deepcopy(mod).double(), [t.double() if t.dim() == 4 else t for t in inputs],
                             "torch")
    assert_contract(out, exact_out, torch.float16, lowp_ref=lowp_out)
    compare(got, exact, torch.float16, lowp)


@pytest.mark.parametrize("fused", [True, False], ids=["fused-dq", "dq-apart"])
def test_attention_float16_backward_forms(fused, monkeypatch):
    """Both forms of the 16-bit attention backward: dq, dk and dv in one persistent kernel (each program
    carries dq across the key blocks in its workspace; in the interpreter 3 programs for 12 rows) and dq
    apart from dk/dv. N = 40 is three 16-wide key blocks, the last partial; a fully masked MSA row. Every
    gradient under the float16 contract, bit-identical on a second run."""
    import evofuse.ops.row_attention as ra

    monkeypatch.setattr(ra, "FUSED_DQ", fused)
    mod = att_module(16, 4, 2, seed=12).to(DEVICE).half()
    inputs = (torch.randn(2, 3, 40, 16, device=DEVICE).half(), torch.randn(2, 40, 40, 4, device=DEVICE).half(),
              random_mask(2, 3, 40, "rows", 5).to(DEVICE))
    _, got = grads(copy.deepcopy(mod), inputs, "triton")
    _, again = grads(copy.deepcopy(mod), inputs, "triton")
    _, lowp = grads(copy.deepcopy(mod), inputs, "torch")
    _, exact = grads(copy.deepcopy(mod).double(), [t.double() if t.dim() == 4 else t for t in inputs], "torch")
    compare(got, exact, torch.float16, lowp)
    assert all(torch.equal(got[k], again[k]) for k in got)


def _opm_subset_case(dtype):
    mod = opm_module(16, 5, 8, seed=9, normalization="af2").to(DEVICE).to(dtype)
    x = torch.randn(1, 4, 6, 16, device=DEVICE).to(dtype)
    return mod, (x, None), torch.randn(1, 6, 6, 5, device=DEVICE).to(dtype), ("layer_norm.bias", "proj_b.weight")


def _att_subset_case(dtype):
    mod = att_module(16, 4, 2, seed=8).to(DEVICE).to(dtype)
    x, z = torch.randn(1, 2, 9, 16, device=DEVICE).to(dtype), torch.randn(1, 9, 9, 4, device=DEVICE).to(dtype)
    return mod, (x, z, None), torch.randn(1, 2, 9, 16, device=DEVICE).to(dtype), ("layer_norm.weight", "query.bias")


@pytest.mark.parametrize("case", [_opm_subset_case, _att_subset_case], ids=["opm", "att"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_gradients_of_a_subset(case, dtype):
    """Two frozen parameters and an MSA input that needs no gradient: the others' gradients are those
    of the full backward, bit for bit (16-bit: the projections' gradients by hand; float32: autograd)."""
    mod, inputs, g, frozen = case(dtype)
    full = copy.deepcopy(mod)
    full(inputs[0].clone().requires_grad_(True), *inputs[1:], impl="triton").backward(g)
    part = copy.deepcopy(mod)
    for name, p in part.named_parameters():
        p.requires_grad_(name not in frozen)
    part(*inputs, impl="triton").backward(g)
    for (name, p), q in zip(part.named_parameters(), full.parameters()):
        if name in frozen:
            assert p.grad is None, name
        else:
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)


def test_gradients_of_weights_only():
    """Inputs that need no gradient (frozen MSA) still give every parameter its gradient."""
    mod = opm_module(8, 4, 8, seed=6).to(DEVICE)
    x = torch.randn(1, 3, 5, 8, device=DEVICE)
    mod(x, None, impl="triton").sum().backward()
    ref = copy.deepcopy(mod)
    for p in ref.parameters():
        p.grad = None
    ref(x, None, impl="torch").sum().backward()
    for (name, p), q in zip(mod.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("shape", [(1, 3, 0, 16), (1, 0, 5, 16), (0, 3, 5, 16)], ids=["no-residue", "no-row", "no-batch"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_opm_empty_sizes(shape, dtype):
    """Sizes of 0 (below SPEC 4's B, S, N >= 1) do not crash: the output and every gradient are the
    reference's (an MSA without rows gives out_proj's bias, normalized, everywhere)."""
    mod = opm_module(16, 6, 8, seed=1, normalization="af2").to(DEVICE).to(dtype)
    x = torch.randn(*shape, device=DEVICE).to(dtype)
    out, got = grads(copy.deepcopy(mod), (x, None), "triton")
    exact_out, exact = grads(copy.deepcopy(mod), (x, None), "torch")
    torch.testing.assert_close(out, exact_out, rtol=0, atol=0)
    for name, g in exact.items():
        torch.testing.assert_close(got[name], g, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("op", ["opm", "opm-float16", "att"])
def test_backward_is_deterministic(op):
    if op == "opm":
        mod = opm_module(12, 5, 8, seed=7, normalization="af2").to(DEVICE)
        inputs = (torch.randn(2, 6, 11, 12, device=DEVICE), random_mask(2, 6, 11, "random", 2).to(DEVICE))
    elif op == "opm-float16":  # the 16-bit kernels: dW summed over runs of pairs in a fixed order
        mod = opm_module(24, 6, 16, seed=7, normalization="af2").to(DEVICE).half()
        inputs = (torch.randn(2, 6, 11, 24, device=DEVICE).half(), random_mask(2, 6, 11, "random", 2).to(DEVICE))
    else:
        mod = att_module(16, 4, 2, seed=5).to(DEVICE)
        inputs = (torch.randn(1, 5, 9, 16, device=DEVICE), torch.randn(1, 9, 9, 4, device=DEVICE), None)
    _, first = grads(mod, inputs, "triton")
    first = {k: v.clone() for k, v in first.items()}
    _, second = grads(mod, inputs, "triton")
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_pair_bias_gradient_in_row_chunks(monkeypatch):
    """The pair-bias kernel splits the MSA rows into chunks summed afterwards (here one row a chunk, five
    chunks): gradients stay exact and bit-reproducible."""
    import evofuse.ops.row_attention as ra

    monkeypatch.setattr(ra, "DZ_ROWS_PER_PROGRAM", 1)
    mod = att_module(16, 4, 2, seed=11).to(DEVICE)
    inputs = (torch.randn(1, 5, 10, 16, device=DEVICE), torch.randn(1, 10, 10, 4, device=DEVICE),
              random_mask(1, 5, 10, "rows", 3).to(DEVICE))
    _, got = grads(mod, inputs, "triton")
    _, again = grads(mod, inputs, "triton")
    _, exact = grads(copy.deepcopy(mod).double(), (inputs[0].double(), inputs[1].double(), inputs[2]), "torch")
    compare(got, exact, torch.float32)
    assert all(torch.equal(got[k], again[k]) for k in got)

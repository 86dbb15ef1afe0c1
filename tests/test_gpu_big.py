"""The GPU tier's `big` cases: one per operation whose element offsets pass 2**31, a training step of the fused path
against the reference (float32 standing in for the exact values, bf16 for the allowance) where the offsets are large."""

import copy

import pytest
import torch

from evofuse import (
    MSARowAttentionWithPairBias,
    OuterProductMean,
    PairWeightedAveraging,
    Transition,
    TriangleAttention,
    TriangleMultiplication,
)
from evofuse.reference import msa_row_attention_with_bias, outer_product_mean_projections, outer_product_mean_rows

from .helpers import ZERO_GRADS, compare, randomize

pytestmark = pytest.mark.gpu


def _last_rows_gradient(shape, rows, dim, dtype, seed=3):
    """An output gradient that is zero but for the last `rows` along `dim`."""
    grad = torch.zeros(shape, dtype=dtype, device="cuda")
    last = grad.narrow(dim, shape[dim] - rows, rows)
    last.copy_(torch.randn(last.shape, generator=torch.Generator("cuda").manual_seed(seed), device="cuda"))
    return grad


def _fused_step(mod, inputs, grad, differentiable):
    """Output and gradients (inputs, then parameters by name) of the fused path for the output gradient `grad`."""
    leaves = [t.requires_grad_() if k < differentiable else t for k, t in enumerate(inputs)]
    mod.zero_grad()
    out = mod(*leaves, impl="triton")
    out.backward(grad)
    return out.detach(), {**{f"input{k}": leaves[k].grad for k in range(differentiable)},
                          **{n: p.grad for n, p in mod.named_parameters()}}


def _assert_like_module_reference(mod, x, mask, grad, out, got):
    """A bf16 module's fused step (`out`, `got`) on (x, mask) for the output gradient `grad` against the module's own
    reference path (`impl="torch"`) in float32 (standing in for exact) and bf16 (the allowance), one batch element
    at a time (the parameters' gradients summed over them), so that the reference's memory is one element's."""
    torch.cuda.empty_cache()

    def reference(dtype):
        ref = copy.deepcopy(mod).to(dtype)
        outs, grads = [], []
        for b in range(x.shape[0]):
            xr = x[b:b + 1].detach().to(dtype).requires_grad_()
            o = ref(xr, None if mask is None else mask[b:b + 1], impl="torch")
            o.backward(grad[b:b + 1].to(dtype))
            outs.append(o.detach())
            grads.append(xr.grad)
        return torch.cat(outs), {"input0": torch.cat(grads), **{n: p.grad for n, p in ref.named_parameters()}}

    lowp_out, lowp = reference(torch.bfloat16)
    exact_out, exact = reference(torch.float32)
    for b in range(x.shape[0]):  # (a batch element at a time: the comparison's float64 copies of the whole pass 80 GB)
        def element(grads, b=b):  # (the parameters' gradients with the first)
            return {k: v[b] if k == "input0" else v for k, v in grads.items() if k == "input0" or b == 0}
        _assert_bf16_contract(out[b], element(got), exact_out[b], element(exact), lowp_out[b], element(lowp))


def _assert_bf16_contract(out, got, exact_out, exact, lowp_out, lowp):
    """The bf16 contract for the output and every gradient, float32 standing in for the exact values (its error is
    ~1e-3 of bf16's); a softmax's shift-invariant biases get their exact gradient, 0."""
    exact = {k: torch.zeros_like(v) if k in ZERO_GRADS else v for k, v in exact.items()}
    compare({"output": out, **got}, {"output": exact_out, **exact}, torch.bfloat16, {"output": lowp_out, **lowp})


@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison  # (gigabytes: filling them with NaN first costs more than the test)
def test_opm_past_2_31_elements():
    """The output (B, N, N, R) and its gradient pass 2**31 elements (N 4100, R 128; bf16): the last rows i against
    the reference (float32 for the exact, bf16 for the allowance), the output's gradient nonzero in them alone, so
    that every gradient is the reference's for those rows."""
    torch.manual_seed(0)
    mod = randomize(OuterProductMean(16, 128, 8, normalization="count_ij", projection_bias=False), 1).cuda().bfloat16()
    S, N, rows = 2, 4100, 3
    x = torch.randn(1, S, N, 16, device="cuda", dtype=torch.bfloat16)
    mask = (torch.rand(1, S, N, device="cuda") > 0.1).float()
    grad = _last_rows_gradient((1, N, N, 128), rows, 1, torch.bfloat16)
    out, got = _fused_step(mod, [x, mask], grad, 1)
    assert out.numel() > 2**31
    out = out[:, -rows:].clone()
    got = {k: v.clone() for k, v in got.items()}
    del grad
    torch.cuda.empty_cache()

    def reference(dtype):
        ref = {n: p.detach().to(dtype).requires_grad_() for n, p in mod.named_parameters()}
        xr = x.detach().to(dtype).requires_grad_()
        a, b, counts = outer_product_mean_projections(xr, mask, ref["layer_norm.weight"], ref["layer_norm.bias"],
                                                      ref["proj_a.weight"], None, ref["proj_b.weight"], None)
        o = outer_product_mean_rows(a[:, :, -rows:], b, counts[:, :, -rows:], counts, ref["out_proj.weight"],
                                    ref["out_proj.bias"], "count_ij")
        o.backward(_last_rows_gradient((1, N, N, 128), rows, 1, dtype)[:, -rows:])
        return o.detach(), {"input0": xr.grad, **{n: t.grad for n, t in ref.items()}}

    exact_out, exact = reference(torch.float32)
    lowp_out, lowp = reference(torch.bfloat16)
    _assert_bf16_contract(out, got, exact_out, exact, lowp_out, lowp)


@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison
def test_row_attention_past_2_31_elements():
    """The projections (B, S, N, 4H) pass 2**31 elements (S 2049, N 2048, H 128; bf16): the last MSA row against the
    reference given the pair bias (rows are independent), the output's gradient nonzero there alone."""
    torch.manual_seed(0)
    mod = randomize(MSARowAttentionWithPairBias(128, 8, 4), 1).cuda().bfloat16()
    S, N = 2049, 2048
    x = torch.randn(1, S, N, 128, device="cuda", dtype=torch.bfloat16)
    z = torch.randn(1, N, N, 8, device="cuda", dtype=torch.bfloat16)
    mask = (torch.rand(1, S, N, device="cuda") > 0.1).float()
    last = x[:, -1:].clone()
    grad = _last_rows_gradient((1, S, N, 128), 1, 1, torch.bfloat16)
    out, got = _fused_step(mod, [x, z, mask], grad, 2)
    assert S * N * 4 * 128 > 2**31
    assert not got["input0"][:, :-1].any()
    out, got["input0"] = out[:, -1:].clone(), got["input0"][:, -1:].clone()
    got = {k: v.clone() for k, v in got.items()}
    del grad, x
    torch.cuda.empty_cache()

    def reference(dtype):
        ref = {n: p.detach().to(dtype).requires_grad_() for n, p in mod.named_parameters()}
        xr, zr = last.detach().to(dtype).clone().requires_grad_(), z.detach().to(dtype).requires_grad_()
        bias = torch.nn.functional.linear(zr, ref["pair_bias.weight"], ref["pair_bias.bias"]).permute(0, 3, 1, 2)
        o = msa_row_attention_with_bias(xr, bias, mask[:, -1:], *(ref[f"{layer}.{kind}"] for layer in (
            "layer_norm", "query", "key", "value", "gate", "out_proj") for kind in ("weight", "bias")), num_heads=4)
        o.backward(_last_rows_gradient((1, S, N, 128), 1, 1, dtype)[:, -1:])
        return o.detach(), {"input0": xr.grad, "input1": zr.grad, **{n: t.grad for n, t in ref.items()}}

    exact_out, exact = reference(torch.float32)
    lowp_out, lowp = reference(torch.bfloat16)
    _assert_bf16_contract(out, got, exact_out, exact, lowp_out, lowp)


@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison
def test_pair_weighted_averaging_past_2_31_elements():
    """The values and weighted sums (h, B, N, S, C) and the pair (B, N, N, c_z) pass 2**31 elements (S 2048, N 4100,
    8 heads of 32, c_z 128; bf16): the last MSA row against the reference (rows are independent given the weights),
    the output's gradient nonzero there alone."""
    torch.manual_seed(0)
    mod = randomize(PairWeightedAveraging(64, 128, 32, 8), 1).cuda().bfloat16()
    S, N = 2048, 4100
    m = torch.randn(1, S, N, 64, device="cuda", dtype=torch.bfloat16)
    z = torch.randn(1, N, N, 128, device="cuda", dtype=torch.bfloat16)
    mask = torch.rand(1, N, N, device="cuda") > 0.1
    last = m[:, -1:].clone()
    grad = _last_rows_gradient((1, S, N, 64), 1, 1, torch.bfloat16)
    out, got = _fused_step(mod, [m, z, mask], grad, 2)
    assert S * N * 256 > 2**31 and z.numel() > 2**31
    assert not got["input0"][:, :-1].any()
    out, got["input0"] = out[:, -1:].clone(), got["input0"][:, -1:].clone()
    del grad, m
    z.grad = None  # (held in `got`)
    torch.cuda.empty_cache()

    def reference(dtype):  # (the bf16 one first: the module is then made float32)
        ref = mod.to(dtype)
        mr, zr = last.detach().to(dtype).clone().requires_grad_(), z.detach().to(dtype).requires_grad_()
        ref.zero_grad()
        o = ref(mr, zr, mask, impl="torch")
        o.backward(_last_rows_gradient((1, S, N, 64), 1, 1, dtype)[:, -1:])
        return o.detach(), {"input0": mr.grad, "input1": zr.grad, **{n: p.grad for n, p in ref.named_parameters()}}

    lowp_out, lowp = reference(torch.bfloat16)
    exact_out, exact = reference(torch.float32)
    for grads_ in (got, lowp, exact):  # the pair's gradient: its last rows i, past 2**31 elements (all of it would
        grads_["input1"] = grads_["input1"][:, -64:]  # take 34 GiB in float64 to compare)
    _assert_bf16_contract(out, got, exact_out, exact, lowp_out, lowp)


@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison
def test_triangle_attention_past_2_31_elements():
    """The joined projections (B, N, N, 4H + 16) pass 2**31 elements (N 2048, 4 heads of 32, c 128; bf16): the last
    row i against the reference given the bias from the whole pair (rows are independent given it), the output's
    gradient nonzero there alone, so that the pair's gradient (every (j, k) through the bias) is the reference's."""
    torch.manual_seed(0)
    mod = randomize(TriangleAttention(128, 32, 4), 1).cuda().bfloat16()
    N = 2048
    z = torch.randn(1, N, N, 128, device="cuda", dtype=torch.bfloat16)
    mask = (torch.rand(1, N, N, device="cuda") > 0.1).float()
    grad = _last_rows_gradient((1, N, N, 128), 1, 1, torch.bfloat16)
    out, got = _fused_step(mod, [z, mask], grad, 1)
    assert N * N * (4 * 128 + 16) > 2**31
    out = out[:, -1:].clone()
    got = {k: v.clone() for k, v in got.items()}
    del grad
    z.grad = None  # (held in `got`)
    torch.cuda.empty_cache()

    def reference(dtype):
        ref = {n: p.detach().to(dtype).requires_grad_() for n, p in mod.named_parameters()}
        zr = z.detach().to(dtype).requires_grad_()
        x = torch.nn.functional.layer_norm(zr, (128,), ref["layer_norm.weight"], ref["layer_norm.bias"])
        bias = torch.nn.functional.linear(x, ref["linear.weight"]).permute(0, 3, 1, 2)  # (1, h, J, K)
        o = msa_row_attention_with_bias(zr[:, -1:], bias, mask[:, -1:], ref["layer_norm.weight"], ref["layer_norm.bias"],
                                        *(t for name in ("q", "k", "v", "g", "o") for t in (
                                            ref[f"mha.linear_{name}.weight"], ref.get(f"mha.linear_{name}.bias"))),
                                        num_heads=4, mask_mode="add")
        o.backward(_last_rows_gradient((1, N, N, 128), 1, 1, dtype)[:, -1:])
        return o.detach(), {"input0": zr.grad, **{n: t.grad for n, t in ref.items()}}

    lowp_out, lowp = reference(torch.bfloat16)
    exact_out, exact = reference(torch.float32)
    _assert_bf16_contract(out, got, exact_out, exact, lowp_out, lowp)


@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison
def test_triangle_multiplication_past_2_31_elements():
    """The input projections' gradient (4c + c_z, B, N, N) passes 2**31 elements, p and g (4c planes) reach it (N 2048,
    c = c_z = 128; bf16): the whole output and every gradient against the reference in float32 (exact) and bf16 (the
    allowance)."""
    torch.manual_seed(0)
    mod = randomize(TriangleMultiplication(128), 1).cuda().bfloat16()
    N = 2048
    z = torch.randn(1, N, N, 128, device="cuda", dtype=torch.bfloat16)
    mask = (torch.rand(1, N, N, device="cuda") > 0.1).float()
    grad = torch.randn(1, N, N, 128, device="cuda", dtype=torch.bfloat16)
    out, got = _fused_step(mod, [z, mask], grad, 1)
    assert (4 * 128 + 128) * N * N > 2**31
    z.grad = None  # (held in `got`)
    _assert_like_module_reference(mod, z, mask, grad, out, got)


@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison
def test_triangle_multiplication_channel_planes_past_2_31_elements():
    """The last channels' planes of a, b, t and their gradients (2c or c planes of B N N elements) begin past 2**31
    elements (B 8, N 1460, c = c_z = 128; bf16), as at B 1 from N 4113 on: the whole output and every gradient
    against the reference in float32 (exact) and bf16 (the allowance)."""
    torch.manual_seed(0)
    mod = randomize(TriangleMultiplication(128), 1).cuda().bfloat16()
    B, N = 8, 1460
    z = torch.randn(B, N, N, 128, device="cuda", dtype=torch.bfloat16)
    mask = (torch.rand(B, N, N, device="cuda") > 0.1).float()
    grad = torch.randn(B, N, N, 128, device="cuda", dtype=torch.bfloat16)
    out, got = _fused_step(mod, [z, mask], grad, 1)
    assert 127 * B * N * N > 2**31
    z.grad = None  # (held in `got`)
    _assert_like_module_reference(mod, z, mask, grad, out, got)


@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison
def test_transition_past_2_31_elements():
    """The pre-activations' gradient (M, 2H) passes 2**31 elements (M = 2**21 + 17 rows, c 128, H 512; bf16): the whole
    output and every gradient against the reference in float32 (exact) and bf16 (the allowance)."""
    torch.manual_seed(0)
    mod = randomize(Transition(128, 512), 1).cuda().bfloat16()
    M = 2**21 + 17
    x = torch.randn(1, M, 128, device="cuda", dtype=torch.bfloat16)
    grad = torch.randn(1, M, 128, device="cuda", dtype=torch.bfloat16)
    out, got = _fused_step(mod, [x, None], grad, 1)
    assert M * 2 * 512 > 2**31
    x.grad = None  # (held in `got`)
    _assert_like_module_reference(mod, x, None, grad, out, got)

"""The GPU tier's training checks: every operation's gradients at the models' own widths with autotuning on, every
operation under torch.compile(fullgraph=True) and CUDA-graph replay through a training loop (weights updated in
place, new inputs each step), and one case per operation whose element offsets pass 2**31."""

import copy

import pytest
import torch

from evofuse import (
    AttentionPairBias,
    MSAColumnAttention,
    MSARowAttentionWithPairBias,
    OuterProductMean,
    PairWeightedAveraging,
    Transition,
    TriangleAttention,
    TriangleMultiplication,
)
from evofuse.reference import msa_row_attention_with_bias, outer_product_mean_projections, outer_product_mean_rows

from .contract import check_gradients, mask_form
from .helpers import ZERO_GRADS, compare, grads, random_mask, randomize, rebuild_kernels

pytestmark = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture
def autotuned(monkeypatch):
    """Every kernel autotuned over its fitting configs (the kernels rebuilt so that none keeps an untuned choice)."""
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")
    rebuild_kernels()
    yield
    rebuild_kernels()


# The models' own widths (S and N cut to 33 and 97: past one block of every kernel, not a multiple of any)
MODEL_CASES = {
    "opm-af2": lambda: OuterProductMean(256, 128, 32, normalization="count_ij_after"),  # AF2 / OpenFold
    "opm-boltz": lambda: OuterProductMean(64, 128, 32, normalization="count_ij", projection_bias=False),
    "opm-of3": lambda: OuterProductMean(64, 128, 32, normalization="count_ij_after", count_eps=1e-8,
                                        projection_bias=False),  # OpenFold3 / AF3 / Protenix
    "att-af2": lambda: MSARowAttentionWithPairBias(256, 128, 8, head_dim=32, qkv_bias=False, pair_layer_norm=True,
                                                   mask_mode="add"),  # OpenFold, OpenFold3's AF2-style block
    "pwa-boltz": lambda: PairWeightedAveraging(64, 128, 32, 8),
    "pwa-af3": lambda: PairWeightedAveraging(64, 128, 8, 8, inf=1e9, mask_mode="add"),  # AF3, Protenix, OpenFold3
    "tri-af2": lambda: TriangleAttention(128, 32, 4),  # OpenFold
    "tri-boltz": lambda: TriangleAttention(128, 32, 4, starting=False, gate_and_output_bias=False),  # Boltz, AF3
    "trimul-af2": lambda: TriangleMultiplication(128, 128, bias=True),  # OpenFold
    "trimul-boltz": lambda: TriangleMultiplication(128, outgoing=False),  # Boltz-2, AF3
    "col-af2": lambda: MSAColumnAttention(256, 32, 8),  # OpenFold
    "col-of3": lambda: MSAColumnAttention(256, 32, 8, gate_and_output_bias=False),  # OpenFold3's AF2-style block
    "trans-af2": lambda: Transition(256, 1024, activation="relu", bias=True),  # OpenFold's MSA transition
    "trans-boltz": lambda: Transition(128, 512),  # Boltz, AF3, Protenix, OpenFold3: the pair transition
    "trans-af3-single": lambda: Transition(384, 1536),  # AF3's single transition (rows past one 256-channel chunk)
    "apb-boltz": lambda: AttentionPairBias(384, 128, 16),  # Boltz-2's Pairformer single track (16 heads x 24)
    "apb-diffusion": lambda: AttentionPairBias(768, None, 16, compute_pair_bias=False),  # its token transformer
}


def _model_inputs(name, S=33, N=97, seed=1):
    mod = MODEL_CASES[name]()
    if name.startswith("apb"):  # the single representation (1, N, c_s), the pair or the bias, a padding token
        g = torch.Generator().manual_seed(seed)
        mask = torch.rand(1, N, generator=g) > 0.1
        mask[:, -1] = False
        channels = 128 if mod.compute_pair_bias else mod.num_heads
        return randomize(mod, seed), (torch.randn(1, N, mod.c_s, generator=g),
                                      torch.randn(1, N, N, channels, generator=g), mask)
    norm = (mod.norm_m if name.startswith("pwa") else mod.norm_in if name.startswith("trimul")
            else mod.norm if name.startswith("trans")
            else mod._msa_att.layer_norm_m if name.startswith("col") else mod.layer_norm)
    D = norm.normalized_shape[0]
    g = torch.Generator().manual_seed(seed)
    if name.startswith("tri") and not name.startswith("trans"):
        # the pair (1, N, N, 128) and its mask, a padding residue's pairs all masked
        mask = torch.rand(1, N, N, generator=g) > 0.1
        mask[:, -1] = mask[:, :, -1] = False
        return randomize(mod, seed), (torch.randn(1, N, N, D, generator=g), mask)
    x = torch.randn(1, S, N, D, generator=g)
    if name.startswith(("opm", "col", "trans")):
        return randomize(mod, seed), (x, random_mask(1, S, N, "rows", seed))
    z = torch.randn(1, N, N, 128, generator=g)
    mask = random_mask(1, S, N, "rows", seed) if name.startswith("att") else (torch.rand(1, N, N, generator=g) > 0.1)
    return randomize(mod, seed), (x, z, mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MODEL_CASES))
def test_gradients_at_the_models_widths(name, dtype, autotuned):
    """Output and every gradient against float64 at each model's widths, autotuned, float32 and bf16."""
    mod, inputs = _model_inputs(name)
    check_gradients(mod, inputs, dtype, "cuda", differentiable=len(inputs) - 1)


def _small_case(op, seed):
    """A module and inputs of `op` small enough for many steps."""
    name = {"opm": "opm-boltz", "att": "att-af2", "pwa": "pwa-boltz", "tri": "tri-boltz", "trimul": "trimul-boltz",
            "col": "col-of3", "trans": "trans-boltz", "apb": "apb-boltz"}[op]
    mod, inputs = _model_inputs(name, S=6, N=19, seed=seed)
    return mod, tuple(mask_form(t, "bool") if k == len(inputs) - 1 else t for k, t in enumerate(inputs))


def _cuda_graphed(mod, sample):
    """The module's training step through torch.cuda.make_graphed_callables (forward and backward captured once; a
    wrapper's forward replaced, the module's own left as it is)."""
    graphed = torch.cuda.make_graphed_callables(
        _Called(mod, lambda *inputs: mod(*inputs, impl="triton")),
        tuple(t.detach().clone().requires_grad_(t.is_floating_point() and t.dim() == 4) for t in sample))
    return lambda *inputs: graphed(*inputs)


@pytest.mark.no_poison
@pytest.mark.parametrize("mode", ["fullgraph", "reduce-overhead", "cuda-graph"])
@pytest.mark.parametrize("op", ["opm", "att", "pwa", "tri", "trimul", "col", "trans", "apb"])
def test_training_loop_under_compile_and_graphs(op, mode):
    """Three training steps of each operation under torch.compile(fullgraph=True), mode="reduce-overhead" and a
    captured CUDA graph, the weights updated in place and new inputs each step: outputs and every gradient as the
    eager module's at the same weights."""
    torch.compiler.reset()
    mod, first = _small_case(op, seed=1)
    mod = mod.cuda()
    on = tuple(t.cuda() for t in first)
    if mode == "cuda-graph":
        fn = _cuda_graphed(mod, on)
    else:
        compiled = torch.compile(mod, fullgraph=True) if mode == "fullgraph" else torch.compile(mod, mode=mode)
        fn = compiled
    for step in range(3):
        _, inputs = _small_case(op, seed=10 + step)
        inputs = tuple(t.cuda() for t in inputs)
        torch.compiler.cudagraph_mark_step_begin()
        out, got = grads(_Called(mod, fn), inputs, None)
        out = out.detach().clone()
        got = {k.removeprefix("mod."): v.clone() for k, v in got.items()}
        expected_out, expected = grads(mod, inputs, "triton")
        torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
        assert got.keys() == expected.keys()
        for k in expected:
            torch.testing.assert_close(got[k], expected[k], rtol=1e-5, atol=1e-5, msg=f"step {step}: {k}")
        with torch.no_grad():  # an optimizer's step: every weight changed in place
            for p in mod.parameters():
                p.add_(0.05 * torch.randn_like(p))


class _Called(torch.nn.Module):
    """`fn` called as the module `mod` (its parameters, for `grads`), the impl argument dropped."""

    def __init__(self, mod, fn):
        super().__init__()
        self.mod, self.fn = mod, fn

    def forward(self, *inputs, impl=None):
        return self.fn(*inputs)


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

"""The custom ops as torch.library sees them: schema, fake (meta) implementation, autograd registration and
AOT dispatch (torch.library.opcheck), on small inputs."""

import pytest
import torch

from evofuse.ops.outer_product_mean.op import outer_product_mean_op
from evofuse.ops.row_attention.op import joined_qkvg, row_attention_op
from evofuse.stages.attention.core import core_backward_op
from evofuse.stages.layer_norm_backward import layer_norm_backward_op

from .conftest import DEVICE
from .helpers import att_module, opm_module, random_mask


def _opm_args(train, mask_kind="random", projection_bias=True, dtype=torch.float32, given_counts=False):
    """The op's arguments; `given_counts`: the counts passed in (as for an MSA split by its rows), not made."""
    from evofuse.ops.outer_product_mean.op import counts_of

    mod = opm_module(16, 6, 8, seed=1).to(DEVICE, dtype)
    x = torch.randn(1, 3, 5, 16, device=DEVICE, dtype=dtype, requires_grad=train)
    mask = random_mask(1, 3, 5, mask_kind, 2)
    mask = None if mask is None else mask.to(DEVICE)
    params = [p.detach().requires_grad_(train) for p in mod.parameters()]
    if not projection_bias:  # proj_a's and proj_b's biases None
        params[3] = params[5] = None
    counts = counts_of(mask, "count_ij_after").contiguous() if given_counts else None
    return (x, mask, *params, counts, "count_ij_after", 1e-3, "default", train)


def _att_args(train, openfold=False):
    """The op's arguments; `openfold`: inner width 12 for msa_dim 16, no q/k/v biases, the pair layer-normed."""
    kw = dict(head_dim=6, qkv_bias=False, pair_layer_norm=True) if openfold else {}
    mod = att_module(16, 4, 2, seed=3, **kw).to(DEVICE)
    x = torch.randn(1, 2, 5, 16, device=DEVICE, requires_grad=train)
    z = torch.randn(1, 5, 5, 4, device=DEVICE, requires_grad=train)
    p = {name: t.detach().requires_grad_(train) for name, t in mod.named_parameters()}
    names = ["layer_norm.weight", "layer_norm.bias"] + [f"{layer}.{kind}" for layer in (
        "query", "key", "value", "gate", "out_proj", "pair_bias") for kind in ("weight", "bias")] + [
        "pair_norm.weight", "pair_norm.bias"]
    params = [p.get(name) for name in names]
    with torch.no_grad():  # (the op's own leaves)
        qkvg = [t if t is None else t.requires_grad_(train) for t in joined_qkvg(params[2:10:2], params[3:10:2])]
    return (x, z, random_mask(1, 2, 5, "rows", 4).to(DEVICE), *params[:2], *qkvg, *params[10:], 2,
            "add" if openfold else "replace", "default", train)


@pytest.mark.no_poison
@pytest.mark.parametrize("store_xn, grad_width, store_dx, masked", [
    (True, 24, True, False), (False, 24, False, False), (True, 0, False, False), (False, 5, True, False),
    (False, 5, True, True)])
def test_opcheck_layer_norm_backward(store_xn, grad_width, store_dx, masked):
    """grad_width 24: the gradient of LayerNorm(x); 5: a linear's output gradient with its weight (and a row mask
    where masked); 0: none."""
    x = torch.randn(7, 24, device=DEVICE)
    grad = torch.randn(7, grad_width, device=DEVICE) if grad_width else None
    weight = torch.randn(5, 24, device=DEVICE) if grad_width == 5 else None
    mask = (torch.rand(7) > 0.3).to(DEVICE) if masked else None
    torch.library.opcheck(layer_norm_backward_op, (x, torch.randn(24, device=DEVICE), torch.randn(24, device=DEVICE),
                                                   grad, weight, mask, store_xn, store_dx, "default"))


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_outer_product_mean(train):
    torch.library.opcheck(outer_product_mean_op, _opm_args(train))
    torch.library.opcheck(outer_product_mean_op, _opm_args(train, "none"))
    torch.library.opcheck(outer_product_mean_op, _opm_args(train, projection_bias=False))
    torch.library.opcheck(outer_product_mean_op, _opm_args(train, given_counts=True))
    # 16-bit inputs: the outer products by cuBLAS (the interpreter's bfloat16 products are not checked)
    torch.library.opcheck(outer_product_mean_op, _opm_args(train, dtype=torch.float16 if DEVICE == "cpu" else torch.bfloat16))


@pytest.mark.no_poison
@pytest.mark.parametrize("need_ab, need_weight", [(True, True), (True, False), (False, True)])
def test_opcheck_outer_product_mean_core_backward(need_ab, need_weight):
    from evofuse.ops.outer_product_mean.op import core_backward_op

    ab, grad, weight = (t.to(DEVICE) for t in (torch.randn(2, 3, 5, 16), torch.randn(2, 5, 5, 6), torch.randn(6, 64)))
    counts = torch.randint(0, 4, (2, 5, 5), dtype=torch.float32).to(DEVICE)
    for counts, normalization in ((None, "count_i"), (counts, "count_ij"), (counts, "count_ij_after")):
        torch.library.opcheck(core_backward_op, (ab, grad, counts, weight, normalization, 1e-3, need_ab, need_weight,
                                                 "default"))


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_row_attention(train):
    torch.library.opcheck(row_attention_op, _att_args(train))
    torch.library.opcheck(row_attention_op, _att_args(train, openfold=True))


@pytest.mark.no_poison
def test_opcheck_row_attention_core_backward():
    args = _att_args(True)
    with torch.no_grad():
        _, qkvg, gated, lse, z = row_attention_op(*(a.detach() if isinstance(a, torch.Tensor) else a for a in args))
    grad_out = torch.randn_like(args[0])
    torch.library.opcheck(core_backward_op, (qkvg, z, args[2], grad_out.detach(), args[7].detach(), gated, lse, 2,
                                             "replace", "default"))


def _tri_args(train, transpose_bias=False, mask=True, gate_bias=True, chunk_rows=0, given_bias=False):
    """The triangle attention op's arguments: a pair (1, 6, 6, 8), 2 heads of 4, the projections joined (without
    the bias's, and the bias (1, 2, 6, 6) given, where `given_bias`); an inference call in chunks of `chunk_rows`
    rows (0: all at once off CUDA)."""
    from evofuse import TriangleAttention
    from evofuse.ops.triangle_attention.op import joined_projections

    from .helpers import randomize

    mod = randomize(TriangleAttention(8, 4, 2, gate_and_output_bias=gate_bias), 7).to(DEVICE)
    x = torch.randn(1, 6, 6, 8, device=DEVICE, requires_grad=train)
    pair_mask = random_mask(1, 6, 6, "rows", 8).to(DEVICE) if mask else None
    mha = mod.mha
    with torch.no_grad():  # (the op's own leaves)
        proj = [t if t is None else t.requires_grad_(train) for t in joined_projections(
            [mha.linear_q.weight, mha.linear_k.weight, mha.linear_v.weight, mha.linear_g.weight],
            None if given_bias else mod.linear.weight, mha.linear_g.bias)]
    bias = torch.randn(1, 2, 6, 6, device=DEVICE, requires_grad=train) if given_bias else None
    params = [t if t is None else t.detach().requires_grad_(train) for t in (
        mod.layer_norm.weight, mod.layer_norm.bias, *proj, mha.linear_o.weight, mha.linear_o.bias)]
    return (x, pair_mask, *params, bias, 2, transpose_bias, "default", chunk_rows, train)


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_triangle_attention(train):
    from evofuse.ops.triangle_attention.op import triangle_attention_op

    torch.library.opcheck(triangle_attention_op, _tri_args(train))
    torch.library.opcheck(triangle_attention_op, _tri_args(train, transpose_bias=True, mask=False, gate_bias=False))
    torch.library.opcheck(triangle_attention_op, _tri_args(train, transpose_bias=True, chunk_rows=4))
    torch.library.opcheck(triangle_attention_op, _tri_args(train, given_bias=True))
    torch.library.opcheck(triangle_attention_op, _tri_args(train, given_bias=True, chunk_rows=4))


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_triangle_bias(train):
    from evofuse.ops.triangle_attention.op import triangle_bias_op

    x, _, lnw, lnb, *_ = _tri_args(train)
    linear_weight = torch.randn(2, 8, device=DEVICE, requires_grad=train)
    for transpose_bias in (False, True):
        torch.library.opcheck(triangle_bias_op, (x, lnw, lnb, linear_weight, transpose_bias, "default", train))


def _trimul_args(train, outgoing=True, mask=True, bias=True):
    """The triangle multiplication op's arguments: a pair (1, 6, 6, 8), c 4, the input projections joined."""
    from evofuse import TriangleMultiplication
    from evofuse.ops.triangle_multiplication.op import joined_inputs

    from .helpers import randomize

    mod = randomize(TriangleMultiplication(8, 4, outgoing=outgoing, bias=bias), 9).to(DEVICE)
    x = torch.randn(1, 6, 6, 8, device=DEVICE, requires_grad=train)
    pair_mask = random_mask(1, 6, 6, "rows", 10).to(DEVICE) if mask else None
    with torch.no_grad():  # (the op's own leaves)
        joined = [t if t is None else t.requires_grad_(train) for t in joined_inputs(
            [mod.p_in.weight, mod.g_in.weight, mod.g_out.weight], [mod.p_in.bias, mod.g_in.bias, mod.g_out.bias])]
    params = [t if t is None else t.detach().requires_grad_(train) for t in (
        mod.norm_in.weight, mod.norm_in.bias, *joined, mod.norm_out.weight, mod.norm_out.bias, mod.p_out.weight,
        mod.p_out.bias)]
    return (x, pair_mask, *params, outgoing, "default", 0, train)


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_triangle_multiplication(train):
    from evofuse.ops.triangle_multiplication.op import triangle_multiplication_op

    torch.library.opcheck(triangle_multiplication_op, _trimul_args(train))
    torch.library.opcheck(triangle_multiplication_op, _trimul_args(train, outgoing=False, mask=False, bias=False))
    chunked = _trimul_args(train, outgoing=False)  # (an inference call in chunks of 4 output rows)
    torch.library.opcheck(triangle_multiplication_op, (*chunked[:-2], 4, chunked[-1]))


def _apb_args(train, given=False, mask=True):
    """Attention with pair bias's op arguments: a single representation (2, 5, 16), 2 heads of 8, the pair (2, 5, 5,
    8) or a given bias (2, 5, 5, 2); q, k, v and the gate joined."""
    from evofuse import AttentionPairBias
    from evofuse.ops.row_attention.op import joined_qkvg

    from .helpers import randomize

    mod = randomize(AttentionPairBias(16, 8, 2, compute_pair_bias=not given), 17).to(DEVICE)
    s = torch.randn(2, 5, 16, device=DEVICE, requires_grad=train)
    z = torch.randn(2, 5, 5, 2 if given else 8, device=DEVICE, requires_grad=train)
    keys = (torch.rand(2, 5, device=DEVICE) > 0.3).float() if mask else None
    with torch.no_grad():  # (the op's own leaves)
        qkvg = [t if t is None else t.requires_grad_(train) for t in joined_qkvg(
            [mod.proj_q.weight, mod.proj_k.weight, mod.proj_v.weight, mod.proj_g.weight],
            [mod.proj_q.bias, None, None, None])]
    pair = (None, None, None) if given else tuple(t.detach().requires_grad_(train) for t in (
        mod.proj_z[0].weight, mod.proj_z[0].bias, mod.proj_z[1].weight))
    return (s, z, keys, *qkvg, mod.proj_o.weight.detach().requires_grad_(train), *pair, 2, "default", train)


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_attention_pair_bias(train):
    from evofuse.ops.attention_pair_bias.op import attention_pair_bias_op

    torch.library.opcheck(attention_pair_bias_op, _apb_args(train))
    torch.library.opcheck(attention_pair_bias_op, _apb_args(train, given=True, mask=False))


def _col_args(train, mask=True, bias=True):
    """The column attention op's arguments: the transposed view of an MSA (1, 5, 6, 8), 2 heads of 4."""
    from evofuse import MSAColumnAttention

    from .helpers import randomize

    mod = randomize(MSAColumnAttention(8, 4, 2, gate_and_output_bias=bias), 11).to(DEVICE)
    m = torch.randn(1, 5, 6, 8, device=DEVICE, requires_grad=train)
    msa_mask = random_mask(1, 5, 6, "rows", 12).to(DEVICE) if mask else None
    ln, mha = mod._msa_att.layer_norm_m, mod._msa_att.mha
    with torch.no_grad():  # (the op's own leaves)
        qkvg = [t if t is None else t.requires_grad_(train) for t in joined_qkvg(
            [mha.linear_q.weight, mha.linear_k.weight, mha.linear_v.weight, mha.linear_g.weight],
            [None, None, None, mha.linear_g.bias])]
    params = [t if t is None else t.detach().requires_grad_(train) for t in (
        ln.weight, ln.bias, *qkvg, mha.linear_o.weight, mha.linear_o.bias)]
    return (m.transpose(1, 2), None if msa_mask is None else msa_mask.transpose(1, 2), *params, 2, "default", train)


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_msa_column_attention(train):
    from evofuse.ops.msa_column_attention.op import msa_column_attention_op

    torch.library.opcheck(msa_column_attention_op, _col_args(train))
    torch.library.opcheck(msa_column_attention_op, _col_args(train, mask=False, bias=False))


def _gcol_args(train, mask=True, query_bias=False):
    """The global column attention op's arguments: the transposed view of an MSA (1, 5, 6, 8), 2 heads of 4; the
    projections joined as the functional form joins them (gate, query, key, value)."""
    from evofuse import MSAColumnGlobalAttention

    from .helpers import randomize

    mod = randomize(MSAColumnGlobalAttention(8, 4, 2), 11).to(DEVICE)
    m = torch.randn(1, 5, 6, 8, device=DEVICE, requires_grad=train)
    msa_mask = random_mask(1, 5, 6, "rows", 12).to(DEVICE) if mask else None
    att = mod.global_attention
    proj_bias = torch.cat([att.linear_g.bias, att.linear_g.bias.new_zeros(8 + 4 + 4)])
    b_q = torch.randn(8, device=DEVICE) if query_bias else None
    params = [t if t is None else t.detach().requires_grad_(train) for t in (
        mod.layer_norm_m.weight, mod.layer_norm_m.bias,
        torch.cat([att.linear_g.weight, att.linear_q.weight, att.linear_k.weight, att.linear_v.weight]), proj_bias, b_q,
        att.linear_o.weight, att.linear_o.bias)]
    return (m.transpose(1, 2), None if msa_mask is None else msa_mask.transpose(1, 2), *params, 2, 1e9, 1e-8,
            "default", train)


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_msa_column_global_attention(train):
    from evofuse.ops.msa_column_global_attention.op import msa_column_global_attention_op

    torch.library.opcheck(msa_column_global_attention_op, _gcol_args(train))
    torch.library.opcheck(msa_column_global_attention_op, _gcol_args(train, mask=False, query_bias=True))


@pytest.mark.no_poison
@pytest.mark.parametrize("mask", [True, False])
def test_opcheck_msa_column_global_attention_core_backward(mask):
    from evofuse.ops.msa_column_global_attention.op import core_backward_op, msa_column_global_attention_op

    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in _gcol_args(True, mask=mask)]
    _, proj, q = msa_column_global_attention_op(*args)
    du = torch.randn(*proj.shape[:3], 8, device=DEVICE)
    torch.library.opcheck(core_backward_op, (proj, args[1], q, du, 2, 1e9, 1e-8))


def _trans_args(train, glu=True, mask=True, bias=True):
    """The transition op's arguments: rows (2, 5, 8), hidden 12, output 8, a and b joined (SwiGLU)."""
    from evofuse import Transition

    from .helpers import randomize

    mod = randomize(Transition(8, 12, activation="swiglu" if glu else "relu", bias=bias), 13).to(DEVICE)
    x = torch.randn(2, 5, 8, device=DEVICE, requires_grad=train)
    row_mask = random_mask(1, 2, 5, "rows", 14)[0].to(DEVICE) if mask else None
    with torch.no_grad():  # (the op's own leaves)
        w_in = torch.cat([mod.fc1.weight, mod.fc2.weight]) if glu else mod.fc1.weight.clone()
        b_in = None if not bias else torch.cat([mod.fc1.bias, mod.fc2.bias]) if glu else mod.fc1.bias.clone()
    params = [t if t is None else t.detach().requires_grad_(train) for t in (
        mod.norm.weight, mod.norm.bias, w_in, b_in, mod.fc3.weight, mod.fc3.bias)]
    return (x, row_mask, *params, glu, "default", train)


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_transition(train):
    from evofuse.ops.transition.op import core_backward_op, transition_op

    torch.library.opcheck(transition_op, _trans_args(train))
    torch.library.opcheck(transition_op, _trans_args(train, glu=False, mask=False, bias=False))
    for glu in (True, False):
        x, lnw, lnb, w_out = (torch.randn(*shape, device=DEVICE) for shape in ((10, 8), (8,), (8,), (8, 12)))
        w_in, b_in = torch.randn(24 if glu else 12, 8, device=DEVICE), torch.randn(24 if glu else 12, device=DEVICE)
        for grad, mask in ((torch.randn(10, 8, device=DEVICE), (torch.rand(10, device=DEVICE) > 0.3).float()),
                           (torch.ones(()).expand(10, 8).to(DEVICE), None)):  # (a broadcast gradient too)
            torch.library.opcheck(core_backward_op, (x, lnw, lnb, w_in, b_in if glu else None, grad, mask, w_out, glu,
                                                     "default"))


@pytest.mark.no_poison
@pytest.mark.parametrize("outgoing, mask", [(True, True), (False, False)])
def test_opcheck_triangle_multiplication_core_backward(outgoing, mask):
    from evofuse.ops.triangle_multiplication.op import core_backward_op, triangle_multiplication_op

    args = _trimul_args(True, outgoing=outgoing, mask=mask)
    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        out, t = triangle_multiplication_op(*plain)
    pair, pair_mask, *params = plain[:10]
    needs = [True] * 9 if mask else [True, False, True, True, True, False, True, True, False]
    for grad_out in (torch.randn_like(out), torch.ones((), device=DEVICE).expand_as(out)):  # (a broadcast gradient too)
        torch.library.opcheck(core_backward_op, (grad_out, pair, pair_mask, *params, t, outgoing, "default", needs))


def test_triangle_projection_rows_stay_aligned():
    """The joined projection's width is a multiple of 16 (every row of it starts aligned for the attention kernels),
    its padding rows zero and without a gradient, its bias the gate's alone."""
    from evofuse.ops.triangle_attention.op import joined_projections

    weights = [torch.randn(12, 8, requires_grad=True) for _ in range(4)]
    bias_weight, gate_bias = torch.randn(3, 8, requires_grad=True), torch.randn(12)
    w, b = joined_projections(weights, bias_weight, gate_bias)
    assert w.shape == (64, 8) and b.shape == (64,)
    torch.testing.assert_close(w[48:51], bias_weight)
    assert not w[51:].any() and not b[:36].any() and not b[48:].any()
    torch.testing.assert_close(b[36:48], gate_bias)
    assert joined_projections(weights, bias_weight, None)[1] is None


def test_every_fused_size_has_a_config(monkeypatch):
    """The config tables hold a tile that fits each hidden_dim and form of operands the fused path takes."""
    from evofuse.ops.outer_product_mean import configs
    from evofuse.ops.outer_product_mean.op import FUSED_HIDDEN_DIMS

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    for c in FUSED_HIDDEN_DIMS:
        for terms in (1, 3):
            assert configs.candidates(c, terms), (c, terms)
        for R in (1, 17, 128, 300):
            assert configs.project_candidates(c, R), (c, R)


def _pwa_args(train, mask=True, mask_mode="relative"):
    from evofuse import PairWeightedAveraging

    from .helpers import randomize

    mod = randomize(PairWeightedAveraging(16, 8, 8, 2), 5).to(DEVICE)
    m = torch.randn(1, 3, 5, 16, device=DEVICE, requires_grad=train)
    z = torch.randn(1, 5, 5, 8, device=DEVICE, requires_grad=train)
    pair_mask = (torch.rand(1, 5, 5) > 0.3).float().to(DEVICE) if mask else None
    params = list(mod.parameters())
    params[4:6] = [torch.cat(params[4:6])]  # proj_m's and proj_g's weights stacked, as the op takes them
    params = [p.detach().requires_grad_(train) for p in params]
    return (m, z, pair_mask, *params, 1e6, mask_mode, "default", train)


@pytest.mark.no_poison
@pytest.mark.parametrize("train", [False, True])
def test_opcheck_pair_weighted_averaging(train):
    from evofuse.ops.pair_weighted_averaging.op import pair_weighted_averaging_op

    torch.library.opcheck(pair_weighted_averaging_op, _pwa_args(train))
    torch.library.opcheck(pair_weighted_averaging_op, _pwa_args(train, mask=False))
    torch.library.opcheck(pair_weighted_averaging_op, _pwa_args(train, mask_mode="add"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pair_weighted_averaging_keeps_nothing_for_inference(dtype):
    """Without a backward the op returns no weighted sums u and no float32 weights (the softmax writes only the
    weights the sums take), and the same output as with them; with one, u (h, B, N, S, C) in the input's dtype."""
    from evofuse.ops.pair_weighted_averaging.op import pair_weighted_averaging_op

    args = [a.detach().to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in _pwa_args(False)[:-1]]
    out, v, u, w = pair_weighted_averaging_op(*args, False)
    out_train, _, u_train, w_train = pair_weighted_averaging_op(*args, True)
    assert u.numel() == 0 and w.numel() == 0
    assert u_train.shape == v.shape and u_train.dtype == dtype
    assert w_train.shape == (2, 1, 5, 5) and w_train.dtype == torch.float32
    torch.testing.assert_close(out, out_train, rtol=0, atol=0)

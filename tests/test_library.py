"""The fused operations as torch.library custom ops: opcheck, torch.compile with fullgraph=True, CUDA graphs."""

import pytest
import torch

from evofuse._library import (
    layer_norm_backward_op,
    ln_linear_backward_op,
    ln_project_op,
    msa_row_attention_core_backward_op,
    msa_row_attention_op,
    msa_row_attention_train_op,
    opm_normalized_grad_op,
    opm_outer_product_grad_op,
    opm_outer_products_op,
    opm_project_op,
    opm_weight_grad_op,
    outer_product_mean_op,
    outer_product_mean_train_op,
    sum_partials_op,
)

from .conftest import DEVICE
from .helpers import att_module, opm_module, random_mask


def opm_args(requires_grad, dtype=torch.float32):
    mod = opm_module(8, 5, 8, seed=1).to(DEVICE).to(dtype)
    x = torch.randn(2, 3, 5, 8, device=DEVICE).to(dtype).requires_grad_(requires_grad)
    params = [p.detach().clone().requires_grad_(requires_grad) for p in mod.parameters()]
    return (x, random_mask(2, 3, 5, "rows", 1).to(DEVICE), params, "af2", "default")


def opm16_args(requires_grad):
    """float16: the training op keeps the projections (the backward's `ln_linear_backward` takes them)."""
    return opm_args(requires_grad, torch.float16)


def att_args(requires_grad):
    mod = att_module(16, 4, 2, seed=2).to(DEVICE)
    x = torch.randn(1, 3, 6, 16, device=DEVICE, requires_grad=requires_grad)
    z = torch.randn(1, 6, 6, 4, device=DEVICE, requires_grad=requires_grad)
    params = [p.detach().clone().requires_grad_(requires_grad) for p in mod.parameters()]
    return (x, z, random_mask(1, 3, 6, "rows", 2).to(DEVICE), params, 2, "default")


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("op, make_args", [(outer_product_mean_op, opm_args), (outer_product_mean_train_op, opm_args),
                                           (outer_product_mean_train_op, opm16_args), (msa_row_attention_op, att_args),
                                           (msa_row_attention_train_op, att_args)],
                         ids=["opm", "opm-train", "opm-train-float16", "att", "att-train"])
def test_opcheck(op, make_args, requires_grad):
    torch.library.opcheck(op, make_args(requires_grad),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


@pytest.mark.parametrize("need_dz", [True, False])
@pytest.mark.parametrize("saved", [False, True], ids=["recompute", "saved"])
def test_opcheck_attention_core_backward(need_dz, saved):
    from evofuse.ops.row_attention import _attention_core

    g = torch.Generator().manual_seed(3)
    qkvg = torch.randn(1, 2, 9, 4 * 16, generator=g).to(DEVICE)
    z = torch.randn(1, 2, 9, 9, generator=g).to(DEVICE)
    d_gated = torch.randn(1, 2, 9, 16, generator=g).to(DEVICE)
    mask = random_mask(1, 2, 9, "rows", 3).to(DEVICE)
    args = (qkvg, z, mask, d_gated, 2, "default", need_dz)
    if saved:  # the forward's un-gated output and statistics
        o, stats = torch.empty(1, 2, 9, 16, device=DEVICE), torch.empty(2, 1, 2, 2, 9, device=DEVICE)
        _attention_core(qkvg.clone(), z, mask, 2, "default", out=o, stats=stats, gate=False)
        args += (o, stats)
    torch.library.opcheck(msa_row_attention_core_backward_op, args, test_utils=("test_schema", "test_faketensor"))


def test_opcheck_backward_ops():
    g = torch.Generator().manual_seed(5)
    ab = torch.randn(2, 1, 3, 9, 16, generator=g).to(DEVICE).half()  # a, b: (B, S, N, c)
    scale = torch.rand(1, 5, 9, generator=g).to(DEVICE)
    torch.library.opcheck(opm_outer_products_op, (ab[0][:, :, 2:7], ab[1], scale),
                          test_utils=("test_schema", "test_faketensor"))
    grad = torch.randn(1, 5, 9, 6, generator=g).to(DEVICE).half()
    w = torch.randn(6, 16 * 16, generator=g).to(DEVICE).half()
    x = torch.randn(1, 5 * 16, 9 * 16, generator=g).to(DEVICE).half()
    torch.library.opcheck(opm_outer_product_grad_op, (grad, w, 16), test_utils=("test_schema", "test_faketensor"))
    partials = torch.zeros(3, 6, 16 * 16, device=DEVICE)
    for accumulate in (False, True):
        torch.library.opcheck(opm_weight_grad_op, (grad, x, 16, partials, accumulate),
                              test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(opm_normalized_grad_op, (grad, scale, True), test_utils=("test_schema", "test_faketensor"))
    parts = [torch.randn(7, 5, generator=g).to(DEVICE), torch.randn(1, 40, generator=g).to(DEVICE)]
    torch.library.opcheck(sum_partials_op, (parts, torch.bfloat16), test_utils=("test_schema", "test_faketensor"))
    x = torch.randn(1, 2, 5, 16, generator=g).to(DEVICE).half()
    ln = [torch.ones(16, device=DEVICE).half(), torch.zeros(16, device=DEVICE).half()]
    ws = [torch.randn(k, 16, generator=g).to(DEVICE).half() for k in (8, 8)]
    bs = [torch.randn(k, generator=g).to(DEVICE).half() for k in (8, 8)]
    torch.library.opcheck(ln_project_op, (x, *ln, ws, bs), test_utils=("test_schema", "test_faketensor"))
    _, _, mean, rstd = ln_project_op(x, *ln, ws, bs)
    for need_x in (True, False):
        torch.library.opcheck(layer_norm_backward_op, (torch.randn_like(x), x, mean, rstd, ln[0], need_x),
                              test_utils=("test_schema", "test_faketensor"))
    mask = random_mask(1, 2, 5, "rows", 4).to(DEVICE)
    params = [*ln, ws[0], bs[0], ws[1], bs[1]]
    torch.library.opcheck(opm_project_op, (x, mask, params), test_utils=("test_schema", "test_faketensor"))
    dy = torch.randn(2, 1, 2, 5, 8, generator=g).to(DEVICE)  # da (x's dtype), db (float32, as summed over blocks)
    for need_x, out_dtype in ((True, torch.float32), (False, torch.float16)):
        torch.library.opcheck(ln_linear_backward_op, (x, *ln, torch.cat(ws), mask, dy[0].half(), dy[1], need_x, out_dtype),
                              test_utils=("test_schema", "test_faketensor"))


def test_attention_backward_from_the_forwards_statistics_equals_the_recompute(monkeypatch):
    """The training op keeps o and the statistics; the plain op's backward recomputes them. Same output
    (both forwards on the tiled path), gradients equal to float32 rounding: the backward's recomputed
    projections are IEEE products, the forward's float16 hi/lo ones (~2**-22 apart)."""
    import evofuse.ops.row_attention as ra

    monkeypatch.setattr(ra, "SMALL_MAX_N", 0)
    x, z, mask, params, heads, precision = att_args(True)
    results = []
    for op in (msa_row_attention_train_op, msa_row_attention_op):
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, z, *params)]
        out = op(leaves[0], leaves[1], mask, leaves[2:], heads, precision)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(4)).to(out))
        results.append([out.detach()] + [t.grad for t in leaves])
    torch.testing.assert_close(results[0][0], results[1][0], rtol=0, atol=0)
    for a, b in zip(results[0][1:], results[1][1:]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


class Trunk(torch.nn.Module):
    """A toy Evoformer block holding both modules."""

    def __init__(self):
        super().__init__()
        self.att = att_module(16, 8, 2, seed=3, impl="triton")
        self.opm = opm_module(16, 8, 8, seed=4, impl="triton")

    def forward(self, msa, pair, mask):
        msa = msa + self.att(msa, pair, mask)
        return msa, pair + self.opm(msa, mask)


def test_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    model = Trunk().to(DEVICE)
    msa = torch.randn(1, 3, 7, 16, device=DEVICE)
    pair = torch.randn(1, 7, 7, 8, device=DEVICE)
    mask = random_mask(1, 3, 7, "rows", 5).to(DEVICE)
    with torch.no_grad():
        eager = model(msa, pair, mask)
        compiled = torch.compile(model, fullgraph=True)(msa, pair, mask)
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e)


@pytest.mark.parametrize("dtype, row_blocks", [(torch.float32, False), (torch.float16, False), (torch.float16, True)],
                         ids=["float32", "float16", "float16-one-row-blocks"])
def test_compile_training_matches_eager(dtype, row_blocks, monkeypatch):
    """float16 takes the Outer Product Mean backward's Triton kernels (custom ops: traced around), also one
    row of outputs a block (the weight gradient's partial sums accumulated in place by the later blocks)."""
    from evofuse import _backward

    if row_blocks:
        monkeypatch.setattr(_backward, "BLOCK_BYTES", 1)
    torch._dynamo.reset()
    model = Trunk().to(DEVICE).to(dtype)
    mask = random_mask(1, 3, 7, "rows", 6).to(DEVICE)
    msa = torch.randn(1, 3, 7, 16, device=DEVICE).to(dtype).requires_grad_(True)
    pair = torch.randn(1, 7, 7, 8, device=DEVICE).to(dtype)
    grads = []
    for fn in (torch.compile(model, fullgraph=True, backend="aot_eager"), model):
        for p in model.parameters():
            p.grad = None
        msa.grad = None
        a, b = fn(msa, pair, mask)
        (a.float().square().sum() + b.float().sum()).backward()
        grads.append([msa.grad.clone()] + [p.grad.clone() for p in model.parameters()])
    for c, e in zip(*grads):
        torch.testing.assert_close(c, e)


def test_eager_backward_calls_the_kernels_directly(monkeypatch):
    """An eager 16-bit backward launches its Triton parts without their custom ops' dispatch (~50 us of
    host time a call); torch.compile's tracing takes the ops (test above)."""
    import evofuse._library as lib

    def refuse(*args, **kwargs):
        raise AssertionError("a backward custom op was dispatched in eager mode")

    for name in ("ln_project_op", "layer_norm_backward_op", "ln_linear_backward_op", "opm_project_op",
                 "opm_outer_products_op", "opm_outer_product_grad_op", "opm_weight_grad_op", "opm_normalized_grad_op",
                 "sum_partials_op", "msa_row_attention_core_backward_op"):
        monkeypatch.setattr(lib, name, refuse)
    model = Trunk().to(DEVICE).half()
    msa = torch.randn(1, 3, 7, 16, device=DEVICE).half().requires_grad_(True)
    a, b = model(msa, torch.randn(1, 7, 7, 8, device=DEVICE).half(), random_mask(1, 3, 7, "rows", 6).to(DEVICE))
    (a.float().square().sum() + b.float().sum()).backward()
    assert msa.grad is not None and all(p.grad is not None for p in model.parameters())


@pytest.mark.gpu
@pytest.mark.parametrize("tiled", [False, True], ids=["single-launch", "tiled"])
def test_cuda_graph_capture_and_replay(tiled, monkeypatch):
    """No host synchronization on the hot path: the forward captures into a CUDA graph (after a warm-up
    that compiles and autotunes) and its replays match eager on new inputs, on both kernel paths."""
    from evofuse.ops import outer_product_mean, row_attention

    if tiled:
        monkeypatch.setattr(outer_product_mean, "SMALL_MAX_N", 0)
        monkeypatch.setattr(row_attention, "SMALL_MAX_N", 0)
    model = Trunk().cuda().to(torch.bfloat16)
    msa = torch.randn(1, 3, 7, 16, device="cuda", dtype=torch.bfloat16)
    pair = torch.randn(1, 7, 7, 8, device="cuda", dtype=torch.bfloat16)
    mask = random_mask(1, 3, 7, "rows", 7).cuda()
    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            model(msa, pair, mask)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(msa, pair, mask)
        for seed in range(3):
            torch.manual_seed(seed)
            msa.copy_(torch.randn_like(msa))
            graph.replay()
            eager = model(msa, pair, mask)
            for g, e in zip(static_out, eager):
                torch.testing.assert_close(g, e)


def test_eager_calls_skip_the_op_wrapper(monkeypatch):
    """Eager calls run the fused forward directly with no gradient to record, through plain autograd
    Functions when recording (the custom ops' dispatch costs ~20-40 us of host time a call, more a
    training step); only torch.compile's tracing takes the ops (the compile tests)."""
    import evofuse.functional as F
    import evofuse.ops.row_attention as ra

    calls = []
    for name in ("outer_product_mean_op", "outer_product_mean_train_op", "msa_row_attention_op",
                 "msa_row_attention_train_op", "OuterProductMeanFunction", "RowAttentionFunction"):
        real = getattr(F, name)
        if name.endswith("Function"):
            monkeypatch.setattr(F, name, type(name, (), {"apply": staticmethod(
                lambda *a, real=real, name=name: (calls.append(name), real.apply(*a))[1])}))
        else:
            monkeypatch.setattr(F, name, lambda *a, real=real, name=name: (calls.append(name), real(*a))[1])
    opm, att = opm_module(8, 5, 8, seed=1).to(DEVICE), att_module(16, 4, 2, seed=2).to(DEVICE)
    x, z = torch.randn(1, 3, 5, 8, device=DEVICE), torch.randn(1, 5, 5, 4, device=DEVICE)
    x16 = torch.randn(1, 3, 5, 16, device=DEVICE)
    with torch.no_grad():
        direct = opm(x, None, impl="triton"), att(x16, z, None, impl="triton")
    assert calls == []
    monkeypatch.setattr(ra, "SMALL_MAX_N", 0)  # recording gradients takes the tiled path: compare like with like
    F.clear_replays()  # (the first call's single launch would be replayed)
    with torch.no_grad():
        direct = direct[0], att(x16, z, None, impl="triton")
    recorded = opm(x, None, impl="triton"), att(x16, z, None, impl="triton")  # parameters require grad
    assert calls == ["OuterProductMeanFunction", "RowAttentionFunction"]
    for d, r in zip(direct, recorded):
        torch.testing.assert_close(d, r.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["opm", "opm-float16", "att", "att-tiled"])
def test_eager_functions_match_the_ops(name, monkeypatch):
    """The autograd Functions of eager training and the custom ops (torch.compile's) give the same
    output and gradients, bit for bit (row attention on its single-launch and its tiled path)."""
    import evofuse.ops.row_attention as ra
    from evofuse._library import OuterProductMeanFunction, RowAttentionFunction

    if name == "att-tiled":
        monkeypatch.setattr(ra, "SMALL_MAX_N", 0)

    if name.startswith("opm"):
        x, mask, params, *rest = opm16_args(True) if name == "opm-float16" else opm_args(True)
        inputs = [x, *params]
        by_op = outer_product_mean_train_op(x, mask, params, *rest)[0]
        by_function = OuterProductMeanFunction.apply(x, mask, *rest, *params)
    else:
        x, z, mask, params, *rest = att_args(True)
        inputs = [x, z, *params]
        by_op = msa_row_attention_train_op(x, z, mask, params, *rest)[0]
        by_function = RowAttentionFunction.apply(x, z, mask, *rest, *params)
    g = torch.randn_like(by_op)
    grads_op = torch.autograd.grad(by_op, inputs, g)
    grads_function = torch.autograd.grad(by_function, inputs, g)
    torch.testing.assert_close(by_function, by_op, rtol=0, atol=0)
    for a, b in zip(grads_function, grads_op):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

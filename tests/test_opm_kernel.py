"""The fused Outer Product Mean against the float64 reference (Triton's interpreter on CI)."""

import copy
import itertools
import math

import pytest
import torch

from evofuse.ops._common import interpreting

from .conftest import DEVICE
from .helpers import assert_contract, compare, grads, opm_module, random_mask

NS, SS, CS = (1, 5, 17, 33), (1, 3, 20), (8, 16, 32)
NORMS = ("seed", "af2", "boltz")
MASKS = ("random", "rows", "ones", "none", "empty")
# every (N, S) pair, with c, normalization and mask kind cycling at co-prime periods
GRID = [(N, S, CS[k % 3], NORMS[k % 3 if k % 2 else (k + 1) % 3], MASKS[k % 5])
        for k, (N, S) in enumerate(itertools.product(NS, SS))]


def run(mod, x, mask, dtype, **kw):
    """(triton output, float64 reference, reference in dtype, reference in float32)."""
    mod = mod.to(DEVICE)
    x, m = x.to(DEVICE), None if mask is None else mask.to(DEVICE)
    out = mod.to(dtype)(x.to(dtype), m, impl="triton", **kw)
    exact = mod.double()(x.double(), m, impl="torch")
    ref_dtype = mod.to(dtype)(x.to(dtype), m, impl="torch")
    ref32 = mod.float()(x.float(), m, impl="torch")
    return out, exact, ref_dtype, ref32


@pytest.fixture(params=["single-launch", "tiled", "one-pass"])
def path(request, monkeypatch):
    """Small problems take the single-launch kernel; "tiled" forces the projection + tiled kernels (the
    multi-pass one for one-float16 operands at hidden_dim 32 and 64), "one-pass" the tiled kernel in one
    pass."""
    import evofuse.ops.outer_product_mean as op

    if request.param != "single-launch":
        monkeypatch.setattr(op, "SMALL_MAX_N", 0)
    monkeypatch.setattr(op, "MULTIPASS", request.param != "one-pass")
    return request.param


@pytest.mark.parametrize("N, S, c, normalization, mask_kind", GRID)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_forward_awkward_shapes(N, S, c, normalization, mask_kind, dtype, path):
    B, D, R = 2, 12, 7
    mod = opm_module(D, R, c, seed=N * 100 + S, normalization=normalization)
    x = torch.randn(B, S, N, D)
    mask = random_mask(B, S, N, mask_kind, seed=N + S)
    out, exact, ref_dtype, ref32 = run(mod, x, mask, dtype)
    if dtype == torch.float32:
        assert_contract(out, exact, dtype, ref_fp32=ref32)
    else:
        assert_contract(out, exact, dtype, lowp_ref=ref_dtype)


@pytest.mark.parametrize("normalization", NORMS)
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_normalizations_and_masks(normalization, mask_kind, dtype, path):
    """float32 runs the kernel on scaled float16 hi/lo operands, float16 on its inputs as they are."""
    mod = opm_module(16, 9, 8, seed=3, normalization=normalization)
    x = torch.randn(2, 6, 11, 16)
    mask = random_mask(2, 6, 11, mask_kind, seed=5)
    out, exact, ref_dtype, ref32 = run(mod, x, mask, dtype)
    if dtype == torch.float32:
        assert_contract(out, exact, dtype, ref_fp32=ref32)
    else:
        assert_contract(out, exact, dtype, lowp_ref=ref_dtype)


@pytest.mark.parametrize("magnitude", [1e-7, 1e6])
def test_float32_far_outside_float16_range(magnitude, path):
    """float32 operands reach the kernel as float16 halves after a power-of-two scaling: projections
    of ~1e6 (float16 overflows at 65504) or ~1e-7 (under float16's normal range) keep the contract."""
    mod = opm_module(12, 7, 16, seed=10, normalization="af2")
    with torch.no_grad():
        for p in (mod.proj_a.weight, mod.proj_a.bias, mod.proj_b.weight, mod.proj_b.bias):
            p.mul_(magnitude)
        mod.out_proj.weight.mul_(1 / magnitude**2)  # the output stays O(1)
    x = torch.randn(2, 5, 23, 12)
    out, exact, _, ref32 = run(mod, x, random_mask(2, 5, 23, "rows", 6), torch.float32)
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)


def test_float32_ignores_a_global_tf32_setting():
    import evofuse.ops._common as common

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with common.ieee_fp32_matmul():
            inside = torch.backends.cuda.matmul.allow_tf32
        assert inside is False and torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def test_fast_precision(path):
    mod = opm_module(16, 9, 16, seed=4, precision="fast")
    x = torch.randn(2, 7, 9, 16)
    out, exact, _, _ = run(mod, x, random_mask(2, 7, 9, "rows", 1), torch.float32)
    assert_contract(out, exact, torch.float32, precision="fast")


def test_non_contiguous_and_broadcast_inputs(path):
    mod = opm_module(12, 6, 8, seed=2)
    x = torch.randn(2, 9, 4, 12).transpose(1, 2)  # (2, 4, 9, 12)
    mask = (torch.rand(1, 4, 9) > 0.3).float().expand(2, 4, 9)
    out, exact, _, ref32 = run(mod, x, mask, torch.float32)
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)


def test_deterministic(path):
    mod = opm_module(12, 6, 16, seed=6).to(DEVICE)
    x = torch.randn(2, 5, 13, 12, device=DEVICE)
    mask = random_mask(2, 5, 13, "random", 2).to(DEVICE)
    assert torch.equal(mod(x, mask, impl="triton"), mod(x, mask, impl="triton"))


def test_nan_propagates_like_the_reference(path):
    mod = opm_module(8, 5, 8, seed=7).to(DEVICE)
    x = torch.randn(1, 4, 6, 8, device=DEVICE)
    x[0, 1, 2, 3] = float("nan")
    mask = torch.ones(1, 4, 6, device=DEVICE)
    out = mod(x, mask, impl="triton")
    ref = mod(x, mask, impl="torch")
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.isnan(out).any() and not torch.isnan(out).all()


def test_unsupported_hidden_dim_falls_back_with_one_warning():
    import evofuse._dispatch as dispatch

    dispatch._warned.discard(f"opm-12-{torch.float32}")
    mod = opm_module(8, 5, 12, seed=8).to(DEVICE)
    x = torch.randn(1, 3, 4, 8, device=DEVICE)
    with pytest.warns(RuntimeWarning, match="hidden_dim=12"):
        out = mod(x, None, impl="triton")
    torch.testing.assert_close(out, mod(x, None, impl="torch"))


def test_wide_msa_dim_projects_in_blocks_of_rows():
    """msa_dim above the fused projection's width goes through PyTorch a block of MSA rows at a time."""
    from evofuse.ops.layer_norm_linear import fits

    D = 600
    assert not fits(D, 64, torch.bfloat16)
    mod = opm_module(D, 5, 32, seed=9)
    x = torch.randn(1, 3, 6, D)
    out, exact, _, ref32 = run(mod, x, random_mask(1, 3, 6, "rows", 3), torch.float32)
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)


@pytest.mark.parametrize("normalization", NORMS)
def test_mask_of_any_dtype(normalization, path):
    mod = opm_module(12, 6, 8, seed=9, normalization=normalization).to(DEVICE)
    x = torch.randn(2, 5, 7, 12, device=DEVICE)
    mask = random_mask(2, 5, 7, "rows", 4).to(DEVICE)
    ref = mod(x, mask, impl="triton")
    for dt in (torch.bool, torch.int32):
        torch.testing.assert_close(mod(x, mask.to(dt), impl="triton"), ref, rtol=0, atol=0)


@pytest.mark.parametrize("N, S, normalization, mask_kind", [(5, 3, "seed", "rows"), (17, 20, "af2", "random"),
                                                           (9, 1, "boltz", "none")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_hidden_dim_64(N, S, normalization, mask_kind, dtype, monkeypatch, path):
    """hidden_dim 64 runs as four 32-wide parts summed in float32; 16-bit outputs in blocks of rows i
    (forced to a few rows here so that block edges are crossed)."""
    import evofuse.ops.outer_product_mean as op

    monkeypatch.setattr(op, "PARTIAL_BYTES", 2 * N * 6 * 4)  # two rows i per block
    mod = opm_module(12, 6, 64, seed=N + S, normalization=normalization)
    x = torch.randn(2, S, N, 12)
    out, exact, ref_dtype, ref32 = run(mod, x, random_mask(2, S, N, mask_kind, seed=N), dtype)
    if dtype == torch.float32:
        assert_contract(out, exact, dtype, ref_fp32=ref32)
    else:
        assert_contract(out, exact, dtype, lowp_ref=ref_dtype)


@pytest.mark.parametrize("c, dtype, precision, kernel", [
    (32, torch.float16, "default", "_opm_multipass_kernel"), (64, torch.float16, "default", "_opm_multipass_kernel"),
    (32, torch.float32, "fast", "_opm_multipass_kernel"), (32, torch.float32, "default", "_opm_multipass_kernel"),
    (64, torch.float32, "default", "_opm_multipass_kernel"), (16, torch.float32, "default", "_opm_kernel"),
    (16, torch.float16, "default", "_opm_kernel")])
def test_multipass_kernel_takes_hidden_dim_32(c, dtype, precision, kernel, monkeypatch):
    """The kernel each form takes (hidden_dim 32 and 64's 32-wide parts the multi-pass one, the float32
    contract's hi/lo halves in four passes), and its persistent programs each visiting several tiles and
    batch elements."""
    import evofuse.ops.outer_product_mean as op

    monkeypatch.setattr(op, "SMALL_MAX_N", 0)
    monkeypatch.setattr(op, "WGMMA", False)  # on Hopper, 16-bit operands at hidden_dim 32 would take the Gluon kernel
    monkeypatch.setattr(op, "INTERPRET_PROGRAMS", 2)
    launched = []
    real_launch = op.launch
    monkeypatch.setattr(op, "launch", lambda *a, **k: (launched.append((a[0].__name__, a[4](a[7]))),
                                                       real_launch(*a, **k)))
    mod = opm_module(12, 70, c, seed=c, normalization="af2", precision=precision)
    x = torch.randn(3, 7, 21, 12)
    out, exact, ref_dtype, ref32 = run(mod, x, random_mask(3, 7, 21, "rows", seed=c), dtype)
    if dtype == torch.float16:
        assert_contract(out, exact, dtype, lowp_ref=ref_dtype)
    else:
        assert_contract(out, exact, dtype, precision=precision, ref_fp32=ref32)
    assert {name for name, _ in launched} == {kernel}
    if kernel == "_opm_multipass_kernel" and interpreting():
        assert all(grid == (2,) for _, grid in launched)  # 6 x 6 tiles x 3 batch elements on 2 programs
    elif kernel == "_opm_multipass_kernel":  # on a GPU: at most one program a multiprocessor
        assert all(grid[0] <= op._programs(torch.device(DEVICE)) for _, grid in launched)


@pytest.mark.parametrize("c, normalization, mask_kind", [(16, "seed", "rows"), (32, "af2", "random"),
                                                   (64, "boltz", "empty"), (8, "seed", "none")])
def test_float32_long_msa_in_chunks_of_rows(c, normalization, mask_kind, monkeypatch):
    """float32 (default precision) multiplies at most SPLIT_CHUNK_S MSA rows a launch and adds the
    chunks in the output (forced to 12 rows here: 37 rows take 4 launches a part, the last short;
    the counts of every launch still take all rows)."""
    import evofuse.ops.outer_product_mean as op

    monkeypatch.setattr(op, "SMALL_MAX_N", 0)
    monkeypatch.setattr(op, "SPLIT_CHUNK_S", 12)
    launches = []
    real_launch = op.launch

    def rows(kernel, args):  # the MSA rows a launch multiplies (its S argument)
        return args[-6] if kernel is op._opm_multipass_kernel else args[-3]

    monkeypatch.setattr(op, "launch", lambda *a, **k: (launches.append(rows(a[0], a[5])), real_launch(*a, **k)))
    N, S = 9, 37
    mod = opm_module(12, 6, c, seed=c, normalization=normalization)
    out, exact, _, ref32 = run(mod, torch.randn(2, S, N, 12), random_mask(2, S, N, mask_kind, seed=c), torch.float32)
    assert_contract(out, exact, torch.float32, ref_fp32=ref32)
    parts = (c // 32) ** 2 if c > 32 else 1
    assert launches == [12, 12, 12, 1] * parts


def test_small_problems_take_one_launch(monkeypatch):
    """The single-launch path is chosen by size: the seed shape takes it, a long sequence does not, and
    nothing else runs on it (no projection kernel, no tiled kernel)."""
    import evofuse.ops.outer_product_mean as op

    assert op._small_meta(8, 32, 64, 32, torch.bfloat16) is not None  # opm-seed
    assert op._small_meta(512, 384, 256, 32, torch.bfloat16) is None  # opm-af2-main
    assert op._small_meta(8, 32, 64, 8, torch.bfloat16) is None  # c = 8: tl.dot needs 16 columns
    monkeypatch.setattr(op, "project", lambda *a, **k: pytest.fail("the projection kernel ran"))
    monkeypatch.setattr(op, "launch", lambda *a, **k: pytest.fail("the tiled kernel ran"))
    mod = opm_module(16, 6, 32, seed=2).to(DEVICE)
    x = torch.randn(1, 4, 9, 16, device=DEVICE)
    torch.testing.assert_close(mod(x, None, impl="triton"), mod(x, None, impl="torch"), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("c, n, N, S, R", [(8, 5, 9, 3, 6), (16, 3, 17, 20, 6), (32, 1, 5, 1, 6), (8, 2, 3, 2, 520)])
def test_backward_kernels_against_float64(c, n, N, S, R):
    """The backward's kernels: the normalized outer products of a block of rows (per-pair scale, here
    broadcast over j as the seed normalization's), the normalized gradient Gs and the bias gradient's
    sums from a sliced output gradient (strided), dX from Gs (strided), and out_proj's weight gradient
    from the sliced gradient and normalized outer products, then from Gs and plain ones added to the first's
    partial sums in the kernel (as a second block of rows), against float64 einsums; R = 520 takes dX's
    cuBLAS path (out_proj wider than DX_MAX_R)."""
    from evofuse.ops.outer_product_mean import (
        _dw_splits,
        gs_blocks,
        normalized_grad,
        outer_product_grad,
        outer_product_weight_grad,
        outer_products,
    )

    g = torch.Generator().manual_seed(c + n)
    a = torch.randn(2, S, N, c, generator=g).half().to(DEVICE)
    b = torch.randn(2, S, N, c, generator=g).half().to(DEVICE)
    scale = torch.rand(2, N, 1, generator=g).expand(2, N, N).to(DEVICE)  # stride 0 over j
    i0 = N - n
    x = outer_products(a[:, :, i0:], b, scale[:, i0:])
    exact = torch.einsum("bsip,bsjq,bij->bipjq", a[:, :, i0:].double(), b.double(), scale[:, i0:].double())
    torch.testing.assert_close(x.double(), exact.reshape(2, n * c, N * c), rtol=2e-3, atol=2e-3)
    grad = torch.randn(2, N, N, R + 2, generator=g).half().to(DEVICE)[:, i0:, :, 1:R + 1]  # strided
    w = torch.randn(R, c * c, generator=g).half().to(DEVICE)
    gs = (grad.float() * scale[:, i0:, :, None]).half()  # the normalized gradient
    padded = torch.zeros(2, n, N, R + 2, dtype=gs.dtype, device=DEVICE)
    padded[..., 1:R + 1] = gs
    dx = outer_product_grad(padded[..., 1:R + 1], w, c)  # strided
    exact = torch.einsum("bijr,rpq->bipjq", gs.double(), w.double().view(R, c, c)).reshape(2, n * c, N * c)
    torch.testing.assert_close(dx.double(), exact, rtol=2e-3, atol=2e-3)
    partials = torch.full((_dw_splits(x.device), R, c * c), float("nan"), device=DEVICE)  # poisoned: all written
    outer_product_weight_grad(grad, x, c, partials, False)
    dw = partials.sum(0)
    exact = torch.einsum("bijr,bipjq->rpq", grad.double(), x.double().view(2, n, c, N, c)).reshape(R, c * c)
    torch.testing.assert_close(dw.double(), exact, rtol=1e-4, atol=1e-4 * exact.abs().max().item())
    plain = torch.einsum("bsip,bsjq->bipjq", a[:, :, i0:].float(), b.float()).reshape(2, n * c, N * c).half()
    outer_product_weight_grad(gs, plain, c, partials, True)  # a second block: added to the first's partial sums
    exact = exact + torch.einsum("bijr,bipjq->rpq", gs.double(), plain.double().view(2, n, c, N, c)).reshape(R, c * c)
    torch.testing.assert_close(partials.sum(0).double(), exact, rtol=1e-4, atol=1e-4 * exact.abs().max().item())
    for scaled_sum in (True, False):
        got, g_part = normalized_grad(grad, scale[:, i0:], scaled_sum)
        torch.testing.assert_close(got, gs, rtol=0, atol=0)
        assert g_part.shape == (gs_blocks(2 * n * N), R)
        g_sum = g_part.sum(0)
        exact = (gs.float() if scaled_sum else grad.float()).double().sum((0, 1, 2))
        if scaled_sum:  # the float32 products before rounding
            exact = torch.einsum("bijr,bij->r", grad.double(), scale[:, i0:].double())
        torch.testing.assert_close(g_sum.double(), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_kind", ["rows", "none", "empty"])
@pytest.mark.parametrize("normalization", ["seed", "af2", "boltz"])
def test_pair_scale_kernel(normalization, mask_kind):
    """The per-pair scale the multi-pass forward and the backward read (one kernel launch) against the
    reference's counts in float64: a fully masked row and residue, no mask, everything masked."""
    from evofuse.ops.outer_product_mean import pair_scale
    from evofuse.reference import AF2_EPS

    B, S, N = 2, 11, 37
    mask = random_mask(B, S, N, mask_kind, 3)
    mask = None if mask is None else mask.to(DEVICE)
    like = torch.empty(1, device=DEVICE)
    got = pair_scale(mask, B, S, N, normalization, like)
    m = torch.ones(B, S, N, dtype=torch.float64) if mask is None else mask.double().cpu()
    if normalization == "seed":
        exact = (1 / m.sum(1).clamp(min=1))[:, :, None].expand(B, N, N)
    else:
        pairs = torch.einsum("bsi,bsj->bij", m, m)
        exact = 1 / (AF2_EPS + pairs) if normalization == "af2" else 1 / pairs.clamp(min=1)
    torch.testing.assert_close(got.double().cpu(), exact, rtol=1e-6, atol=0)


@pytest.mark.parametrize("c, cs, reorder, split", [(32, 32, True, True), (32, 32, False, False), (64, 32, True, True),
                                                   (32, 16, False, True)])
def test_float16_operands_layout_and_scales(c, cs, reorder, split):
    """The float32 operands' float16 halves: out_proj's weight gathered into the kernels' (parts, R, cs * cs)
    layout (parts of p and q halves; `reorder`: each of SPLIT_PASSES passes' rows p with even q, then odd q),
    a and b scaled so that their max |value| lands in (2**6, 2**7], hi + lo equal to x times its scale to
    ~2**-22 (hi alone to 2**-11), and inv_scale the inverse of the three scales' product (powers of two: exact)."""
    from evofuse.ops import outer_product_mean as opm

    g = torch.Generator().manual_seed(c + cs)
    R = 24
    ab = torch.randn(2, 2, 3, 5, c, generator=g) * torch.tensor([3e-4, 70.0]).view(2, 1, 1, 1, 1)
    w = torch.randn(R, c * c, generator=g) * 1e-3
    maxima = ab.abs().amax((1, 2, 3, 4)).view(torch.int32)
    a_h, b_h, w_h, inv_scale = opm._float16_operands(ab.to(DEVICE), maxima.to(DEVICE), w.to(DEVICE), cs, reorder, split)
    halves = c // cs
    expected = w.reshape(R, halves, cs, halves, cs).permute(1, 3, 0, 2, 4).reshape(halves ** 2, R, cs * cs)
    if reorder:
        expected = expected.reshape(halves ** 2, R, opm.SPLIT_PASSES, cs // opm.SPLIT_PASSES, cs // 2, 2).permute(
            0, 1, 2, 5, 3, 4).reshape(halves ** 2, R, cs * cs)
    scales = []
    for got, x in ((a_h, ab[0]), (b_h, ab[1]), (w_h, expected)):
        assert got.shape == (2 if split else 1, *x.shape) and got.dtype == torch.float16
        value = got.double().sum(0).cpu()
        scale = 2.0 ** (opm.SCALE_TOP - math.ceil(math.log2(x.abs().max().item())))  # max |x| into (2**6, 2**7]
        # (float16's subnormals: ~2**-24 absolute in the scaled units, as the low halves' design says)
        torch.testing.assert_close(value, x.double() * scale, rtol=2 ** -21 if split else 2 ** -11, atol=2 ** -23)
        scales.append(scale)
    assert inv_scale.item() == 1 / (scales[0] * scales[1] * scales[2])


def test_workspace_size_follows_the_candidates(monkeypatch):
    """The multi-pass kernel's workspace is sized from the candidates in force at the call: a size kept from
    smaller candidates let programs overwrite each other's workspace on the H200 (session 17)."""
    import triton

    from evofuse.ops import outer_product_mean as opm

    def sized(pairs_rows, cols):
        return triton.Config({"PASSES": 4, "TILE_ROWS": pairs_rows, "TILE_COLS": cols, "BLOCK_S": 64, "BLOCK_R": 64,
                              "W_STAGES": 1, "GROUP_I": 8}, num_warps=8, num_stages=3)

    sizes = []
    for cfg in (sized(64, 256), sized(128, 256)):  # 64 pairs, then 128
        monkeypatch.setattr(opm, "_multipass_configs", lambda cfg=cfg: [cfg])
        sizes.append(opm._workspace_size(100, 32))
    assert sizes == [128 * 64, 128 * 128]


@pytest.mark.parametrize("normalization", NORMS)
def test_hopper_kernel_gets_its_operands(normalization, monkeypatch):
    """The launcher's side of Hopper's Gluon kernel, which runs on sm_90 only: with the kernel stood in for by
    PyTorch (its contract: a pass-major, the per-pair factor, out_proj's weight and bias, the normalization's code),
    an inference forward of 16-bit inputs at hidden_dim 32 hands it what it needs and meets the contract; so does a
    training step (the kernel reads a pass-major copy of a, the backward a as it is), gradients included."""
    import evofuse.ops.outer_product_mean as op
    import evofuse.ops.outer_product_mean_wgmma as ow

    calls = []

    def stand_in(a, b, scale, weight, bias, out, norm):
        B, S, N, c = a.shape
        a = a.reshape(B, S, 2, N, c // 2).permute(0, 1, 3, 2, 4).reshape(B, S, N, c)  # (its memory: pass-major)
        x = torch.einsum("bsip,bsjq->bijpq", a.double(), b.double()).reshape(B, N, N, c * c)
        y = (x * scale[..., None].double()) @ weight.double().t()
        y = y + (scale[..., None].double() if norm == 1 else 1) * bias.double()
        out.copy_(y)
        calls.append(norm)
        return out

    monkeypatch.setattr(op, "SMALL_MAX_N", 0)
    monkeypatch.setattr(ow, "supported", lambda msa, c, R: c == 32)
    monkeypatch.setattr(ow, "outer_products_wgmma", stand_in)
    mod = opm_module(24, 40, 32, seed=5, normalization=normalization)
    x = torch.randn(2, 9, 13, 24)
    with torch.no_grad():  # inference
        out, exact, ref_dtype, _ = run(mod, x, random_mask(2, 9, 13, "rows", seed=5), torch.float16)
    assert_contract(out, exact, torch.float16, lowp_ref=ref_dtype)
    assert calls == [NORMS.index(normalization)]
    mask = random_mask(2, 9, 13, "random", seed=6).to(DEVICE)
    half = (x.to(DEVICE, torch.float16), mask)
    _, got = grads(copy.deepcopy(mod).to(DEVICE).half(), half, "triton")
    assert len(calls) == 2
    _, lowp = grads(copy.deepcopy(mod).to(DEVICE).half(), half, "torch")
    _, exact = grads(copy.deepcopy(mod).to(DEVICE).half().double(), (half[0].double(), mask), "torch")
    compare(got, exact, torch.float16, lowp)


def test_hopper_kernel_config_is_timed_once_per_bucketed_key(monkeypatch):
    """The Gluon kernel's config: the default with autotuning off; with it on, the fastest of CONFIGS, each timed
    through the launcher's own run(config), once per key (here with do_bench and the launches stood in for)."""
    import triton.testing

    import evofuse.ops.outer_product_mean_wgmma as ow

    ran = []
    speed = {(64, 3, 1): 0.5, (64, 2, 2): 0.4, (32, 5, 2): 0.6}
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: (fn(), speed[ran[-1]])[1])
    monkeypatch.setattr(ow, "_CHOSEN", {})
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "0")
    assert ow._config(("key",), ran.append) == ow.CONFIGS[0] and ran == []
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")
    assert ow._config(("key",), ran.append) == (64, 2, 2)
    assert ran == list(ow.CONFIGS)
    assert ow._config(("key",), ran.append) == (64, 2, 2) and len(ran) == len(ow.CONFIGS)  # timed once
    assert ow._config(("other",), ran.append) == (64, 2, 2) and len(ran) == 2 * len(ow.CONFIGS)


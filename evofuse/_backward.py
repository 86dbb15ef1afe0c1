"""Backward passes of the fused forwards.

The Outer Product Mean's (`outer_product_mean_backward`): its gradient formulas on blocks of output
rows, cuBLAS products around two Triton kernels (16-bit), no N*N*c*c tensor, fixed-order float32 sums
(bit-reproducible). Row attention's (`msa_row_attention_backward`): the projections by autograd, the attention
core by the fused kernels of `ops.row_attention`.
"""

from __future__ import annotations

import torch

from . import reference as ref
from .ops._common import ieee_fp32_matmul

BLOCK_BYTES = 64 << 20  # recomputed outer products (and their gradient) per block of rows i


def leaf(t: torch.Tensor | None, needed: bool, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """A detached copy (cast to `dtype`) that collects its own gradient when `needed`."""
    if t is None:
        return None
    t = t.detach() if dtype is None else t.detach().to(dtype)
    return t.requires_grad_(needed)


def _grad(leaf: torch.Tensor | None, original: torch.Tensor | None, needed: bool) -> torch.Tensor | None:
    if not needed or leaf is None:
        return None
    g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
    return g.to(original.dtype)


def _backward(outputs: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
    pairs = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad and g is not None]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])


def _opm_scale(counts_rows, counts, normalization):
    """The per-(i, j) factor (B, n, N) float32 that multiplies out_proj's product (and, for af2, the
    bias): seed 1 / max(count_i, 1), af2 1 / (eps + count_ij), boltz 1 / max(count_ij, 1)."""
    if normalization == "seed":
        den = counts_rows.float().sum(1).clamp(min=1)  # (B, n)
        return (1 / den)[:, :, None].expand(-1, -1, counts.shape[2])
    pairs = torch.einsum("bsi,bsj->bij", counts_rows.float(), counts.float())
    return 1 / (ref.AF2_EPS + pairs) if normalization == "af2" else 1 / pairs.clamp(min=1)


def outer_product_mean_backward(inputs, needs, grad_out, normalization):
    """Gradients of the Outer Product Mean for the tensors in `inputs` (msa_repr, msa_mask, then the
    eight parameters), None where `needs` is False.

    With X[i, j] = sum_s a[s, i] (x) b[s, j] and Gs = grad_out * scale (the normalization's per-pair
    factor): dX = Gs W, da[s, i] = sum_j dX[i, j] b[s, j], db[s, j] = sum_i a[s, i] dX[i, j],
    dW = sum_ij Gs[i, j] (x) X[i, j]. For 16-bit inputs with hidden_dim <= 32, X and dX come from Triton
    kernels already in the layouts of the products that take them; the rest are cuBLAS products on
    blocks of output rows i (each
    block's dX and recomputed X about BLOCK_BYTES), never the whole N*N*c*c; db, dW and the bias
    gradient are summed over blocks in float32 in a fixed order (bit-reproducible). The projections'
    gradients then come from autograd on their recomputation.
    """
    from ._library import opm_outer_product_grad_op, opm_outer_products_op
    from .ops.outer_product_mean import backward_fused

    msa, mask, *params = inputs
    dtype = msa.dtype
    w = params[6].to(dtype)
    with torch.enable_grad():
        msa_l = leaf(msa, needs[0])
        proj = [leaf(p, n, dtype) for p, n in zip(params[:6], needs[2:8])]
        a, b, counts = ref.outer_product_mean_projections(msa_l, mask, *proj)
    B, S, N, c = a.shape
    R = w.shape[0]
    ad, bd = a.detach(), b.detach()
    b_flat = bd.reshape(B, S, N * c)
    da = torch.empty_like(ad) if a.requires_grad else None
    db = torch.zeros(B, S, N * c, dtype=torch.float32, device=a.device) if b.requires_grad else None
    dw = torch.zeros(R, c * c, dtype=torch.float32, device=a.device) if needs[8] else None
    dwb = None
    if needs[9] and normalization != "af2":  # the bias is not normalized: its gradient is grad_out's sum
        dwb = grad_out.sum((0, 1, 2), dtype=torch.float32)
    elif needs[9]:
        dwb = torch.zeros(R, dtype=torch.float32, device=a.device)
    scale = _opm_scale(counts, counts, normalization)  # (B, N, N), once for every block
    fused = backward_fused(dtype, c)  # 16-bit: X and dX from Triton kernels in cuBLAS's layouts
    rows = max(1, BLOCK_BYTES // max(1, B * N * c * c * a.element_size()))
    with ieee_fp32_matmul():
        for i0 in range(0, N, rows):
            n = min(rows, N - i0)
            a_rows = ad[:, :, i0:i0 + n].reshape(B, S, n * c)  # (B, S, (i p))
            gs = (grad_out[:, i0:i0 + n] * scale[:, i0:i0 + n, :, None]).to(dtype)  # (B, n, N, R)
            if dwb is not None and normalization == "af2":
                dwb += gs.sum((0, 1, 2), dtype=torch.float32)
            if dw is not None:
                if fused:  # ((b i j), (p q)) straight from the kernel
                    x = opm_outer_products_op(ad[:, :, i0:i0 + n], bd).view(B * n * N, c * c)
                else:
                    x = torch.bmm(a_rows.transpose(1, 2), b_flat)  # (B, (i p), (j q))
                    x = x.view(B, n, c, N, c).transpose(2, 3).reshape(B * n * N, c * c)  # ((b i j), (p q))
                dw += (gs.reshape(-1, R).t() @ x).float()
                del x
            if da is None and db is None:
                continue
            if fused:  # ((b i p), (j q)) straight from the kernel
                dx = opm_outer_product_grad_op(gs, w, c)
            else:
                dx = (gs.reshape(-1, R) @ w).view(B, n, N, c, c).transpose(2, 3).reshape(B, n * c, N * c)
            if da is not None:  # da[s, (i p)] = sum_(j q) dX[(i p), (j q)] b[s, (j q)]
                da[:, :, i0:i0 + n] = torch.bmm(b_flat, dx.transpose(1, 2)).view(B, S, n, c)
            if db is not None:
                db += torch.bmm(a_rows, dx).float()
    _backward([a, b], [da, None if db is None else db.view(B, S, N, c).to(dtype)])
    grads = [_grad(msa_l, msa, needs[0]), None]
    grads += [_grad(lf, p, n) for lf, p, n in zip(proj, params[:6], needs[2:8])]
    grads += [None if dw is None else dw.to(params[6].dtype), None if dwb is None else dwb.to(params[7].dtype)]
    return tuple(grads)


def _projection_grads(dqkvg, msa, xn, mean, rstd, params, need_msa, needs):
    """Gradients of LayerNorm + the q/k/v/gate projection from dqkvg (B, S, N, 4D), by hand: [msa's, then
    the ten parameters' (LayerNorm weight, bias; weight, bias of q, k, v, gate)], None where not needed.
    xn, mean and rstd are `ops.row_attention.ln_project`'s; the LayerNorm's backward is PyTorch's."""
    B, S, N, D = msa.shape
    dtype = msa.dtype
    dy = dqkvg.reshape(-1, 4 * D)
    grads = [None] * 11
    with ieee_fp32_matmul():
        if any(needs[2::2]):
            dw = dy.t() @ xn.reshape(-1, D)  # (4D, D): q, k, v, gate stacked
            for m in range(4):
                if needs[2 + 2 * m]:
                    grads[3 + 2 * m] = dw[m * D:(m + 1) * D].to(params[2 + 2 * m].dtype)
        if any(needs[3::2]):
            db = dy.sum(0, dtype=torch.float32)
            for m in range(4):
                if needs[3 + 2 * m]:
                    grads[4 + 2 * m] = db[m * D:(m + 1) * D].to(params[3 + 2 * m].dtype)
        if need_msa or needs[0] or needs[1]:
            dxn = (dy @ torch.cat(params[2::2]).to(dtype)).view(B, S, N, D)
            # PyTorch's LayerNorm keeps its statistics in float32 on CUDA, in the input's dtype on the CPU
            st = torch.float32 if msa.is_cuda else dtype
            dmsa, dlnw, dlnb = torch.ops.aten.native_layer_norm_backward(
                dxn, msa, [D], mean.to(st), rstd.to(st), params[0].to(dtype), params[1].to(dtype),
                [need_msa, needs[0], needs[1]])
            grads[0] = dmsa if need_msa else None
            grads[1] = dlnw.to(params[0].dtype) if needs[0] else None
            grads[2] = dlnb.to(params[1].dtype) if needs[1] else None
    return grads


def msa_row_attention_backward(inputs, needs, grad_out, num_heads, precision="default", o=None, stats=None):
    """Gradients of the fused row attention for the tensors in `inputs` (msa_repr, pair_repr, msa_mask,
    then the fourteen parameters), None where `needs` is False; `o` and `stats`, the forward's un-gated
    attention output and softmax statistics, when it kept them.

    The projections are recomputed: for 16-bit inputs by `ops.row_attention.ln_project` (evofuse's
    LayerNorm with its statistics, as the training forward ran it) with their gradients by hand,
    otherwise under autograd (PyTorch's LayerNorm, cuBLAS); the pair bias under autograd; out_proj's
    backward is two products; the attention core's backward is the custom op
    `evofuse::msa_row_attention_core_backward` (fused kernels, `ops.row_attention.attention_core_backward`).
    What is kept between forward and backward is the inputs, o (their size) and the statistics (two
    floats a row and head); the backward's buffers are of the size of qkvg and the pair bias.
    """
    from ._library import attention_ln_project_op, msa_row_attention_core_backward_op
    from .ops.row_attention import ln_project_backward_ready, pair_bias, project

    msa, pair, msa_mask, *params = inputs
    need_msa, need_pair, _, *need_params = needs
    dtype = msa.dtype
    B, S, N, D = msa.shape
    by_hand = ln_project_backward_ready(dtype, D)
    with torch.enable_grad():
        pair_l = leaf(pair, need_pair, dtype)
        wz, bz = (leaf(p, n, dtype) for p, n in zip(params[12:], need_params[12:]))
        z = pair_bias(pair_l, wz, bz, dtype)
        if not by_hand:
            msa_l = leaf(msa, need_msa)
            proj = [leaf(p, n, dtype) for p, n in zip(params[:10], need_params[:10])]
            qkvg = project(msa_l, proj[0], proj[1], proj[2::2], proj[3::2])
    if by_hand:
        qkvg, xn, mean, rstd = attention_ln_project_op(msa, params[0], params[1], list(params[2:10:2]),
                                                       list(params[3:10:2]))
    wo = params[10].to(dtype)
    go = grad_out.to(dtype).reshape(-1, D)
    with ieee_fp32_matmul():
        d_gated = (go @ wo).view(B, S, N, D)
    dx, dz, gated = msa_row_attention_core_backward_op(qkvg.detach(), z.detach(), msa_mask, d_gated, num_heads,
                                                       precision, z.requires_grad, o, stats)
    with ieee_fp32_matmul():
        dwo = go.t() @ gated.view(-1, D) if need_params[10] else None
    dbo = go.sum(0, dtype=torch.float32) if need_params[11] else None  # no float32 copy of go
    if by_hand:
        _backward([z], [dz.to(dtype) if z.requires_grad else None])
        proj_grads = _projection_grads(dx, msa, xn, mean, rstd, params[:10], need_msa, need_params[:10])
        grads = [proj_grads[0], _grad(pair_l, pair, need_pair), None] + proj_grads[1:]
    else:
        _backward([qkvg, z], [dx, dz.to(dtype) if z.requires_grad else None])
        grads = [_grad(msa_l, msa, need_msa), _grad(pair_l, pair, need_pair), None]
        grads += [_grad(lf, p, n) for lf, p, n in zip(proj, params[:10], need_params[:10])]
    grads += [None if dwo is None else dwo.to(params[10].dtype), None if dbo is None else dbo.to(params[11].dtype)]
    grads += [_grad(wz, params[12], need_params[12]), _grad(bz, params[13], need_params[13])]
    return tuple(grads)

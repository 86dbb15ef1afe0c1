"""Backward passes of the fused forwards.

The Outer Product Mean's (`outer_product_mean_backward`): its gradient formulas on blocks of output
rows, cuBLAS products around two Triton kernels (16-bit), no N*N*c*c tensor, fixed-order float32 sums
(bit-reproducible). Row attention's (`msa_row_attention_backward`): the projections by autograd, the attention
core by the fused kernels of `ops.row_attention`.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from . import reference as ref
from .ops._common import add_product, as_dtype, cdiv, column_sums, eager, float32_product, ieee_fp32_matmul

# recomputed outer products (and then their gradient) per block of rows i, at most (blocks of equal rows): each
# block costs ~15-20 launches and PyTorch calls, ~0.25-0.5 ms of the lent H200 hosts' time (opm-af2-main bf16
# training step, host time alone: 5 blocks of 64 MiB 5.79 ms, 2 of 256 MiB 4.34 ms, session 6; 2 blocks 2.47 ms,
# one 1.96 ms, session 13; benchmarks/host_time.py).
# The suite's 288-2048 MiB of outer products never exist whole (one block: 2.29-2.64 against 3.16-3.20 ms of
# the code before, session 11, not kept)
BLOCK_BYTES = 256 << 20
# the 16-bit backward's normalized gradient Gs (B, N, N, R) is made whole, not a block at a time, up to this size
# (opm-af2-main's 36 MiB: one launch and two calls less, ~70 us of a slow host's time, for +18 MiB of peak; session 13)
GS_WHOLE_BYTES = 64 << 20


def _kernels(grad_out: torch.Tensor) -> SimpleNamespace:
    """The backwards' Triton parts: called directly when the backward runs eagerly on real tensors (a
    custom op's dispatch costs ~50 us of host time a call, ~13 calls a 16-bit Outer Product Mean
    backward), through their custom ops (with fake implementations) while torch.compile traces it."""
    return _kernel_set(eager(grad_out))


@functools.lru_cache(maxsize=2)
def _kernel_set(direct: bool) -> SimpleNamespace:
    if direct:
        from .ops.layer_norm_linear import layer_norm_backward, ln_linear_backward, ln_project
        from .ops.outer_product_mean import (
            normalized_grad,
            outer_product_grad,
            outer_product_weight_grad,
            outer_products,
            project,
        )
        from .ops.partial_sums import sum_partials
        from .ops.row_attention import attention_core_backward

        return SimpleNamespace(
            ln_project=lambda x, lnw, lnb, ws, bs: ln_project(x, lnw, lnb, ws, bs, ref.LAYER_NORM_EPS),
            layer_norm_backward=layer_norm_backward, outer_products=outer_products,
            outer_product_grad=outer_product_grad, outer_product_weight_grad=outer_product_weight_grad,
            normalized_grad=normalized_grad, attention_core_backward=attention_core_backward,
            opm_project=lambda x, mask, params: project(x, mask, *params),
            ln_linear_backward=lambda x, lnw, lnb, w, mask, dy0, dy1, need_x, out_dtype: ln_linear_backward(
                x, lnw, lnb, w, mask, dy0, dy1, ref.LAYER_NORM_EPS, need_x, out_dtype),
            sum_partials=sum_partials)
    from . import _library as lib

    return SimpleNamespace(ln_project=lib.ln_project_op, layer_norm_backward=lib.layer_norm_backward_op,
                           outer_products=lib.opm_outer_products_op, outer_product_grad=lib.opm_outer_product_grad_op,
                           outer_product_weight_grad=lib.opm_weight_grad_op, normalized_grad=lib.opm_normalized_grad_op,
                           attention_core_backward=lib.msa_row_attention_core_backward_op,
                           opm_project=lib.opm_project_op, ln_linear_backward=lib.ln_linear_backward_op,
                           sum_partials=lib.sum_partials_op)


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


def outer_product_mean_backward(inputs, needs, grad_out, normalization, ab=None, scale=None):
    """Gradients of the Outer Product Mean for the tensors in `inputs` (msa_repr, msa_mask, then the
    eight parameters), None where `needs` is False; `ab` (2, B, S, N, c), the masked projections, and
    `scale` (B, N, N), the per-pair factor, when the training forward kept them.

    With X[i, j] = sum_s a[s, i] (x) b[s, j] and Gs = grad_out * scale (the normalization's per-pair
    factor): dX = Gs W, da[s, i] = sum_j dX[i, j] b[s, j], db[s, j] = sum_i a[s, i] dX[i, j],
    dW = sum_ij Gs[i, j] (x) X[i, j], on blocks of output rows i of equal size (each block's dX, then its X,
    at most BLOCK_BYTES: few blocks, since each costs ~15-20 launches and calls of host time; the suite's
    N*N*c*c tensors, 288-2048 MiB in bf16, never exist whole). For 16-bit inputs with hidden_dim <= 32, Gs and
    the bias gradient's sums are one Triton pass (for every block at once up to GS_WHOLE_BYTES, else a
    block's), dX comes from a Triton kernel already in
    the layout of the cuBLAS products that take it, and dW from one that reads X in the layout of a plain
    product (bfloat16: cuBLAS's a^T b, with Gs; float16: normalized by `ops.outer_product_mean.outer_products`,
    with grad_out), both through their custom ops while torch.compile traces; otherwise all are cuBLAS
    products and rearranging copies. db, dW and the bias gradient are summed over blocks in float32 in a
    fixed order (bit-reproducible), the fused dW in its kernel's partial sums, which every block adds to, ended
    with the bias gradient's in one launch (`ops.partial_sums.sum_partials`); one block writes db in its dtype straight
    from cuBLAS. The LayerNorm's and the projections' gradients: for 16-bit inputs whose LayerNorm and
    projections `ops.layer_norm_linear.ln_linear_backward` takes (hidden_dim <= 64, msa_dim <= 256), one
    pass of that kernel from da and db (the mask applied and the LayerNorm recomputed on chip), with a and
    b as the forward kept them (or recomputed by the forward's `ops.outer_product_mean.project`); other
    16-bit inputs recompute them by evofuse's LayerNorm and one product (`ops.layer_norm_linear.ln_project`)
    with the gradients by hand; float32 by the reference under autograd.
    """
    from .ops.layer_norm_linear import ln_linear_backward_fits, ln_project_ready
    from .ops.outer_product_mean import backward_fused, pair_scale, weight_grad_partials

    kernels = _kernels(grad_out)

    msa, mask, *params = inputs
    dtype = msa.dtype
    B, S, N, D = msa.shape
    c = params[2].shape[0]
    w = as_dtype(params[6], dtype)
    fused_ln = ln_linear_backward_fits(dtype, D, c)
    by_hand = not fused_ln and ln_project_ready(dtype, D)
    need_ab = needs[0] or any(needs[2:8])
    mask_f = None if mask is None else as_dtype(mask, torch.float32)
    if fused_ln:
        if ab is None:
            ab = kernels.opm_project(msa, mask_f, params[:6])
        ad, bd = ab.unbind(0)
        need_a = need_b = need_ab
    elif by_hand:
        y, xn, mean, rstd = kernels.ln_project(msa, params[0], params[1], [params[2], params[4]], [params[3], params[5]])
        mask_x = None if mask is None else mask.to(dtype)[..., None]
        ad, bd = (y[..., :c], y[..., c:]) if mask_x is None else (y[..., :c] * mask_x, y[..., c:] * mask_x)
        need_a = need_b = need_ab
    else:
        with torch.enable_grad():
            msa_l = leaf(msa, needs[0])
            proj = [leaf(p, n, dtype) for p, n in zip(params[:6], needs[2:8])]
            a, b, _ = ref.outer_product_mean_projections(msa_l, mask, *proj)
        ad, bd = a.detach(), b.detach()
        need_a, need_b = a.requires_grad, b.requires_grad
    R = w.shape[0]
    ad, bd = ad.contiguous(), bd.contiguous()
    a_flat, b_flat = ad.view(B, S, N * c), bd.view(B, S, N * c)
    fused = backward_fused(dtype, c)  # 16-bit: X and dX from Triton kernels in cuBLAS's layouts
    rows = max(1, BLOCK_BYTES // max(1, B * N * c * c * ad.element_size()))
    rows = cdiv(N, cdiv(N, rows))  # the same rows in every block
    blocks = range(0, N, rows)
    da = torch.empty_like(ad) if need_a else None
    da_flat = None if da is None else da.view(B, S, N * c)
    # each block's columns (i p) of a_flat and da_flat, as views from one call each
    a_parts = a_flat.split(rows * c, dim=2) if len(blocks) > 1 else (a_flat,)
    da_parts = (da_flat.split(rows * c, dim=2) if len(blocks) > 1 else (da_flat,)) if need_a else None
    # db and dW: float32 sums over the blocks (the first block's product makes db's); one block writes db in its
    # dtype (cuBLAS's float32 sums rounded once, as the sum's cast would). The fused dW: every block's partial
    # sums in one buffer that each block adds to, summed once after the last block
    db_sum = need_b and len(blocks) > 1
    db = None
    dw = torch.zeros(R, c * c, dtype=torch.float32, device=msa.device) if needs[8] and not fused else None
    dw_parts = weight_grad_partials(R, c, msa.device) if needs[8] and fused else None
    dwb = None  # out_proj's bias: af2 normalizes it, its gradient sums Gs; the others' sum grad_out
    if needs[9] and not fused and normalization != "af2":  # (the fused path's Gs pass sums it by block)
        dwb = column_sums(grad_out.reshape(-1, R))
    if scale is None:  # (B, N, N), once for every block
        scale = pair_scale(mask_f, B, S, N, normalization, grad_out)
    # the fused path's Gs and the bias gradient's sums in one pass: for every block at once where Gs is small
    # (one launch and sum less a block), else a block at a time (opm-long's whole Gs took +256 MiB)
    gs_whole = fused and len(blocks) > 1 and grad_out.numel() * grad_out.element_size() <= GS_WHOLE_BYTES
    gs_parts = None
    if gs_whole:
        gs_all, dwb = kernels.normalized_grad(grad_out, scale, normalization == "af2")  # dwb: partial sums
        gs_parts = gs_all.split(rows, dim=1)
        del gs_all
    with ieee_fp32_matmul():
        for k, i0 in enumerate(blocks):
            n = min(rows, N - i0)
            block = slice(i0, i0 + n)  # rows i: grad_out[:, block] (B, n, N, R), scale[:, block] (B, n, N)
            a_rows = a_parts[k]  # (B, S, (i p)): the block's channels
            if gs_whole:
                gs = gs_parts[k]
            elif fused:
                gs, g_part = kernels.normalized_grad(grad_out[:, block], scale[:, block], normalization == "af2")
                g_sum = g_part.sum(0)
                dwb = g_sum if dwb is None else dwb + g_sum
            else:
                gs = (grad_out[:, block] * scale[:, block, :, None]).to(dtype)  # (B, n, N, R)
                if needs[9] and normalization == "af2":
                    g_sum = gs.sum((0, 1, 2), dtype=torch.float32)
                    dwb = g_sum if dwb is None else dwb + g_sum
            if need_a or need_b:  # dX[(i p), (j q)] = sum_r Gs[i, j, r] W[r, (p q)]
                if fused:  # from the kernel, already in the products' layout
                    dx = kernels.outer_product_grad(gs, w, c)
                else:
                    dx = (gs.reshape(-1, R) @ w).view(B, n, N, c, c).transpose(2, 3).reshape(B, n * c, N * c)
                if need_a:  # da[s, (i p)] = sum_(j q) dX[(i p), (j q)] b[s, (j q)], written in place
                    torch.bmm(b_flat, dx.transpose(1, 2), out=da_parts[k])
                if db_sum:  # db[s, (j q)] = sum_(i p) a[s, (i p)] dX[(i p), (j q)]
                    if db is None:
                        db = float32_product(a_rows, dx)
                    else:
                        add_product(db, a_rows, dx)
                elif need_b:
                    db = torch.bmm(a_rows, dx)
                del dx  # before the block's outer products
            if needs[8] and fused:  # dW from X[(i p), (j q)] by the kernel: no rearranging copy
                if dtype == torch.bfloat16:  # cuBLAS's plain outer products; the scale on the gradient's side
                    x = torch.bmm(a_rows.transpose(1, 2), b_flat)  # (B, (i p), (j q))
                    kernels.outer_product_weight_grad(gs, x, c, dw_parts, k > 0)
                else:  # float16: normalized by the kernel (the plain sums can pass float16's range)
                    x = kernels.outer_products(ad[:, :, block], bd, scale[:, block])
                    kernels.outer_product_weight_grad(grad_out[:, block], x, c, dw_parts, k > 0)
                del x
            elif needs[8]:
                x = torch.bmm(a_rows.transpose(1, 2), b_flat)  # (B, (i p), (j q))
                x = x.view(B, n, c, N, c).transpose(2, 3).reshape(B * n * N, c * c)  # ((b i j), (p q))
                add_product(dw, gs.reshape(-1, R).t(), x)
                del x
            del gs
    if fused:  # out_proj's gradients: the weight's partial sums and the bias's (partial) sums ended in one launch
        out_dtype = params[6].dtype if params[6].dtype == params[7].dtype else torch.float32
        parts = ([] if dw_parts is None else [dw_parts.view(dw_parts.shape[0], R * c * c)]) + (
            [dwb.view(-1, R)] if needs[9] else [])
        sums = kernels.sum_partials(parts, out_dtype) if parts else []
        dw = None if dw_parts is None else sums[0].view(R, c * c)
        dwb = sums[-1] if needs[9] else None
        del parts, dw_parts  # (17 MiB at opm-af2-main, before the LayerNorm's and projections' gradients: their peak)
    gs_parts = None  # (before the LayerNorm's and projections' gradients: their peak)
    if fused_ln:
        grads = [None] * 8
        if need_ab:  # da and db (float32 when summed over blocks) as they are: the kernel casts them on chip
            w_ab = as_dtype(torch.cat([params[2], params[4]]), dtype)
            grad_dtype = params[0].dtype if len({p.dtype for p in params[:6]}) == 1 else torch.float32
            dx, dlnw, dlnb, dw_ab, db_ab = kernels.ln_linear_backward(msa, params[0], params[1], w_ab, mask_f, da, db,
                                                                      needs[0], grad_dtype)
            (dw_a, dw_b), (db_a, db_b) = dw_ab.split(c), db_ab.split(c)
            grads = [dx if needs[0] else None, None, dlnw, dlnb, dw_a, db_a, dw_b, db_b]
            grads[2:] = [None if not n else as_dtype(g, p.dtype) for g, p, n in zip(grads[2:], params[:6], needs[2:8])]
        dwb = as_dtype(dwb, params[7].dtype) if needs[9] else None
        return (*grads, None if dw is None else as_dtype(dw, params[6].dtype), dwb)
    db = None if db is None else db.view(B, S, N, c).to(dtype)
    if by_hand:
        proj_grads = [None] * 7
        if need_ab:  # through the mask, then LayerNorm and the two projections
            dy = torch.cat([da, db], dim=-1)
            proj_grads = _ln_linear_grads(dy if mask_x is None else dy * mask_x, msa, xn, mean, rstd, params[:6],
                                          needs[0], needs[2:8])
        grads = [proj_grads[0], None] + proj_grads[1:]
    else:
        _backward([a, b], [da, db])
        grads = [_grad(msa_l, msa, needs[0]), None]
        grads += [_grad(lf, p, n) for lf, p, n in zip(proj, params[:6], needs[2:8])]
    grads += [None if dw is None else as_dtype(dw, params[6].dtype), as_dtype(dwb, params[7].dtype) if needs[9] else None]
    return tuple(grads)


def _ln_linear_grads(dy, x, xn, mean, rstd, params, need_x, needs):
    """Gradients of y = LayerNorm(x) @ [w_1; w_2; ...]^T + [b_1, b_2, ...] by hand, from dy (..., sum of the
    w_k's rows): [x's, then those of params = (LayerNorm weight, bias, w_1, b_1, w_2, b_2, ...)], None
    where not needed. xn, mean and rstd are `ops.layer_norm_linear.ln_project`'s; the LayerNorm's
    backward is `ops.layer_norm_linear.layer_norm_backward`, from those statistics."""
    D = x.shape[-1]
    dtype = x.dtype
    dy = dy.reshape(-1, dy.shape[-1])
    widths = [w.shape[0] for w in params[2::2]]
    starts = [sum(widths[:m]) for m in range(len(widths))]
    grads = [None] * (1 + len(params))
    with ieee_fp32_matmul():
        if any(needs[2::2]):
            dw = dy.t() @ xn.reshape(-1, D)  # the weights stacked
            for m, (k0, k) in enumerate(zip(starts, widths)):
                if needs[2 + 2 * m]:
                    grads[3 + 2 * m] = dw[k0:k0 + k].to(params[2 + 2 * m].dtype)
        if any(needs[3::2]):
            db = column_sums(dy)
            dtypes = {b.dtype for b in params[3::2]}
            if len(dtypes) == 1:  # one cast for every bias (the slices' casts below are then no-ops)
                db = db.to(dtypes.pop())
            for m, (k0, k) in enumerate(zip(starts, widths)):
                if needs[3 + 2 * m]:
                    grads[4 + 2 * m] = db[k0:k0 + k].to(params[3 + 2 * m].dtype)
        if need_x or needs[0] or needs[1]:
            dxn = (dy @ torch.cat(params[2::2]).to(dtype)).view(x.shape)
            dx, dlnw, dlnb = _kernels(dy).layer_norm_backward(dxn, x, mean, rstd, params[0].to(dtype), need_x)
            grads[0] = dx if need_x else None
            grads[1] = dlnw.to(params[0].dtype) if needs[0] else None
            grads[2] = dlnb.to(params[1].dtype) if needs[1] else None
    return grads


def msa_row_attention_backward(inputs, needs, grad_out, num_heads, precision="default", o=None, stats=None):
    """Gradients of the fused row attention for the tensors in `inputs` (msa_repr, pair_repr, msa_mask,
    then the fourteen parameters), None where `needs` is False; `o` and `stats`, the forward's un-gated
    attention output and softmax statistics, when it kept them.

    The projections are recomputed: for 16-bit inputs by `ops.layer_norm_linear.ln_project` (evofuse's
    LayerNorm with its statistics, as the training forward ran it) with their gradients by hand,
    otherwise under autograd (PyTorch's LayerNorm, cuBLAS); the pair bias likewise (by hand for 16-bit
    inputs, `_pair_bias_grads`); out_proj's
    backward is two products; the attention core's backward is `ops.row_attention.attention_core_backward`
    (fused kernels; the custom op `evofuse::msa_row_attention_core_backward` under torch.compile).
    What is kept between forward and backward is the inputs, o (their size) and the statistics (two
    floats a row and head); the backward's buffers are of the size of qkvg and the pair bias.
    """
    from .ops.layer_norm_linear import ln_project_ready
    from .ops.row_attention import pair_bias, project

    kernels = _kernels(grad_out)

    msa, pair, msa_mask, *params = inputs
    need_msa, need_pair, _, *need_params = needs
    dtype = msa.dtype
    B, S, N, D = msa.shape
    by_hand = ln_project_ready(dtype, D)
    need_z = need_pair or need_params[12] or need_params[13]
    if by_hand:
        z = pair_bias(pair, params[12], params[13], dtype)
        qkvg, xn, mean, rstd = kernels.ln_project(msa, params[0], params[1], list(params[2:10:2]),
                                                  list(params[3:10:2]))
    else:
        with torch.enable_grad():
            pair_l = leaf(pair, need_pair, dtype)
            wz, bz = (leaf(p, n, dtype) for p, n in zip(params[12:], need_params[12:]))
            z = pair_bias(pair_l, wz, bz, dtype)
            msa_l = leaf(msa, need_msa)
            proj = [leaf(p, n, dtype) for p, n in zip(params[:10], need_params[:10])]
            qkvg = project(msa_l, proj[0], proj[1], proj[2::2], proj[3::2])
    wo = params[10].to(dtype)
    go = grad_out.to(dtype).reshape(-1, D)
    with ieee_fp32_matmul():
        d_gated = (go @ wo).view(B, S, N, D)
    dx, dz, gated = kernels.attention_core_backward(qkvg.detach(), z.detach(), msa_mask, d_gated, num_heads,
                                                    precision, need_z, o, stats)
    del d_gated
    with ieee_fp32_matmul():
        dwo = go.t() @ gated.view(-1, D) if need_params[10] else None
    del gated
    dbo = column_sums(go) if need_params[11] else None  # no float32 copy of go
    if by_hand:
        del qkvg  # (B, S, N, 4D): freed before the projection's and the LayerNorm's gradients are allocated
        d_pair, dwz, dbz = _pair_bias_grads(dz, pair, params[12], params[13], dtype, need_pair, *need_params[12:])
        proj_grads = _ln_linear_grads(dx, msa, xn, mean, rstd, params[:10], need_msa, need_params[:10])
        grads = [proj_grads[0], d_pair, None] + proj_grads[1:]
    else:
        _backward([qkvg, z], [dx, dz.to(dtype) if z.requires_grad else None])
        grads = [_grad(msa_l, msa, need_msa), _grad(pair_l, pair, need_pair), None]
        grads += [_grad(lf, p, n) for lf, p, n in zip(proj, params[:10], need_params[:10])]
        dwz, dbz = _grad(wz, params[12], need_params[12]), _grad(bz, params[13], need_params[13])
    grads += [None if dwo is None else dwo.to(params[10].dtype), None if dbo is None else dbo.to(params[11].dtype)]
    return tuple(grads + [dwz, dbz])


def _pair_bias_grads(dz, pair, weight, bias, dtype, need_pair, need_weight, need_bias):
    """Gradients of the pair bias z = (pair @ weight^T + bias) permuted to (B, h, N, N) (`pair_bias`, its
    products in `dtype`) from dz (B, h, N, N) float32, by hand (autograd's engine and its recorded
    forward cost ~15 PyTorch calls of host time): (pair's, weight's, bias's), None where not needed."""
    B, h, N, _ = dz.shape
    P = pair.shape[-1]
    dz16 = dz.to(dtype) if need_pair or need_weight else None  # the products' operands, as autograd's were
    d_pair = d_weight = d_bias = None
    if need_pair:  # (b, (i j), h) @ (h, P)
        d_pair = (dz16.view(B, h, N * N).transpose(1, 2) @ weight.to(dtype)).view(B, N, N, P).to(pair.dtype)
    if need_weight:  # (h, (b i j)) @ ((b i j), P)
        d_weight = dz16.transpose(0, 1).reshape(h, B * N * N) @ pair.reshape(B * N * N, P).to(dtype)
        d_weight = d_weight.to(weight.dtype)
    if need_bias:
        d_bias = dz.sum((0, 2, 3)).to(bias.dtype)
    return d_pair, d_weight, d_bias

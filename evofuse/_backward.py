"""Backward passes of the fused forwards.

The Outer Product Mean's: the reference recomputed under autograd one block at a time.

The forward kernel keeps no N*N*c*c tensor, and neither does this backward: the Outer Product Mean is
recomputed for a block of output rows i at a time, each block sized to about BLOCK_BYTES of its
outer products. Gradients of what every block shares (b, out_proj's weight and bias) are summed by
autograd in float32 (16-bit running sums lost ~1e-2 relative over 16 blocks in a bf16 test on the
H200) in a fixed block order: two backward passes give bit-identical gradients. These are PyTorch
(cuBLAS) passes, not fused kernels.

Row attention's backward (`msa_row_attention_backward`, last) is fused: the attention core's gradient
comes from the kernels in `ops.row_attention`.
"""

from __future__ import annotations

import torch

from . import reference as ref
from .ops._common import ieee_fp32_matmul

BLOCK_BYTES = 32 << 20


def leaf(t: torch.Tensor | None, needed: bool, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """A detached copy (cast to `dtype`) that collects its own gradient when `needed`."""
    if t is None:
        return None
    t = t.detach() if dtype is None else t.detach().to(dtype)
    return t.requires_grad_(needed)


def _shared(t: torch.Tensor, needed: bool, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """For a tensor every block uses: a float32 leaf, which sums the blocks' gradients in float32
    (a 16-bit leaf would round the running sum after every block), and its cast to `dtype`."""
    leaf = t.detach().float().requires_grad_(needed)
    return leaf, leaf.to(dtype)


def _grad(leaf: torch.Tensor | None, original: torch.Tensor | None, needed: bool) -> torch.Tensor | None:
    if not needed or leaf is None:
        return None
    g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
    return g.to(original.dtype)


def _backward(outputs: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
    pairs = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad and g is not None]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])


def outer_product_mean_backward(inputs, needs, grad_out, normalization):
    """Gradients of `reference.outer_product_mean_reference` for the tensors in `inputs`
    (msa_repr, msa_mask, then the eight parameters), None where `needs` is False."""
    msa, mask, *params = inputs
    dtype = msa.dtype
    with torch.enable_grad():
        msa_l = leaf(msa, needs[0])
        proj = [leaf(p, n, dtype) for p, n in zip(params[:6], needs[2:8])]
        (w_leaf, w_out), (wb_leaf, b_out) = (_shared(p, n, dtype) for p, n in zip(params[6:], needs[8:]))
        a, b, counts = ref.outer_product_mean_projections(msa_l, mask, *proj)
        b_l, b_used = _shared(b, b.requires_grad, dtype)
        da = torch.zeros_like(a) if a.requires_grad else None
        B, S, N, c = a.shape
        rows = max(1, BLOCK_BYTES // max(1, B * N * c * c * a.element_size()))
        for i0 in range(0, N, rows):
            a_rows = leaf(a[:, :, i0:i0 + rows], da is not None)
            out = ref.outer_product_mean_rows(a_rows, b_used, counts[:, :, i0:i0 + rows], counts, w_out, b_out,
                                              normalization)
            _backward([out], [grad_out[:, i0:i0 + rows].to(dtype)])
            if da is not None:
                da[:, :, i0:i0 + rows] = a_rows.grad
        _backward([a, b], [da, None if b_l.grad is None else b_l.grad.to(dtype)])
    leaves = [msa_l, None, *proj, w_leaf, wb_leaf]
    return tuple(_grad(lf, t, n) for lf, t, n in zip(leaves, inputs, needs))


def msa_row_attention_backward(inputs, needs, grad_out, num_heads, precision="default"):
    """Gradients of the fused row attention for the tensors in `inputs` (msa_repr, pair_repr, msa_mask,
    then the fourteen parameters), None where `needs` is False.

    The projections and the pair bias are recomputed under autograd (cuBLAS); out_proj's backward is
    two products; the attention core's backward is the custom op `evofuse::msa_row_attention_core_backward`
    (fused kernels, `ops.row_attention.attention_core_backward`). What is kept between forward and
    backward is the inputs only; the backward's buffers are of the size of qkvg and the pair bias.
    """
    from ._library import msa_row_attention_core_backward_op
    from .ops.row_attention import pair_bias, project

    msa, pair, msa_mask, *params = inputs
    need_msa, need_pair, _, *need_params = needs
    dtype = msa.dtype
    B, S, N, D = msa.shape
    with torch.enable_grad():
        msa_l = leaf(msa, need_msa)
        proj = [leaf(p, n, dtype) for p, n in zip(params[:10], need_params[:10])]
        qkvg = project(msa_l, proj[0], proj[1], proj[2::2], proj[3::2])
        pair_l = leaf(pair, need_pair, dtype)
        wz, bz = (leaf(p, n, dtype) for p, n in zip(params[12:], need_params[12:]))
        z = pair_bias(pair_l, wz, bz, dtype)
    wo = params[10].to(dtype)
    go = grad_out.to(dtype).reshape(-1, D)
    with ieee_fp32_matmul():
        d_gated = (go @ wo).view(B, S, N, D)
    dx, dz, gated = msa_row_attention_core_backward_op(qkvg.detach(), z.detach(), msa_mask, d_gated, num_heads,
                                                       precision, z.requires_grad)
    with ieee_fp32_matmul():
        dwo = go.t() @ gated.view(-1, D) if need_params[10] else None
    dbo = go.float().sum(0) if need_params[11] else None
    _backward([qkvg, z], [dx, dz.to(dtype) if z.requires_grad else None])
    grads = [_grad(msa_l, msa, need_msa), _grad(pair_l, pair, need_pair), None]
    grads += [_grad(lf, p, n) for lf, p, n in zip(proj, params[:10], need_params[:10])]
    grads += [None if dwo is None else dwo.to(params[10].dtype), None if dbo is None else dbo.to(params[11].dtype)]
    grads += [_grad(wz, params[12], need_params[12]), _grad(bz, params[13], need_params[13])]
    return tuple(grads)

"""Backward passes of the fused forwards: the reference recomputed under autograd one block at a time.

The forward kernels keep no N*N*c*c or S*h*N*N tensor, and neither does this backward: the Outer
Product Mean is recomputed for a block of output rows i at a time, the row attention for a block of
MSA rows s at a time (the rows are independent given the pair bias), each block sized to about
BLOCK_BYTES of its large intermediate. Gradients of what every block shares (b, the pair bias, the
weights) are summed by autograd in float32 (16-bit running sums lost ~1e-2 relative over the 16 blocks
of att-af2-main on the H200) in a fixed block order: two backward passes give bit-identical gradients. These are PyTorch (cuBLAS) passes, not fused kernels.
"""

from __future__ import annotations

import torch

from . import reference as ref

BLOCK_BYTES = 32 << 20


def _leaf(t: torch.Tensor | None, needed: bool, dtype: torch.dtype | None = None) -> torch.Tensor | None:
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
        msa_l = _leaf(msa, needs[0])
        proj = [_leaf(p, n, dtype) for p, n in zip(params[:6], needs[2:8])]
        (w_leaf, w_out), (wb_leaf, b_out) = (_shared(p, n, dtype) for p, n in zip(params[6:], needs[8:]))
        a, b, counts = ref.outer_product_mean_projections(msa_l, mask, *proj)
        b_l, b_used = _shared(b, b.requires_grad, dtype)
        da = torch.zeros_like(a) if a.requires_grad else None
        B, S, N, c = a.shape
        rows = max(1, BLOCK_BYTES // max(1, B * N * c * c * a.element_size()))
        for i0 in range(0, N, rows):
            a_rows = _leaf(a[:, :, i0:i0 + rows], da is not None)
            out = ref.outer_product_mean_rows(a_rows, b_used, counts[:, :, i0:i0 + rows], counts, w_out, b_out,
                                              normalization)
            _backward([out], [grad_out[:, i0:i0 + rows].to(dtype)])
            if da is not None:
                da[:, :, i0:i0 + rows] = a_rows.grad
        _backward([a, b], [da, None if b_l.grad is None else b_l.grad.to(dtype)])
    leaves = [msa_l, None, *proj, w_leaf, wb_leaf]
    return tuple(_grad(leaf, t, n) for leaf, t, n in zip(leaves, inputs, needs))


def msa_row_attention_backward(inputs, needs, grad_out, num_heads):
    """Gradients of `reference.msa_row_attention_reference` (no dropout) for the tensors in `inputs`
    (msa_repr, pair_repr, msa_mask, then the fourteen parameters), None where `needs` is False."""
    msa, pair, mask, *params = inputs
    dtype = msa.dtype
    with torch.enable_grad():
        pair_l = _leaf(pair, needs[1], dtype)
        shared = [_shared(p, n, dtype) for p, n in zip(params[:12], needs[3:15])]
        w_z, b_z = (_leaf(p, n, dtype) for p, n in zip(params[12:], needs[15:]))
        bias = torch.nn.functional.linear(pair_l, w_z, b_z).permute(0, 3, 1, 2)  # (B, h, N, N)
        bias_l, bias_used = _shared(bias, bias.requires_grad, dtype)
        B, S, N, D = msa.shape
        dmsa = torch.empty_like(msa) if needs[0] else None
        rows = max(1, BLOCK_BYTES // max(1, B * num_heads * N * N * msa.element_size()))
        for s0 in range(0, S, rows):
            x = _leaf(msa[:, s0:s0 + rows], needs[0])
            m = None if mask is None else mask[:, s0:s0 + rows]
            out = ref.msa_row_attention_with_bias(x, bias_used, m, *(used for _, used in shared), num_heads)
            _backward([out], [grad_out[:, s0:s0 + rows].to(dtype)])
            if dmsa is not None:
                dmsa[:, s0:s0 + rows] = x.grad
        _backward([bias], [None if bias_l.grad is None else bias_l.grad.to(dtype)])
    grads = [dmsa, _grad(pair_l, pair, needs[1]), None]
    leaves = [leaf for leaf, _ in shared] + [w_z, b_z]
    grads += [_grad(leaf, t, n) for leaf, t, n in zip(leaves, params, needs[3:])]
    return tuple(grads)

"""The transition as a torch.library custom op, `evofuse::transition`, with its fake and its backward
(`register_autograd`): out = (act(LayerNorm(x) @ W_in^T + b_in) @ W_out^T + b_out) * mask, act SwiGLU (silu(a) * b,
AF3 Algorithm 11) or ReLU (AF2 Algorithms 9 and 15).

Forward: the shared `layer_norm_glu` kernel makes the hidden rows h = act(a, b) * mask from x in one pass (the
normalized rows on chip), for blocks of rows whose hidden rows take at most BLOCK_BYTES, each block's output rows by
one cuBLAS product with W_out. Nothing but the input is kept for the backward. Backward: many 16-bit rows take
`backward_tma`'s pass, which also takes the LayerNorm's backward on chip, then W_in's and W_out's gradients by cuBLAS;
every other call `kernels.transition_backward_kernel`, which makes a and b again from x and dh = (g mask) W_out on chip
and from them the pre-activations' gradient, and h * mask, in one pass; W_out's gradient g^T (h mask) by cuBLAS; then
`layer_norm_linear_backward` for x, the LayerNorm and W_in.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import as_rows, keep_for_backward, operation, permuted, rows_first, traced
from ...stages import layer_norm_glu
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.matmul import matmul, matmul_into, uses_tensor_cores
from . import backward_tma
from .kernels import core_backward, core_backward_op

BLOCK_BYTES = 320 * 2**20  # the hidden rows a forward holds at a time (one block at the suite's shapes)


def transition_forward(x: Tensor, mask: Tensor | None, ln_weight: Tensor, ln_bias: Tensor, in_weight: Tensor,
                       in_bias: Tensor | None, out_weight: Tensor, out_bias: Tensor | None, glu: bool, precision: str,
                       train: bool) -> Tensor:
    """out (..., C). x (..., D) float16, bfloat16 or float32, any strides; mask of x's leading shape, 0/1 of any real
    dtype, or None; ln_weight, ln_bias (D,); in_weight (K, D) with K = 2H (`glu`: a's H rows, then b's) or H, in_bias
    (K,) or None; out_weight (C, H) with H >= 1, out_bias (C,) or None; all in x's dtype. A training call computes
    as an inference call: the backward needs x and the parameters alone."""
    D = x.shape[-1]
    C, H = out_weight.shape
    lead = x.shape[:-1]
    rows = x.reshape(-1, D)
    M = rows.shape[0]
    mask_rows = None if mask is None else mask.reshape(M)
    out = x.new_empty(M, C)
    block = max(1, min(M, BLOCK_BYTES // (H * x.element_size())))
    h = x.new_empty(block if M else 0, H)
    for r0 in range(0, M, block):
        n = min(M, r0 + block) - r0
        layer_norm_glu.layer_norm_glu(rows[r0:r0 + n], ln_weight, ln_bias, in_weight, in_bias,
                                      None if mask is None else mask_rows[r0:r0 + n], h[:n], "swiglu" if glu else "relu",
                                      precision)
        if uses_tensor_cores(x.dtype, precision):  # (float32: three TF32 products, written in place)
            matmul_into(h[:n], out_weight.t(), out[r0:r0 + n])
            if out_bias is not None:
                out[r0:r0 + n] += out_bias
        elif out_bias is None:
            torch.mm(h[:n], out_weight.t(), out=out[r0:r0 + n])
        else:
            torch.addmm(out_bias, h[:n], out_weight.t(), out=out[r0:r0 + n])
    if mask is not None and out_bias is not None:  # (the masked rows' h is zero: their output the bias alone)
        out *= mask_rows[:, None]
    return out.view(*lead, C)


def _fake(x, mask, ln_weight, ln_bias, in_weight, in_bias, out_weight, out_bias, glu, precision, train):
    return x.new_empty(*x.shape[:-1], out_weight.shape[0])


def _setup_context(ctx, inputs, output):
    x, mask, *params, glu, precision, _ = inputs
    keep_for_backward(ctx, [x, mask, *params], [], glu=glu, precision=precision)


def _backward(ctx, needs, grad_out):
    x, mask, lnw, lnb, w_in, b_in, w_out, _ = ctx.saved_tensors
    # (a distributed x sharded along a later leading dimension: every rows' product takes that dimension first)
    order = rows_first(x)
    x = permuted(x, order)
    grad = as_rows(grad_out, order)  # (a view where it can be: a broadcast gradient stays one)
    mask_rows = None if mask is None else as_rows(mask[..., None], order).view(-1).to(grad.dtype)
    grads = {}
    if needs["out_bias"]:  # the mask's rows of the gradient summed: a product, no masked copy
        grads["out_bias"] = (grad.sum(0) if mask_rows is None else grad.t() @ mask_rows).to(w_out.dtype)
    inner = ("x", "ln_weight", "ln_bias", "in_weight", "in_bias")
    if not (any(needs[name] for name in inner) or needs["out_weight"]):
        return grads
    rows = x.reshape(-1, x.shape[-1])
    fused = any(needs[name] for name in inner) and backward_tma.takes(rows, w_in, grad, w_out, ctx.glu)
    if fused:  # (the LayerNorm's backward on chip: x's gradient and the LayerNorm's come with d_pre)
        call = backward_tma.transition_backward_rows_op if traced(grad_out) else backward_tma.transition_backward_rows
        d_pre, h, xn, dx, d_ln = call(rows, lnw, lnb, w_in, b_in, grad, mask_rows, w_out, ctx.glu)
    else:
        call = core_backward_op if traced(grad_out) else core_backward
        d_pre, h = call(rows, lnw, lnb, w_in, b_in, grad, mask_rows, w_out, ctx.glu, ctx.precision)
    if needs["out_weight"]:  # (h masked: the masked gradient's product)
        grads["out_weight"] = matmul(grad.t(), h, ctx.precision)
    del h
    if fused:
        d_ln = d_ln.to(lnw.dtype)
        made = (permuted(dx.view(x.shape), order, back=True), d_ln[0], d_ln[1],
                matmul(d_pre.t(), xn, ctx.precision) if needs["in_weight"] else None,
                d_pre.sum(0) if needs["in_bias"] else None)
        return grads | {name: g for name, g in zip(inner, made) if needs[name]}
    if any(needs[name] for name in inner):
        dx, *rest = layer_norm_linear_backward(x, lnw, lnb, w_in, d_pre, [needs[n] for n in inner], ctx.precision)
        grads |= dict(zip(inner, (None if dx is None else permuted(dx, order, back=True), *rest)))
    return grads


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
transition_op, transition = operation("transition", transition_forward, _fake, _setup_context, _backward)

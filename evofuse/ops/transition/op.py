"""The transition as a torch.library custom op, `evofuse::transition`, with its fake and its backward
(`register_autograd`): out = (act(LayerNorm(x) @ W_in^T + b_in) @ W_out^T + b_out) * mask, act SwiGLU (silu(a) * b,
AF3 Algorithm 11) or ReLU (AF2 Algorithms 9 and 15).

Forward: the shared `layer_norm_glu` kernel makes the hidden rows h = act(a, b) * mask from x in one pass (the
normalized rows on chip), for blocks of rows whose hidden rows take at most BLOCK_BYTES, each block's output rows by
one cuBLAS product with W_out. Nothing but the input is kept for the backward. Backward:
`kernels.transition_backward_kernel` makes a and b again from x and dh = (g mask) W_out on chip and from them the
pre-activations' gradient, and h * mask, in one pass; W_out's gradient g^T (h mask) by cuBLAS; then
`layer_norm_linear_backward` for x, the LayerNorm and W_in.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import (
    as_rows,
    autotuned,
    bucket,
    cdiv,
    custom_op,
    dot_precision,
    keep_for_backward,
    operation,
    permuted,
    rows_first,
    traced,
)
from ...reference import LAYER_NORM_EPS
from ...stages import layer_norm_glu
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.matmul import matmul, matmul_into, uses_tensor_cores
from . import configs
from .kernels import transition_backward_kernel

BLOCK_BYTES = 320 * 2**20  # the hidden rows a forward holds at a time (one block at the suite's shapes)
# what the backward kernel's autotuned choice is kept by
BACKWARD_KEY = ["M_BUCKET", "H_BUCKET", "D", "C", "GLU", "HAS_BIAS", "HAS_MASK", "PRECISION"]


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


def core_backward(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, in_weight: Tensor, in_bias: Tensor | None,
                  grad: Tensor, mask: Tensor | None, out_weight: Tensor, glu: bool,
                  precision: str) -> tuple[Tensor, Tensor]:
    """(d_pre (M, K), h (M, H)): the pre-activations' gradient, from the rows x (M, D) any strides, the LayerNorm's and
    the input projection's parameters as the forward took them, the output's gradient grad (M, C) (any strides), the
    row mask (M,) or None and out_weight (C, H); a and b made again and the hidden rows' gradient on chip; and the
    hidden rows again, times the mask, for out_weight's gradient (`kernels.transition_backward_kernel`)."""
    M, D = x.shape
    C, H = out_weight.shape
    d_pre = x.new_empty(M, in_weight.shape[0])
    h = x.new_empty(M, H)
    if M:
        def grid(meta):
            return cdiv(M, meta["BLOCK_M"]), cdiv(H, meta["BLOCK_N"])

        kernel = autotuned(transition_backward_kernel, layer_norm_glu.tables, BACKWARD_KEY, configs.prune_backward)
        kernel[grid](x, *x.stride(), ln_weight, ln_bias, in_weight, *in_weight.stride(),
                     in_weight if in_bias is None else in_bias, grad, *grad.stride(), h if mask is None else mask,
                     out_weight, *out_weight.stride(), d_pre, h, M, D, C, H, LAYER_NORM_EPS, bucket(M), bucket(H),
                     GLU=glu, HAS_BIAS=in_bias is not None, HAS_MASK=mask is not None,
                     PRECISION=dot_precision(x.dtype, precision))
    return d_pre, h


def _core_backward_fake(x, ln_weight, ln_bias, in_weight, in_bias, grad, mask, out_weight, glu, precision):
    return x.new_empty(x.shape[0], in_weight.shape[0]), x.new_empty(x.shape[0], out_weight.shape[1])


core_backward_op = custom_op("transition_core_backward", core_backward, _core_backward_fake)


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
    backward = core_backward_op if traced(grad_out) else core_backward
    d_pre, h = backward(x.reshape(-1, x.shape[-1]), lnw, lnb, w_in, b_in, grad, mask_rows, w_out, ctx.glu,
                        ctx.precision)
    if needs["out_weight"]:  # (h masked: the masked gradient's product)
        grads["out_weight"] = matmul(grad.t(), h, ctx.precision)
    del h
    if any(needs[name] for name in inner):
        dx, *rest = layer_norm_linear_backward(x, lnw, lnb, w_in, d_pre, [needs[n] for n in inner], ctx.precision)
        grads |= dict(zip(inner, (None if dx is None else permuted(dx, order, back=True), *rest)))
    return grads


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
transition_op, transition = operation("transition", transition_forward, _fake, _setup_context, _backward)

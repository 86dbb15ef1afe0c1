"""MSA column attention as a torch.library custom op, `evofuse::msa_column_attention`, with its fake and its backward
(`register_autograd`): gated attention over the rows of x (B, R, L, D) (the MSA transposed: a residue's column of S
MSA rows as a row of L = S keys) with no bias, on the attention core (`stages.attention.core.attention`, its bias a
zero of zero strides that every load reads from one address) and core backward (`bias_grad=False`: no bias gradient
kernel). One `layer_norm_linear` for q, k, v and the gate; out_proj by cuBLAS; the backward's LayerNorm and
projections by one `layer_norm_linear_backward`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import as_rows, contiguous, keep_for_backward, operation, rows_first, traced
from ...stages.attention.core import attention, core_backward, core_backward_op, no_bias
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.layer_norm_linear import layer_norm_linear
from ...stages.matmul import linear, matmul


def msa_column_attention_forward(x: Tensor, mask: Tensor | None, layer_norm_weight: Tensor, layer_norm_bias: Tensor,
                                 qkvg_weight: Tensor, qkvg_bias: Tensor | None, out_weight: Tensor,
                                 out_bias: Tensor | None, num_heads: int, precision: str,
                                 train: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out (B, R, L, D), qkvg (B, R, L, 4H), gated (B, R, L, H), lse (2, B, R, L, h) float32): the output, then what
    the backward takes (each empty unless `train`). x (B, R, L, D) any strides (the MSA's transposed view); mask
    (B, R, L) 0/1 of any real dtype or None, a masked key's logit -1e9 with the logit's gradient (an additive mask
    of inf >= 1e9, as the models' float32 arithmetic gives it); qkvg_weight (4H, D) and qkvg_bias (4H,) or None: the
    query, key, value and gate projections stacked; out_weight (D, H), out_bias (D,) or None."""
    H = out_weight.shape[1]
    qkvg = layer_norm_linear(x, layer_norm_weight, layer_norm_bias, qkvg_weight, qkvg_bias, None, precision)
    gated, lse = attention(qkvg, no_bias(qkvg, num_heads), mask, H, num_heads, "add", precision, train)
    if not train:  # (its memory free before the output's is taken)
        qkvg = qkvg.new_empty(0)
    out = linear(gated, out_weight, out_bias, precision)
    return out, qkvg, gated if train else gated.new_empty(0), lse


def _fake(x, mask, layer_norm_weight, layer_norm_bias, qkvg_weight, qkvg_bias, out_weight, out_bias, num_heads, precision,
          train):
    B, R, L, D = x.shape
    H = out_weight.shape[1]
    lse = x.new_empty(2, B, R, L, num_heads if train else 0, dtype=torch.float32)
    if not train:
        return x.new_empty(B, R, L, D), x.new_empty(0), x.new_empty(0), lse
    return x.new_empty(B, R, L, D), x.new_empty(B, R, L, 4 * H), x.new_empty(B, R, L, H), lse


def _setup_context(ctx, inputs, output):
    x, mask, *params, num_heads, precision, _ = inputs
    keep_for_backward(ctx, [x, mask, *params], list(output[1:]), num_heads=num_heads, precision=precision)


def _backward(ctx, needs, grad_out, *_):
    x, mask, lnw, lnb, w_qkvg, _, wo, _, qkvg, gated, lse = ctx.saved_tensors
    order = rows_first(grad_out)  # (by residues: each device's rows one block, nothing gathered)
    grad_out = contiguous(grad_out)  # (the MSA's transposed view's: the copy out_weight's product needs)
    grads = dict(out_bias=grad_out.sum((0, 1, 2), dtype=torch.float32).to(x.dtype) if needs["out_bias"] else None,
                 out_weight=matmul(as_rows(grad_out, order).t(), as_rows(gated, order), ctx.precision)
                 if needs["out_weight"] else None)
    inner = ("x", "layer_norm_weight", "layer_norm_bias", "qkvg_weight", "qkvg_bias")
    if not any(needs[name] for name in inner):  # the output projection's alone
        return grads
    backward = core_backward_op if traced(grad_out) else core_backward
    d_qkvg, _ = backward(qkvg, no_bias(qkvg, ctx.num_heads), mask, grad_out, wo, gated, lse, ctx.num_heads, "add",
                         ctx.precision, False)
    return grads | dict(zip(inner, layer_norm_linear_backward(x, lnw, lnb, w_qkvg, d_qkvg, [needs[n] for n in inner],
                                                              ctx.precision)))


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
msa_column_attention_op, msa_column_attention = operation("msa_column_attention", msa_column_attention_forward, _fake,
                                                          _setup_context, _backward)

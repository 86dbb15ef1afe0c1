"""Attention with pair bias over the single representation (AF3 Algorithm 24) as a torch.library custom op,
`evofuse::attention_pair_bias`, with its fake and its backward (`register_autograd`); the attention core and its
backward are `stages.attention`'s, the single representation taken as one row of N tokens.

Forward: the q, k, v and gate projections of the (already normalized) single representation in one product
(`stages.matmul.linear`, (B, N, 4H)); the bias (B, h, N, N) from the pair by `pair_heads` (its LayerNorm and
projection in one pass) or, where the caller projected it once, the given (B, N, N, h) bias head major (a copy for a
training call, whose core's backward writes the bias's gradient in its layout, or where its heads are not
contiguous; an inference call reads a head-major view in place, a batch broadcast included); the attention core with
the key mask as an additive mask; the output projection. No (B, h, N, N) logits exist.
Backward: the output projection's weight gradient, the core's backward (the projections' gradient and the bias's),
then the projections' input and weight gradients as two products and the bias's back through `pair_heads_backward`
(or, for a given bias, its gradient transposed).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import keep_for_backward, operation, traced
from ...stages.attention.core import attention, core_backward, core_backward_op
from ...stages.matmul import linear, matmul
from ...stages.pair_heads import pair_heads, pair_heads_backward


def attention_pair_bias_forward(single_repr: Tensor, pair_repr: Tensor, mask: Tensor | None, qkvg_weight: Tensor,
                                qkvg_bias: Tensor | None, out_weight: Tensor, pair_norm_weight: Tensor | None,
                                pair_norm_bias: Tensor | None, pair_weight: Tensor | None, num_heads: int,
                                precision: str, train: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(out (B, N, c_s), qkvg (B, 1, N, 4H), gated (B, 1, N, H), lse (2, B, 1, N, h) float32, z (B, h, N, N)): the
    output, then what the backward takes (each empty unless `train`). single_repr (B,
    N, c_s) any strides; pair_repr (B, N, N, c_z) with pair_weight (h, c_z) (and the pair's LayerNorm where
    pair_norm_weight and pair_norm_bias (c_z,) are given), or the bias (B, N, N, h) itself where pair_weight is None;
    mask (B, N) 0/1 of any real dtype or None; qkvg_weight (4H, c_s): q's, k's, v's and the gate's rows stacked,
    qkvg_bias (4H,) or None; out_weight (c_s, H). Every tensor argument has single_repr's dtype."""
    H = qkvg_weight.shape[0] // 4
    qkvg = linear(single_repr, qkvg_weight, qkvg_bias, precision)[:, None]  # (B, 1, N, 4H): one row of N tokens
    z = pair_repr.permute(0, 3, 1, 2) if pair_weight is None else pair_heads(
        pair_repr, pair_norm_weight, pair_norm_bias, pair_weight, None)
    if pair_weight is None and (train or z.stride(-1) != 1):  # (the backward writes the bias's gradient in z's strides)
        z = z.contiguous()
    gated, lse = attention(qkvg, z, None if mask is None else mask[:, None], H, num_heads, "add", precision, train)
    out = linear(gated[:, 0], out_weight, None, precision)
    if not train:
        return out, qkvg.new_empty(0), gated.new_empty(0), lse, qkvg.new_empty(0)
    return out, qkvg, gated, lse, z


def _fake(single_repr, pair_repr, mask, qkvg_weight, qkvg_bias, out_weight, pair_norm_weight, pair_norm_bias,
          pair_weight, num_heads, precision, train):
    B, N, c = single_repr.shape
    W = qkvg_weight.shape[0]
    lse = single_repr.new_empty(2, B, 1, N, num_heads if train else 0, dtype=torch.float32)
    out = single_repr.new_empty(B, N, out_weight.shape[0])
    if not train:
        return out, single_repr.new_empty(0), single_repr.new_empty(0), lse, single_repr.new_empty(0)
    return (out, single_repr.new_empty(B, 1, N, W), single_repr.new_empty(B, 1, N, W // 4), lse,
            single_repr.new_empty(B, num_heads, N, N))


def _setup_context(ctx, inputs, output):
    *tensors, num_heads, precision, _ = inputs
    keep_for_backward(ctx, tensors, list(output[1:]), num_heads=num_heads, precision=precision)


def _backward(ctx, needs, grad_out, *_):
    s, pair, mask, w_qkvg, b_qkvg, wo, pnw, pnb, wz, qkvg, gated, lse, z = ctx.saved_tensors
    B, N, c = s.shape
    W = w_qkvg.shape[0]
    precision = ctx.precision
    grads = dict(out_weight=matmul(grad_out.reshape(-1, c).t(), gated.reshape(-1, W // 4), precision)
                 if needs["out_weight"] else None)
    pair_names = ("pair_repr", "pair_norm_weight", "pair_norm_bias", "pair_weight")
    if not any(needs[name] for name in ("single_repr", "qkvg_weight", "qkvg_bias", *pair_names)):
        return grads
    backward = core_backward_op if traced(grad_out) else core_backward
    d_qkvg, dz = backward(qkvg, z, None if mask is None else mask[:, None], grad_out[:, None], wo, gated, lse,
                          ctx.num_heads, "add", precision)
    rows = d_qkvg.reshape(B * N, W)
    if needs["single_repr"]:
        grads["single_repr"] = matmul(rows, w_qkvg, precision).view(B, N, c)
    if needs["qkvg_weight"]:
        grads["qkvg_weight"] = matmul(rows.t(), s.reshape(B * N, c), precision)
    if needs["qkvg_bias"] and b_qkvg is not None:
        grads["qkvg_bias"] = rows.sum(0, dtype=torch.float32).to(s.dtype)
    if wz is None:  # (a given bias)
        grads["pair_repr"] = dz.permute(0, 2, 3, 1).to(pair.dtype) if needs["pair_repr"] else None
        return grads
    *pair_grads, _ = pair_heads_backward(pair, pnw, pnb, wz, dz, [needs[name] for name in pair_names] + [False])
    return grads | dict(zip(pair_names, pair_grads))


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
attention_pair_bias_op, attention_pair_bias = operation("attention_pair_bias", attention_pair_bias_forward, _fake,
                                                        _setup_context, _backward)

"""MSA row attention with pair bias as a torch.library custom op: `evofuse::msa_row_attention`, its fake
and its backward, registered with `register_autograd`; the backward's attention core is a custom op of its
own, `evofuse::msa_row_attention_core_backward`, so that torch.compile traces around its Triton kernels.

Forward: LayerNorm and the q, k, v, gate projections in one kernel (`layer_norm_linear`, one (B, S, N, 4H)
output for the inner width H = heads x head_dim), the pair bias (B, h, N, N) once per batch element, with the
pair's own LayerNorm where it has one (`pair_heads`), the attention core
(`stages.attention`), out_proj by cuBLAS. No (S, h, N, N) tensor exists.
Backward: out_proj's gradients by cuBLAS; the core's backward (`stages.attention.core.core_backward`: the gate's
pass, then its three kernels: dq, dk and dv, the pair bias's gradient summed over the MSA rows in a fixed order);
then `layer_norm_linear_backward` and the pair bias projection's gradients (`pair_heads_backward`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import as_rows, keep_for_backward, operation, rows_first, traced
from ...stages.attention.core import attention, core_backward, core_backward_op
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.layer_norm_linear import joined_bias, layer_norm_linear
from ...stages.matmul import linear, matmul
from ...stages.pair_heads import pair_heads, pair_heads_backward


def joined_qkvg(weights: list[Tensor], biases: list[Tensor | None]) -> tuple[Tensor, Tensor | None]:
    """The query, key, value and gate projections' weights (H, D) and biases (H,) or None, stacked as the op takes
    them: (4H, D) and (4H,), or None where every bias is None (missing ones as zeros). Called outside the op, so
    that autograd hands each weight its share of the stacked gradient."""
    return torch.cat(weights), joined_bias(biases, weights)


def row_attention_forward(msa_repr: Tensor, pair_repr: Tensor, msa_mask: Tensor | None, layer_norm_weight: Tensor,
                          layer_norm_bias: Tensor, qkvg_weight: Tensor, qkvg_bias: Tensor | None, out_proj_weight: Tensor,
                          out_proj_bias: Tensor | None, pair_bias_weight: Tensor, pair_bias_bias: Tensor | None,
                          pair_norm_weight: Tensor | None, pair_norm_bias: Tensor | None, num_heads: int, mask_mode: str,
                          precision: str, train: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(out (B, S, N, D), qkvg (B, S, N, 4H), gated (B, S, N, H), lse (2, B, S, N, h) float32, z (B, h, N, N)):
    the output, then what the backward takes (each empty unless `train`): the projections, the gated attention
    output (out_proj's input), the rows' softmax statistics (their largest logit and log2 of their sum, base 2)
    and the pair bias. qkvg_weight (4H, D) and qkvg_bias (4H,) or None are the query, key, value and gate
    projections' stacked (`joined_qkvg`: one weight for the LayerNorm + projection kernel, and fewer schema
    arguments for a traced call); H = num_heads * head_dim is the inner width; any bias may be None; with
    pair_norm_weight and pair_norm_bias the pair is layer-normed in the bias projection's kernel; mask_mode
    ("replace" or "add") matters to the backward alone. Every tensor argument has msa_repr's dtype."""
    H = qkvg_weight.shape[0] // 4
    qkvg = layer_norm_linear(msa_repr, layer_norm_weight, layer_norm_bias, qkvg_weight, qkvg_bias, None, precision)
    z = pair_heads(pair_repr, pair_norm_weight, pair_norm_bias, pair_bias_weight, pair_bias_bias)  # (B, h, N, N)
    gated, lse = attention(qkvg, z, msa_mask, H, num_heads, mask_mode, precision, train)
    if not train:  # (their memory free before the output's is taken)
        qkvg, z = qkvg.new_empty(0), z.new_empty(0)
    out = linear(gated, out_proj_weight, out_proj_bias, precision)
    return out, qkvg, gated if train else gated.new_empty(0), lse, z


def _fake(msa_repr, pair_repr, msa_mask, *params_and_options):
    *_, num_heads, _mask_mode, _precision, train = params_and_options
    B, S, N, D = msa_repr.shape
    H = params_and_options[2].shape[0] // 4  # qkvg_weight's rows: four times the inner width
    gated = msa_repr.new_empty(B, S, N, H) if train else msa_repr.new_empty(0)
    lse = msa_repr.new_empty(2, B, S, N, num_heads if train else 0, dtype=torch.float32)
    if not train:
        return msa_repr.new_empty(B, S, N, D), msa_repr.new_empty(0), gated, lse, msa_repr.new_empty(0)
    return (msa_repr.new_empty(B, S, N, D), msa_repr.new_empty(B, S, N, 4 * H), gated, lse,
            msa_repr.new_empty(B, num_heads, N, N))


def _setup_context(ctx, inputs, output):
    msa_repr, pair_repr, msa_mask, *params, num_heads, mask_mode, precision, _ = inputs
    keep_for_backward(ctx, [msa_repr, pair_repr, msa_mask, *params], list(output[1:]), num_heads=num_heads,
                      mask_mode=mask_mode, precision=precision)


def _backward(ctx, needs, grad_out, *_):
    msa_repr, pair_repr, mask, lnw, lnb, w_qkvg, _, wo, _, wz, _, pnw, pnb, qkvg, gated, lse, z = ctx.saved_tensors
    order = rows_first(grad_out)  # (by MSA rows: each device's rows one block, nothing gathered)
    grads = dict(
        out_proj_bias=grad_out.sum((0, 1, 2), dtype=torch.float32).to(msa_repr.dtype)
        if needs["out_proj_bias"] else None,
        out_proj_weight=matmul(as_rows(grad_out, order).t(), as_rows(gated, order), ctx.precision)
        if needs["out_proj_weight"] else None)
    msa = ("msa_repr", "layer_norm_weight", "layer_norm_bias", "qkvg_weight", "qkvg_bias")
    pair = ("pair_repr", "pair_norm_weight", "pair_norm_bias", "pair_bias_weight", "pair_bias_bias")
    if not any(needs[name] for name in msa + pair):  # out_proj's alone
        return grads
    backward = core_backward_op if traced(grad_out) else core_backward
    d_qkvg, dz = backward(qkvg, z, mask, grad_out, wo, gated, lse, ctx.num_heads, ctx.mask_mode,
                          ctx.precision)
    grads |= dict(zip(msa, layer_norm_linear_backward(msa_repr, lnw, lnb, w_qkvg, d_qkvg, [needs[n] for n in msa],
                                                      ctx.precision)))
    return grads | dict(zip(pair, pair_heads_backward(pair_repr, pnw, pnb, wz, dz, [needs[n] for n in pair])))


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
row_attention_op, row_attention = operation("msa_row_attention", row_attention_forward, _fake, _setup_context,
                                            _backward)

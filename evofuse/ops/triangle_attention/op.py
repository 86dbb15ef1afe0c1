"""Triangle attention as a torch.library custom op, `evofuse::triangle_attention`, with its fake and its backward
(`register_autograd`); the attention core and its backward are `stages.attention`'s.

Forward: one LayerNorm of the pair x (B, I, J, c) feeds one projection (`layer_norm_linear`) whose (B, I, J, W)
output holds q, k, v, the gate and, in the next h channels, the triangle bias (W = 4H + h rounded up to 16, so that
every row stays aligned); the bias's channels are copied out as z (B, h, J, K) (a small tensor that every row i
reads), then row attention's core over the rows i, and the output projection by cuBLAS. No (B, I, h, J, K) tensor
and no second LayerNorm.
Inference in row chunks (`chunk_rows`, or where the projections would pass a quarter of the device's free memory,
`inference_chunk_rows`): the bias channels for every row first (B, I, J, h), then the projections, the attention and
the output projection a chunk of rows at a time, so that the (B, I, J, W) projections, four times the pair in its
dtype and the peak of an unchunked call, are never whole.
Backward: the core's kernels give the projections' gradient and z's (summed over the rows i); z's is written into
the bias channels of the projections' gradient, and one `layer_norm_linear_backward` gives every gradient of x, the
LayerNorm and the joined weight.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import as_rows, contiguous, keep_for_backward, operation, rows_first, rows_that_fit, traced
from ...stages.attention.core import attention, core_backward, core_backward_op
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.layer_norm_linear import joined_bias, layer_norm_linear
from ...stages.matmul import linear, matmul

ALIGN = 16  # the joined projection's width is a multiple of this: its rows start aligned for the attention kernels


def joined_projections(weights: list[Tensor], bias_weight: Tensor | None,
                       gate_bias: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """The query, key, value and gate weights (H, c), the triangle bias's (h, c) (None where the bias is made apart,
    `triangle_bias`) and zero rows up to a multiple of ALIGN, stacked as the op takes them: (W, c), and the joined
    bias (W,) (the gate's, zeros elsewhere) or None. Called outside the op, so that autograd hands each weight its
    share of the stacked gradient."""
    stacked = [*weights] if bias_weight is None else [*weights, bias_weight]
    rows = sum(w.shape[0] for w in stacked)
    stacked.append(weights[0].new_zeros(-rows % ALIGN, weights[0].shape[1]))
    return torch.cat(stacked), joined_bias([None, None, None, gate_bias, *[None] * (len(stacked) - 4)], stacked)


def triangle_attention_forward(pair_repr: Tensor, pair_mask: Tensor | None, layer_norm_weight: Tensor,
                               layer_norm_bias: Tensor, proj_weight: Tensor, proj_bias: Tensor | None,
                               out_weight: Tensor, out_bias: Tensor | None, bias: Tensor | None, num_heads: int,
                               transpose_bias: bool, precision: str, chunk_rows: int, train: bool
                               ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(out (B, I, J, c), proj (B, I, J, W), gated (B, I, J, H), lse (2, B, I, J, h) float32, z (B, h, J, K)): the
    output, then what the backward takes (each empty unless `train`). pair_repr (B, I, J, c) any strides (the ending
    node: the transposed pair's view); pair_mask (B, I, K) 0/1 of any real dtype or None, added as inf * (mask - 1)
    for inf >= 1e9 (row attention's "add" mode); proj_weight (W, c) and proj_bias (W,) or None from
    `joined_projections`; out_weight (c, H), out_bias (c,) or None; bias: the triangle bias z (B, h, J, K) made
    apart (`triangle_bias`; proj_weight then without its rows) or None; transpose_bias: z[b, h, j, k] from
    x[b, k, j]; chunk_rows: rows i an inference call takes at a time (0: `inference_chunk_rows` decides). Where the
    bias is given, the kept z is empty (the backward reads the input)."""
    H = out_weight.shape[1]
    rows = 0 if train else chunk_rows or inference_chunk_rows(pair_repr, proj_weight.shape[0])
    if 0 < rows < pair_repr.shape[1]:
        return _chunked(pair_repr, pair_mask, layer_norm_weight, layer_norm_bias, proj_weight, proj_bias, out_weight,
                        out_bias, bias, num_heads, transpose_bias, precision, rows)
    proj = layer_norm_linear(pair_repr, layer_norm_weight, layer_norm_bias, proj_weight, proj_bias, None, precision)
    # (B, h, J, K), copied out (every row reads it: unit-strided); no view of proj outlives it, so that proj's
    # memory is free before the output's is taken
    z = _bias_of(proj, H, num_heads, transpose_bias).contiguous() if bias is None else bias
    gated, lse = attention(proj, z, pair_mask, H, num_heads, "add", precision, train)
    if not train or bias is not None:  # (their memory free before the output's is taken)
        z = z.new_empty(0)
    if not train:
        proj = proj.new_empty(0)
    out = linear(gated, out_weight, out_bias, precision)
    return out, proj, gated if train else gated.new_empty(0), lse, z


def inference_chunk_rows(pair_repr: Tensor, W: int) -> int:
    """Rows i an inference call takes at a time (`_runtime.rows_that_fit`): a row's projections (B, J, W)."""
    B, rows, J, _ = pair_repr.shape
    return rows_that_fit(rows, B * J * W * pair_repr.element_size(), pair_repr.device)


def _chunked(pair_repr: Tensor, pair_mask: Tensor | None, layer_norm_weight: Tensor, layer_norm_bias: Tensor,
             proj_weight: Tensor, proj_bias: Tensor | None, out_weight: Tensor, out_bias: Tensor | None,
             bias: Tensor | None, num_heads: int, transpose_bias: bool, precision: str,
             rows: int) -> tuple[Tensor, ...]:
    """The inference forward a chunk of `rows` rows i at a time (the backward's outputs empty): the bias channels
    of every row first (every row's attention reads them all), then each chunk's projections, attention and output
    projection, written into the output's rows."""
    B, n_i, J, c = pair_repr.shape
    H = out_weight.shape[1]
    z = bias if bias is not None else triangle_bias_forward(
        pair_repr, layer_norm_weight, layer_norm_bias, proj_weight[4 * H:4 * H + num_heads], transpose_bias, precision,
        False)
    out = pair_repr.new_empty(B, n_i, J, c)
    for i0 in range(0, n_i, rows):
        part = slice(i0, min(n_i, i0 + rows))
        proj = layer_norm_linear(pair_repr[:, part], layer_norm_weight, layer_norm_bias, proj_weight, proj_bias,
                                 None, precision)
        gated, _ = attention(proj, z, None if pair_mask is None else pair_mask[:, part], H, num_heads, "add",
                             precision, False)
        del proj
        out[:, part] = linear(gated, out_weight, out_bias, precision)
    lse = pair_repr.new_empty(2, B, n_i, J, 0, dtype=torch.float32)
    return out, pair_repr.new_empty(0), pair_repr.new_empty(0), lse, pair_repr.new_empty(0)


def _bias_of(proj: Tensor, H: int, num_heads: int, transpose_bias: bool) -> Tensor:
    """The bias channels of the projections (B, I, J, W) as a (B, h, J, K) view (transposed: z[b, h, j, k] from
    x[b, k, j])."""
    bias = proj[..., 4 * H:4 * H + num_heads].permute(0, 3, 1, 2)
    return bias.transpose(-1, -2) if transpose_bias else bias


def _fake(pair_repr, pair_mask, layer_norm_weight, layer_norm_bias, proj_weight, proj_bias, out_weight, out_bias, bias,
          num_heads, transpose_bias, precision, chunk_rows, train):
    B, N, _, c = pair_repr.shape
    H, W = out_weight.shape[1], proj_weight.shape[0]
    out = pair_repr.new_empty(B, N, N, c)
    lse = pair_repr.new_empty(2, B, N, N, num_heads if train else 0, dtype=torch.float32)
    if not train:
        return out, pair_repr.new_empty(0), pair_repr.new_empty(0), lse, pair_repr.new_empty(0)
    return (out, pair_repr.new_empty(B, N, N, W), pair_repr.new_empty(B, N, N, H), lse,
            pair_repr.new_empty(0) if bias is not None else pair_repr.new_empty(B, num_heads, N, N))


def _setup_context(ctx, inputs, output):
    pair_repr, pair_mask, *params, num_heads, transpose_bias, precision, _, _ = inputs
    keep_for_backward(ctx, [pair_repr, pair_mask, *params], list(output[1:]), num_heads=num_heads,
                      transpose_bias=transpose_bias, precision=precision)


def _backward(ctx, needs, grad_out, *_):
    pair_repr, mask, lnw, lnb, w_proj, _, wo, _, bias, proj, gated, lse, z = ctx.saved_tensors
    z = z if bias is None else bias
    H, h = wo.shape[1], ctx.num_heads
    order = rows_first(grad_out)  # (by the pair's rows: each device's rows one block, nothing gathered)
    grad_out = contiguous(grad_out)  # (the ending node's is a transposed view: the copy out_weight's product needs)
    grads = dict(
        out_bias=grad_out.sum((0, 1, 2), dtype=torch.float32).to(pair_repr.dtype) if needs["out_bias"] else None,
        out_weight=matmul(as_rows(grad_out, order).t(), as_rows(gated, order), ctx.precision)
        if needs["out_weight"] else None)
    inner = ("pair_repr", "layer_norm_weight", "layer_norm_bias", "proj_weight", "proj_bias")
    if not any(needs[name] for name in (*inner, "bias")):  # the output projection's alone
        return grads
    backward = core_backward_op if traced(grad_out) else core_backward
    d_proj, dz = backward(proj, z, mask, grad_out, wo, gated, lse, h, "add", ctx.precision)
    if bias is None:
        _bias_of(d_proj, H, h, ctx.transpose_bias).copy_(dz)  # the bias channels' gradient
    else:
        grads["bias"] = dz.to(bias.dtype)
    d_proj[..., 4 * H + (h if bias is None else 0):].zero_()  # (the alignment's rows; zero_ as DTensor's shards take)
    return grads | dict(zip(inner, layer_norm_linear_backward(pair_repr, lnw, lnb, w_proj, d_proj,
                                                              [needs[n] for n in inner], ctx.precision)))


def triangle_bias_forward(pair_repr: Tensor, layer_norm_weight: Tensor, layer_norm_bias: Tensor, linear_weight: Tensor,
                          transpose_bias: int, precision: str, train: bool) -> Tensor:
    """The triangle bias z (B, h, J, K) of the pair (B, I, J, c) apart from the attention (LayerNorm and the (h, c)
    projection of every pair; transposed with transpose_bias): for a pair split over devices by rows, whose
    attention then gathers z, never the pair (`evofuse.sharding`), and for inference in chunks. `train` (whether a
    gradient is recorded) changes nothing here: it is the ops' last argument (`_runtime.eager_or_dispatched`).
    transpose_bias is a 0/1 int: the placements follow it (`_runtime.custom_op`)."""
    heads = layer_norm_linear(pair_repr, layer_norm_weight, layer_norm_bias, linear_weight, None, None, precision)
    return _bias_of(heads, 0, linear_weight.shape[0], transpose_bias).contiguous()


def _bias_fake(pair_repr, layer_norm_weight, layer_norm_bias, linear_weight, transpose_bias, precision, train):
    B, _, J, _ = pair_repr.shape
    return pair_repr.new_empty(B, linear_weight.shape[0], J, J)


def _bias_setup_context(ctx, inputs, output):
    pair_repr, lnw, lnb, linear_weight, transpose_bias, precision, _ = inputs
    keep_for_backward(ctx, [pair_repr, lnw, lnb, linear_weight], [], transpose_bias=transpose_bias,
                      precision=precision)


def _bias_backward(ctx, needs, dz):
    pair_repr, lnw, lnb, linear_weight = ctx.saved_tensors
    d_heads = dz.transpose(-1, -2) if ctx.transpose_bias else dz  # (B, h, I, J)
    names = ("pair_repr", "layer_norm_weight", "layer_norm_bias", "linear_weight")
    grads = layer_norm_linear_backward(pair_repr, lnw, lnb, linear_weight, contiguous(d_heads.permute(0, 2, 3, 1)),
                                       [needs[n] for n in names] + [False], ctx.precision)
    return dict(zip(names, grads))


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
triangle_attention_op, triangle_attention = operation("triangle_attention", triangle_attention_forward, _fake,
                                                      _setup_context, _backward)
triangle_bias_op, triangle_bias = operation("triangle_bias", triangle_bias_forward, _bias_fake, _bias_setup_context,
                                            _bias_backward)

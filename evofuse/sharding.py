"""evofuse's ops on PyTorch's distributed tensors (`torch.distributed.tensor`). Importing this module registers, for
each op that has them, its sharding rules (`register_sharding`): the placements of its inputs under which it runs on
each shard as it is, and its outputs' placements then; DTensor moves the inputs there and runs the op's kernels on
the local shards. evofuse adds no communication of its own. `import evofuse.sharding` before calling a module on
DTensors (it imports `torch.distributed.tensor`, which `import evofuse` does not).

Rules so far (every one also takes all inputs replicated):
- the Outer Product Mean: the MSA and its mask sharded by batch elements (Shard(0)), parameters replicated; the
  output and the kept projections Shard(0); in the backward the projections' gradient Shard(0), out_proj's Partial();
  or by MSA rows (Shard(1)) where the counts over every row are given (the functional form reduces them from the
  mask, and adds the bias outside the op): the output a partial sum over the rows (Partial()), the projections
  Shard(1), in the backward out_proj's gradient Partial();
- the Outer Product Mean by residues (the MSA split along N, Shard(2)): its passes as two ops
  (`ops.outer_product_mean.sharded`), the projections made on each device's residues and b gathered for the
  contraction, whose output is split by its rows (Shard(1)); in the backward b's gradient a partial sum;
- the LayerNorm (+ linear) backward that the operations' backwards share (`evofuse::layer_norm_backward`): rows
  sharded (Shard(0)), the rows' outputs Shard(0), the parameters' gradients Partial();
- pair-weighted averaging: the MSA, the pair and its mask sharded by batch elements, parameters replicated (the
  kept values, sums and weights, head major, Shard(1)); or the MSA by its rows with the pair and its mask shared
  (replicated), every device making the same weights, whose gradient is then a partial sum over the rows; the pair's
  head projection's backward (`evofuse::pair_heads_backward`) by batch elements, or its gradient partial, its
  parameters' gradients Partial();
- row attention with pair bias: by batch elements, or by MSA rows with the pair shared (replicated), its bias's
  gradient then a partial sum over the rows; the attention core's backward likewise;
- the transition: x and its mask sharded along any leading dimension, parameters replicated; in the backward its
  rows Shard(0) (the products of out_proj's and the projections' weight gradients then partial sums);
- the float32 products (`evofuse::matmul`): rows of a, columns of b, batch elements, or the contraction (Partial());
- triangle multiplication: the pair and its mask sharded by batch elements (Shard(0)), the parameters replicated; its
  product t (c, B, N, N) kept for the backward Shard(1); in the backward the pair's gradient Shard(0) and each
  parameter's a partial sum over the shards (Partial()), which DTensor reduces where it is read;
- triangle multiplication by the pair's rows (outgoing) or columns (incoming): its two passes as two ops
  (`ops.triangle_multiplication.sharded`): a and b made on each device's pairs, split as the pair is, then the
  product and the output side with b (outgoing) or a (incoming) gathered, never the pair; in the backward the
  gathered one's gradient and the parameters' partial sums;
- triangle attention: by batch elements; and by the pair's rows (the starting node; the ending node by its
  columns, the transposed view's rows): a distributed pair takes the bias apart (`evofuse::triangle_bias`, sharded
  as the pair is), and the attention of the local rows gathers the bias (B, h, N, N), never the pair; the bias's
  gradient then a partial sum over the rows;
- column attention and global column attention: by batch elements or by residues (the MSA as its transposed view
  (B, N, S, D): each residue's column on one device), nothing moved; attention with pair bias: by batch elements,
  or by tokens (`ops.attention_pair_bias.sharded`): each device's queries and pair rows, every key gathered.

A backward's products over every row (weight gradients, the LayerNorms') take a tensor sharded along a later leading
dimension with that dimension first (`_runtime.rows_first`), so each device's rows stay one block: by MSA rows,
residues or the transition's leading dimensions nothing is gathered.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

_ops = torch.ops.evofuse  # (registered by `import evofuse`, this package's parent)


def _replicated(tensors) -> list:
    """Replicate() for each tensor argument, None for an absent one (an optional tensor given None)."""
    return [None if t is None else Replicate() for t in tensors]


@register_sharding(_ops.triangle_multiplication.default)
def _triangle_multiplication(pair_repr, pair_mask, *rest):
    params, options = rest[:8], [None] * 4  # (outgoing, precision, chunk_rows, train)
    train = rest[-1]
    mask = None if pair_mask is None else Shard(0)
    return [([Replicate(), Replicate()], [Replicate(), None if pair_mask is None else Replicate(),
                                          *_replicated(params), *options]),
            ([Shard(0), Shard(1) if train else Replicate()], [Shard(0), mask, *_replicated(params), *options])]


@register_sharding(_ops.triangle_multiplication_core_backward.default)
def _triangle_multiplication_backward(grad_out, pair_repr, pair_mask, *rest):
    params, options, needs = rest[:8], [None] * 3, rest[-1]  # (rest[8]: t; then outgoing, precision, needs)
    mask = None if pair_mask is None else Shard(0)
    replicated = ([Replicate()] * 9, [Replicate(), Replicate(), None if pair_mask is None else Replicate(),
                                      *_replicated(params), Replicate(), *options])
    batch = ([Shard(0) if needs[0] else Replicate(), *(Partial() if need else Replicate() for need in needs[1:])],
             [Shard(0), Shard(0), mask, *_replicated(params), Shard(1), *options])
    return [replicated, batch]


@register_sharding(_ops.triangle_multiplication_gates.default)
def _triangle_multiplication_gates(pair_repr, pair_mask, *rest):
    params, options = _replicated(rest[:4]), [None] * 2  # (precision, train)
    mask = [None] if pair_mask is None else [Replicate()]
    strategies = [([Replicate()], [Replicate(), *mask, *params, *options])]
    for dim in range(3):  # (batch elements, rows or columns: a and b planes (2c, B, N, N) split as the pair is)
        strategies.append(([Shard(dim + 1)], [Shard(dim), None if pair_mask is None else Shard(dim), *params,
                                               *options]))
    return strategies


@register_sharding(_ops.triangle_multiplication_gates_backward.default)
def _triangle_multiplication_gates_backward(dab, pair_repr, pair_mask, *rest):
    params, options = _replicated(rest[:4]), [None]  # (precision)
    strategies = [([Replicate()] * 5, [Replicate(), Replicate(), None if pair_mask is None else Replicate(), *params,
                                       *options])]
    for dim in range(3):  # (the parameters' gradients partial sums over the devices' pairs)
        strategies.append(([Shard(dim), *[Partial()] * 4],
                           [Shard(dim + 1), Shard(dim), None if pair_mask is None else Shard(dim), *params, *options]))
    return strategies


def _update_placements(outgoing: bool) -> list:
    """(a's, b's, the pair's and t's placements) under which the update runs on each device's pairs: by batch
    elements; outgoing by the pair's rows, b whole (t[i, j] = sum_k a[i, k] b[j, k]); incoming by its columns, a
    whole (sum_k a[k, i] b[k, j])."""
    batch = (Shard(1), Shard(1), Shard(0), Shard(1))
    by_residues = (Shard(2), Replicate(), Shard(1), Shard(2)) if outgoing else (Replicate(), Shard(3), Shard(2),
                                                                                Shard(3))
    return [batch, by_residues]


@register_sharding(_ops.triangle_multiplication_update.default)
def _triangle_multiplication_update(a, b, pair_repr, *rest):
    params, (outgoing, _, train) = _replicated(rest[:8]), rest[8:]
    options = [None] * 3
    strategies = [([Replicate(), Replicate()], [Replicate()] * 3 + [*params, *options])]
    for pa, pb, pz, pt in _update_placements(outgoing):
        strategies.append(([pz, pt if train else Replicate()], [pa, pb, pz, *params, *options]))
    return strategies


@register_sharding(_ops.triangle_multiplication_update_backward.default)
def _triangle_multiplication_update_backward(grad_out, a, b, pair_repr, *rest):
    params, (outgoing, _, needs) = _replicated(rest[:8]), rest[9:]  # (rest[8]: t)
    options = [None] * 3
    strategies = [([Replicate()] * 11, [Replicate()] * 4 + [*params, Replicate(), *options])]
    for pa, pb, pz, pt in _update_placements(outgoing):
        # (the whole one's gradient, like the parameters', a partial sum over the devices' pairs)
        grads = [Partial() if p == Replicate() else p for p in (pa, pb, pz)] + [Partial()] * 8
        strategies.append(([g if need else Replicate() for g, need in zip(grads, needs)],
                           [pz, pa, pb, pz, *params, pt, *options]))
    return strategies


@register_sharding(_ops.outer_product_mean.default)
def _outer_product_mean(msa_repr, msa_mask, *rest):
    # (ab is (0,) unless train: Shard(0) or Shard(1) either way)
    params, counts, options = rest[:8], rest[8], [None] * 4  # (normalization, count_eps, precision, train)
    strategies = [([Replicate(), Replicate()], [Replicate(), None if msa_mask is None else Replicate(),
                                                *_replicated(params), None if counts is None else Replicate(),
                                                *options]),
                  ([Shard(0), Shard(0)], [Shard(0), None if msa_mask is None else Shard(0), *_replicated(params),
                                          None if counts is None else Shard(0), *options])]
    if counts is not None:  # by MSA rows, the counts over every row given: the output a partial sum over the rows
        strategies.append(([Partial(), Shard(1)], [Shard(1), None if msa_mask is None else Shard(1),
                                                   *_replicated(params), Replicate(), *options]))
    return strategies


@register_sharding(_ops.outer_product_mean_core_backward.default)
def _outer_product_mean_backward(ab, grad_out, counts, weight, *options):
    need_ab, need_weight = options[2], options[3]  # (normalization, count_eps, need_ab, need_weight, precision)
    rest = [None] * len(options)
    strategies = [([Replicate()] * 3, [Replicate(), Replicate(), None if counts is None else Replicate(), Replicate(),
                                       *rest]),
                  ([Shard(0) if need_ab else Replicate(), Partial() if need_weight else Replicate(), Partial()],
                   [Shard(0), Shard(0), None if counts is None else Shard(0), Replicate(), *rest])]
    if counts is not None:  # by MSA rows: the output's gradient and the counts whole, out_proj's weight's partial
        strategies.append(([Shard(1) if need_ab else Replicate(), Partial() if need_weight else Replicate(),
                            Replicate()], [Shard(1), Replicate(), Replicate(), Replicate(), *rest]))
    return strategies


@register_sharding(_ops.outer_product_mean_projections.default)
def _outer_product_mean_projections(msa_repr, msa_mask, *rest):
    params, options = _replicated(rest[:4]), [None] * 2  # (precision, train)
    strategies = [([Replicate()], [Replicate(), None if msa_mask is None else Replicate(), *params, *options])]
    for dim in range(3):  # (batch elements, MSA rows or residues: every row's projections its own)
        strategies.append(([Shard(dim)], [Shard(dim), None if msa_mask is None else Shard(dim), *params, *options]))
    return strategies


# (a's, b's, the counts' and the output's placements) under which the contraction runs on each device's part: by
# batch elements, or by residues with b whole (the output's rows i those of the device's a)
_CONTRACTION = ((Shard(0), Shard(0), Shard(0), Shard(0)), (Shard(2), Replicate(), Shard(1), Shard(1)))


@register_sharding(_ops.outer_product_mean_contraction.default)
def _outer_product_mean_contraction(a, b, counts, weight, bias, *options):
    options = [None] * len(options)
    strategies = [([Replicate()], [Replicate(), Replicate(), None if counts is None else Replicate(), Replicate(),
                                   Replicate(), *options])]
    for pa, pb, pc, po in _CONTRACTION:
        strategies.append(([po], [pa, pb, None if counts is None else pc, Replicate(), Replicate(), *options]))
    return strategies


@register_sharding(_ops.outer_product_mean_contraction_backward.default)
def _outer_product_mean_contraction_backward(a, b, grad_out, counts, weight, *options):
    need_ab, need_weight = options[2], options[3]  # (normalization, count_eps, need_ab, need_weight, precision)
    options = [None] * len(options)
    strategies = [([Replicate()] * 4, [Replicate(), Replicate(), Replicate(), None if counts is None else Replicate(),
                                       Replicate(), *options])]
    for pa, pb, pc, po in _CONTRACTION:  # (b's gradient a partial sum where b was whole; the parameters' alike)
        grads = [pa if need_ab else Replicate(), (Partial() if pb == Replicate() else pb) if need_ab else Replicate(),
                 Partial() if need_weight else Replicate(), Partial()]
        strategies.append((grads, [pa, pb, po, None if counts is None else pc, Replicate(), *options]))
    return strategies


@register_sharding(_ops.layer_norm_backward.default)
def _layer_norm_backward(x, ln_weight, ln_bias, grad, weight, row_mask, store_xn, store_dx, precision):
    options = [None] * 3
    rows = [Shard(0), Replicate(), Replicate(), None if grad is None else Shard(0),
            None if weight is None else Replicate(), None if row_mask is None else Shard(0), *options]
    return [([Replicate()] * 5, [Replicate(), Replicate(), Replicate(), None if grad is None else Replicate(),
                                 None if weight is None else Replicate(), None if row_mask is None else Replicate(),
                                 *options]),
            ([Shard(0), Shard(0), Partial(), Partial(), Partial()], rows)]


@register_sharding(_ops.transition.default)
def _transition(x, mask, *rest):
    params, options = rest[:6], [None] * 3  # (glu, precision, train)
    mask_at = [None if mask is None else Replicate()]
    strategies = [([Replicate()], [Replicate(), *mask_at, *_replicated(params), *options])]
    for dim in range(len(x.shape) - 1):  # (any leading dimension: the rows are independent)
        strategies.append(([Shard(dim)], [Shard(dim), None if mask is None else Shard(dim), *_replicated(params),
                                          *options]))
    return strategies


@register_sharding(_ops.transition_core_backward.default)
def _transition_backward(x, ln_weight, ln_bias, in_weight, in_bias, grad, mask, out_weight, glu, precision):
    params = _replicated((ln_weight, ln_bias, in_weight, in_bias))
    return [([Replicate()] * 2, [Replicate(), *params, Replicate(), None if mask is None else Replicate(),
                                 Replicate(), None, None]),
            ([Shard(0)] * 2, [Shard(0), *params, Shard(0), None if mask is None else Shard(0), Replicate(), None,
                              None])]


@register_sharding(_ops.matmul.default)
def _matmul(a, b, alpha):
    """a @ b for a (..., M, K) and b (..., K, N) or (K, N): rows of a (b shared), columns of b, the contraction
    (a partial sum), and batch elements where both have them."""
    ra, rb = len(a.shape), len(b.shape)
    out = max(ra, rb)
    strategies = [([Replicate()], [Replicate(), Replicate(), None]),
                  ([Shard(out - 2)], [Shard(ra - 2), Replicate(), None]),
                  ([Shard(out - 1)], [Replicate(), Shard(rb - 1), None]),
                  ([Partial()], [Shard(ra - 1), Shard(rb - 2), None])]
    if ra == rb and ra > 2:
        strategies.append(([Shard(0)], [Shard(0), Shard(0), None]))
    return strategies


@register_sharding(_ops.pair_weighted_averaging.default)
def _pair_weighted_averaging(msa_repr, pair_repr, pair_mask, *rest):
    # (v and u (h, B, N, S, C), w (h, B, N, N); u and w (0, 0) unless train)
    params, options, train = rest[:7], [None] * 4, rest[-1]  # (inf, mask_mode, precision, train)
    mask = [None if pair_mask is None else Replicate()]
    # (by MSA rows the pair is shared: every device makes the same weights w)
    return [([Replicate()] * 4, [Replicate(), Replicate(), *mask, *_replicated(params), *options]),
            ([Shard(0), Shard(1), Shard(1), Shard(1)], [Shard(0), Shard(0), None if pair_mask is None else Shard(0),
                                                *_replicated(params), *options]),
            ([Shard(1), Shard(3), Shard(3) if train else Replicate(), Replicate()],
             [Shard(1), Replicate(), *mask, *_replicated(params), *options])]


@register_sharding(_ops.pair_weighted_averaging_core_backward.default)
def _pair_weighted_averaging_backward(v, w, grad_out, msa_repr, *rest):
    params = rest[:4]  # (then u and precision)
    # (by MSA rows the weights' gradient is a partial sum over the rows, as proj_o's)
    return [([Replicate()] * 3, [Replicate()] * 4 + _replicated(params) + [Replicate(), None]),
            ([Shard(0), Shard(0), Partial()], [Shard(1), Shard(1), Shard(0), Shard(0), *_replicated(params), Shard(1),
                                               None]),
            ([Shard(1), Partial(), Partial()], [Shard(3), Replicate(), Shard(1), Shard(1), *_replicated(params),
                                                Shard(3), None])]


@register_sharding(_ops.pair_heads_backward.default)
def _pair_heads_backward(pair_repr, norm_weight, norm_bias, weight, grad, store_dx):
    params = _replicated((norm_weight, norm_bias, weight))
    # (all replicated; by batch elements; a partial gradient of a shared pair: linear in it, partial sums out)
    return [([Replicate()] * 2, [Replicate(), *params, Replicate(), None]),
            ([Shard(0) if store_dx else Replicate(), Partial()], [Shard(0), *params, Shard(0), None]),
            ([Partial() if store_dx else Replicate(), Partial()], [Replicate(), *params, Partial(), None])]


@register_sharding(_ops.msa_row_attention.default)
def _msa_row_attention(msa_repr, pair_repr, msa_mask, *rest):
    params, options, train = rest[:10], [None] * 4, rest[-1]  # (num_heads, mask_mode, precision, train)

    def placed(msa, pair, lse, z):
        kept = [msa if train else Replicate(), msa if train else Replicate(), lse, z if train else Replicate()]
        return ([msa, *kept], [msa, pair, None if msa_mask is None else msa, *_replicated(params), *options])
    # (all replicated; by batch elements; by MSA rows, the pair and its bias shared)
    return [placed(Replicate(), Replicate(), Replicate(), Replicate()), placed(Shard(0), Shard(0), Shard(1), Shard(0)),
            placed(Shard(1), Replicate(), Shard(2), Replicate())]


@register_sharding(_ops.msa_row_attention_core_backward.default)
def _attention_backward(qkvg, z, msa_mask, grad_out, out_proj_weight, gated, lse, *options):
    bias_grad = options[3] if len(options) > 3 else True  # (num_heads, mask_mode, precision[, bias_grad])
    rest = [None] * len(options)

    def placed(rows, z_at, lse_at, dz):
        return ([rows, dz if bias_grad else Replicate()],
                [rows, z_at, None if msa_mask is None else rows, rows, Replicate(), rows, lse_at, *rest])
    # (by MSA rows the bias is shared: its gradient a partial sum over the rows)
    return [placed(Replicate(), Replicate(), Replicate(), Replicate()), placed(Shard(0), Shard(0), Shard(1), Shard(0)),
            placed(Shard(1), Replicate(), Shard(2), Partial())]


@register_sharding(_ops.triangle_attention.default)
def _triangle_attention(pair_repr, pair_mask, *rest):
    # (the kept proj, gated and z Shard(0), lse (2, B, I, J, h) Shard(1): empty unless train, sharded alike)
    params, bias, options = rest[:6], rest[6], [None] * 5  # (num_heads, transpose_bias, precision, chunk_rows, train)
    mask = [None if pair_mask is None else Replicate()]
    strategies = [([Replicate()] * 5, [Replicate(), *mask, *_replicated(params), *_replicated([bias]), *options]),
                  ([Shard(0), Shard(0), Shard(0), Shard(1), Shard(0)],
                   [Shard(0), None if pair_mask is None else Shard(0), *_replicated(params),
                    None if bias is None else Shard(0), *options])]
    if bias is not None:  # by rows i, every row's keys on its device: the bias (B, h, J, K) whole (gathered)
        strategies.append(([Shard(1), Shard(1), Shard(1), Shard(2), Replicate()],
                           [Shard(1), None if pair_mask is None else Shard(1), *_replicated(params), Replicate(),
                            *options]))
    return strategies


@register_sharding(_ops.triangle_bias.default)
def _triangle_bias(pair_repr, ln_weight, ln_bias, linear_weight, transpose_bias, precision, train):
    """The bias z (B, h, J, K) of a pair (B, I, J, c) by batch elements, or by its rows or columns: z[b, h, j, k]
    from x[b, j, k] (transposed: from x[b, k, j])."""
    params, options = _replicated((ln_weight, ln_bias, linear_weight)), [None] * 3
    row, column = (3, 2) if transpose_bias else (2, 3)
    return [([Replicate()], [Replicate(), *params, *options]), ([Shard(0)], [Shard(0), *params, *options]),
            ([Shard(row)], [Shard(1), *params, *options]), ([Shard(column)], [Shard(2), *params, *options])]


@register_sharding(_ops.msa_column_attention.default)
def _msa_column_attention(x, mask, *rest):
    # (x the MSA's transposed view (B, N, S, D); the kept qkvg and gated (B, N, S, .), or (0,) unless train; lse
    # (2, B, N, S, h))
    params, options, train = rest[:6], [None] * 3, rest[-1]  # (num_heads, precision, train)
    kept = Shard(1) if train else Replicate()
    # (all replicated; by batch elements; by residues, each column on its device)
    return [([Replicate()] * 4, [Replicate(), None if mask is None else Replicate(), *_replicated(params), *options]),
            ([Shard(0), Shard(0), Shard(0), Shard(1)],
             [Shard(0), None if mask is None else Shard(0), *_replicated(params), *options]),
            ([Shard(1), kept, kept, Shard(2)],
             [Shard(1), None if mask is None else Shard(1), *_replicated(params), *options])]


@register_sharding(_ops.msa_column_global_attention.default)
def _msa_column_global_attention(x, mask, *rest):
    # (x the MSA's transposed view (B, N, S, D); the kept proj (B, N, S, .) and queries (B, N, HC), or (0,) unless
    # train: all replicated; by batch elements; by residues, each column on its device)
    params, options, train = rest[:7], [None] * 5, rest[-1]  # (num_heads, inf, eps, precision, train)
    kept = Shard(1) if train else Replicate()
    return [([Replicate()] * 3, [Replicate(), None if mask is None else Replicate(), *_replicated(params), *options]),
            ([Shard(0)] * 3, [Shard(0), None if mask is None else Shard(0), *_replicated(params), *options]),
            ([Shard(1), kept, kept], [Shard(1), None if mask is None else Shard(1), *_replicated(params), *options])]


@register_sharding(_ops.msa_column_global_attention_core_backward.default)
def _msa_column_global_attention_backward(proj, mask, q, du, *options):
    rest = [None] * len(options)  # (num_heads, inf, eps)
    return [([Replicate()] * 3, [Replicate(), None if mask is None else Replicate(), Replicate(), Replicate(), *rest])] + [
        ([Shard(dim)] * 3, [Shard(dim), None if mask is None else Shard(dim), Shard(dim), Shard(dim), *rest])
        for dim in (0, 1)]  # (by batch elements, or by residues)


@register_sharding(_ops.attention_pair_bias.default)
def _attention_pair_bias(single_repr, pair_repr, mask, *rest):
    # (the kept qkvg, gated (B, 1, N, .) and z (B, h, N, N) Shard(0), lse (2, B, 1, N, h) Shard(1))
    params, options = rest[:6], [None] * 3  # (num_heads, precision, train)
    return [([Replicate()] * 5, [Replicate(), Replicate(), None if mask is None else Replicate(),
                                 *_replicated(params), *options]),
            ([Shard(0), Shard(0), Shard(0), Shard(1), Shard(0)],
             [Shard(0), Shard(0), None if mask is None else Shard(0), *_replicated(params), *options])]


@register_sharding(_ops.attention_pair_bias_tokens.default)
def _attention_pair_bias_tokens(qkvg, kv, z, mask, num_heads, precision, train):
    # (by batch elements; or by tokens: the queries' rows, every key and its mask whole, the bias's query rows)
    kept = [Shard(1) if train else Replicate()] * 2
    options = [None] * 3
    return [([Replicate()] * 3, [Replicate()] * 3 + [None if mask is None else Replicate(), *options]),
            ([Shard(0)] * 3, [Shard(0)] * 3 + [None if mask is None else Shard(0), *options]),
            ([Shard(1), *kept], [Shard(1), Replicate(), Shard(2), None if mask is None else Replicate(), *options])]


@register_sharding(_ops.attention_pair_bias_tokens_backward.default)
def _attention_pair_bias_tokens_backward(d_gated, qkvg, kv, z, mask, o, lse, num_heads, precision):
    # (by tokens the keys' gradient a partial sum over the devices' queries)
    m, options = None if mask is None else Replicate(), [None] * 2
    return [([Replicate()] * 3, [Replicate()] * 4 + [m, Replicate(), Replicate(), *options]),
            ([Shard(0)] * 3, [Shard(0)] * 4 + [None if mask is None else Shard(0), Shard(0), Shard(0), *options]),
            ([Shard(1), Partial(), Shard(2)], [Shard(1), Shard(1), Replicate(), Shard(2), m, Shard(1), Shard(1),
                                               *options])]

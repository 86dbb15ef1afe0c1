"""Triangle multiplication on a pair split by residues (`torch.distributed.tensor`): the op's passes as two custom
ops, so that each device makes a and b for its own pairs and DTensor gathers one of them, never the pair.

- `evofuse::triangle_multiplication_gates`: a and b = p * sigmoid(g) * mask as channel planes (2c, B, N, N), from
  LN_in, p_in and g_in of the pairs at hand (`op.gated`), split as the pair is;
- `evofuse::triangle_multiplication_update`: their product t and the output side (LN_out, p_out, the g_out gate,
  `op.gated_output`). Outgoing, t[i, j] = sum_k a[i, k] b[j, k]: a pair split by its rows i needs every row of b,
  which its sharding rule (`evofuse.sharding`) asks replicated; incoming, t[i, j] = sum_k a[k, i] b[k, j]: a pair
  split by its columns j needs every column of a. In the backward the gathered one's gradient is a partial sum
  over the devices.

Each keeps for its backward what the fused op keeps, and the backwards are the fused op's passes: the gates' (p and
g made again, `layer_norm_glu` with grad, and LN_in's and the projections' backward) and the output side's (the
gate's gradients on chip, LN_out's and p_out's backward, g_out's and its LN_in's). The pair's gradient is the sum
of the two ops', which autograd adds. Plain tensors and a pair split by batch elements take the one fused op."""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import custom_op, keep_for_backward, operation, traced
from ...stages import layer_norm_glu
from ...stages.layer_norm_backward import layer_norm_linear_backward
from .op import bmm, gated, gated_output


def by_residues(pair_repr: Tensor) -> bool:
    """Whether pair_repr is a distributed tensor split along a residue dimension of (B, N, N, c_z) (its rows or its
    columns): the calls this composition takes."""
    return any(getattr(p, "dim", None) in (1, 2) for p in getattr(pair_repr, "placements", ()))


def triangle_multiplication(pair_repr: Tensor, pair_mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor,
                            in_weight: Tensor, in_bias: Tensor | None, norm_out_weight: Tensor, norm_out_bias: Tensor,
                            p_out_weight: Tensor, p_out_bias: Tensor | None, outgoing: bool, precision: str,
                            train: bool) -> Tensor:
    """The fused op's output (B, N, N, c_z) from the same arguments (in_weight (4c + c_z, c_z): p_in, g_in and g_out
    stacked), by the two ops."""
    c = norm_out_weight.shape[0]
    ab = gates(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight[:4 * c],
               None if in_bias is None else in_bias[:4 * c], precision, train)
    return update(ab[:c], ab[c:], pair_repr, norm_in_weight, norm_in_bias, in_weight[4 * c:],
                  None if in_bias is None else in_bias[4 * c:], norm_out_weight, norm_out_bias, p_out_weight,
                  p_out_bias, int(outgoing), precision, train)[0]


def _gates(pair_repr: Tensor, pair_mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor,
           in_weight: Tensor, in_bias: Tensor | None, precision: str, train: bool) -> Tensor:
    """ab (2c, B, N, N): a and b as channel planes. pair_repr (B, N, N, c_z), pair_mask (B, N, N) or None,
    in_weight (4c, c_z): p_in's rows then g_in's, in_bias (4c,) or None."""
    return gated(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, in_weight.shape[0] // 4,
                  precision)


def _gates_fake(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, precision, train):
    return pair_repr.new_empty(in_weight.shape[0] // 2, *pair_repr.shape[:-1])


def _gates_setup(ctx, inputs, output):
    pair_repr, pair_mask, *params, precision, _ = inputs
    keep_for_backward(ctx, [pair_repr, pair_mask, *params], [], precision=precision)


# the gates' gradients as a fixed tuple (a sharding rule gives each its own placement)
GATE_GRADS = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]


def gates_backward(dab: Tensor, pair_repr: Tensor, pair_mask: Tensor | None, norm_in_weight: Tensor,
                   norm_in_bias: Tensor, in_weight: Tensor, in_bias: Tensor | None, precision: str) -> GATE_GRADS:
    """The gradients of (pair_repr, norm_in_weight, norm_in_bias, in_weight, in_bias), in_bias's empty where it is
    None, from ab's gradient dab (2c, B, N, N): p and g made again on chip with their gradients written (4c planes),
    then LN_in's and the projections' backward. Every one is made: the op has no int argument for a flag of the
    gradients asked for to key its sharding by (`_runtime.custom_op`), and a split pair's call takes them all."""
    M, cz = pair_repr.shape[:-1].numel(), pair_repr.shape[-1]
    rows = pair_repr.reshape(M, cz)
    d_pre = pair_repr.new_empty(in_weight.shape[0], M)
    layer_norm_glu.layer_norm_glu(rows, norm_in_weight, norm_in_bias, in_weight, in_bias,
                                  None if pair_mask is None else pair_mask.reshape(M), dab.reshape(-1, M).t(),
                                  "sigmoid", precision, d_pre.t(), grad=True)
    dx, *grads = layer_norm_linear_backward(rows, norm_in_weight, norm_in_bias, in_weight, d_pre.t(),
                                            (True, True, True, True, in_bias is not None), precision)
    return dx.view(pair_repr.shape), *(pair_repr.new_empty(0) if g is None else g.clone() for g in grads)


def _gates_backward_fake(dab, pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, precision):
    return (torch.empty_like(pair_repr), torch.empty_like(norm_in_weight), torch.empty_like(norm_in_bias),
            torch.empty_like(in_weight), pair_repr.new_empty(0) if in_bias is None else torch.empty_like(in_bias))


def _gates_grads(ctx, needs, dab):
    pair_repr, mask, *params = ctx.saved_tensors
    names = ("pair_repr", "norm_in_weight", "norm_in_bias", "in_weight", "in_bias")
    backward = gates_backward_op if traced(dab) else gates_backward
    return {n: g for n, g in zip(names, backward(dab, pair_repr, mask, *params, ctx.precision)) if needs[n]}


def _update(a: Tensor, b: Tensor, pair_repr: Tensor, norm_in_weight: Tensor, norm_in_bias: Tensor,
            g_out_weight: Tensor, g_out_bias: Tensor | None, norm_out_weight: Tensor, norm_out_bias: Tensor,
            p_out_weight: Tensor, p_out_bias: Tensor | None, outgoing: int, precision: str,
            train: bool) -> tuple[Tensor, Tensor]:
    """(out (B, N, N, c_z), t (c, B, N, N), empty unless `train`): t = a b^T (outgoing) or a^T b per channel plane, a
    and b (c, B, N, N), then the output side with the pair's rows (B, N, N, c_z); g_out_weight (c_z, c_z), g_out_bias
    (c_z,) or None, LN_out's (c,), p_out_weight (c_z, c), p_out_bias (c_z,) or None. outgoing is 1 or 0, an int:
    DTensor keys an op's sharding by its tensors and its arguments from the first int on, and both the sharding and
    the kept t's shape follow outgoing and train."""
    t = bmm(a, b, None if outgoing else True, precision)
    out = pair_repr.new_empty(pair_repr.shape)
    gated_output(t, pair_repr, norm_in_weight, norm_in_bias, g_out_weight, g_out_bias, norm_out_weight,
                 norm_out_bias, p_out_weight, p_out_bias, precision, out)
    return out, (t if train else t.new_empty(0))


def _update_fake(a, b, pair_repr, norm_in_weight, norm_in_bias, g_out_weight, g_out_bias, norm_out_weight,
                 norm_out_bias, p_out_weight, p_out_bias, outgoing, precision, train):
    return pair_repr.new_empty(pair_repr.shape), a.new_empty((a.shape[0], *pair_repr.shape[:-1]) if train else (0,))


def _update_setup(ctx, inputs, output):
    a, b, pair_repr, *params, outgoing, precision, _ = inputs
    keep_for_backward(ctx, [a, b, pair_repr, *params], [output[1]], outgoing=outgoing, precision=precision)


# the update's gradients: a, b, the pair, then its eight parameters
UPDATE_GRADS = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


def update_backward(grad_out: Tensor, a: Tensor, b: Tensor, pair_repr: Tensor, norm_in_weight: Tensor,
                    norm_in_bias: Tensor, g_out_weight: Tensor, g_out_bias: Tensor | None, norm_out_weight: Tensor,
                    norm_out_bias: Tensor, p_out_weight: Tensor, p_out_bias: Tensor | None, t: Tensor, outgoing: int,
                    precision: str, needs: list[bool]) -> UPDATE_GRADS:
    """The gradients of (a, b, pair_repr, norm_in_weight, norm_in_bias, g_out_weight, g_out_bias, norm_out_weight,
    norm_out_bias, p_out_weight, p_out_bias), each empty where `needs` is false, from the output's gradient grad_out
    (B, N, N, c_z), any strides, and the forward's t: y's and g_out's pre-activations' gradients on chip
    (`gated_output` with grad), LN_out's and p_out's backward into dt (channel planes), then da and db by the planes'
    products, and g_out's and its LN_in's backward."""
    M, cz = pair_repr.shape[:-1].numel(), pair_repr.shape[-1]
    c = t.shape[0]
    dy = pair_repr.new_empty(pair_repr.shape)
    d_gate = pair_repr.new_empty(cz, M)
    gated_output(t, pair_repr, norm_in_weight, norm_in_bias, g_out_weight, g_out_bias, norm_out_weight, norm_out_bias,
                 p_out_weight, p_out_bias, precision, dy, grad_out, d_gate)
    dt = t.new_empty(t.shape)  # (channel planes, as t)
    _, *out_grads = layer_norm_linear_backward(t.permute(*range(1, t.dim()), 0), norm_out_weight, norm_out_bias,
                                               p_out_weight, dy, (True, *needs[7:11]), precision,
                                               dx_out=dt.view(c, M).t())
    del dy
    if outgoing:  # t = a b^T: da = dt b, db = dt^T a
        da = bmm(dt, b, False, precision) if needs[0] else None
        db = bmm(dt, a, True, precision) if needs[1] else None
    else:  # t = a^T b: da = b dt^T, db = a dt
        da = bmm(b, dt, None, precision) if needs[0] else None
        db = bmm(a, dt, False, precision) if needs[1] else None
    del dt
    dz, *gate_grads = layer_norm_linear_backward(pair_repr.reshape(M, cz), norm_in_weight, norm_in_bias, g_out_weight,
                                                 d_gate.t(), (needs[2], *needs[3:7]), precision)
    grads = (da, db, None if dz is None else dz.view(pair_repr.shape), *gate_grads, *out_grads)
    return tuple(pair_repr.new_empty(0) if g is None else g.clone() if 3 <= k else g for k, g in enumerate(grads))


def _update_backward_fake(grad_out, a, b, pair_repr, norm_in_weight, norm_in_bias, g_out_weight, g_out_bias,
                          norm_out_weight, norm_out_bias, p_out_weight, p_out_bias, t, outgoing, precision, needs):
    likes = (a, b, pair_repr, norm_in_weight, norm_in_bias, g_out_weight, g_out_bias, norm_out_weight, norm_out_bias,
             p_out_weight, p_out_bias)
    return tuple(torch.empty_like(like) if need else pair_repr.new_empty(0) for like, need in zip(likes, needs))


def _update_grads(ctx, needs, grad_out, *_):
    a, b, pair_repr, *params, t = ctx.saved_tensors
    names = ("a", "b", "pair_repr", "norm_in_weight", "norm_in_bias", "g_out_weight", "g_out_bias", "norm_out_weight",
             "norm_out_bias", "p_out_weight", "p_out_bias")
    wanted = [needs[n] for n in names]
    backward = update_backward_op if traced(grad_out) else update_backward
    grads = backward(grad_out, a, b, pair_repr, *params, t, ctx.outgoing, ctx.precision, wanted)
    return {n: g for n, g, need in zip(names, grads, wanted) if need}


gates_op, gates = operation("triangle_multiplication_gates", _gates, _gates_fake, _gates_setup, _gates_grads)
gates_backward_op = custom_op("triangle_multiplication_gates_backward", gates_backward, _gates_backward_fake)
update_op, update = operation("triangle_multiplication_update", _update, _update_fake, _update_setup, _update_grads)
update_backward_op = custom_op("triangle_multiplication_update_backward", update_backward, _update_backward_fake)

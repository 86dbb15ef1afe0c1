"""The Outer Product Mean on an MSA split by residues (`torch.distributed.tensor`): its passes as two custom ops, so
that each device projects its own residues and DTensor gathers b, never the MSA.

- `evofuse::outer_product_mean_projections`: LayerNorm, both projections and the mask, [a | b] (B, S, N, 2c), of the
  residues at hand (`stages.layer_norm_linear`), split as the MSA is;
- `evofuse::outer_product_mean_contraction`: out[b, i, j] for the rows i of a (B, S, N_i, c) against every residue
  j of b (B, S, N, c), which its sharding rule asks whole: the outer products, out_proj, the normalization and the
  bias (`op.project_blocks`), the output split by its rows; in the backward (`op.contraction_backward`) b's
  gradient is a partial sum over the devices.

Every dtype takes the fused op's 16-bit route (the outer products a block of rows at a time, then
`opm_project_kernel`), float32 with three TF32 products in both. Plain tensors, and MSAs split by batch elements or
rows, take the fused op."""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import custom_op, keep_for_backward, operation, traced
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.layer_norm_linear import joined_bias, layer_norm_linear
from .op import contraction_backward, counts_of, project_blocks


def by_residues(msa_repr: Tensor) -> bool:
    """Whether msa_repr (B, S, N, D) is a distributed tensor split along its residues: the calls this composition
    takes."""
    return any(getattr(p, "dim", None) == 2 for p in getattr(msa_repr, "placements", ()))


def outer_product_mean(msa_repr: Tensor, msa_mask: Tensor | None, layer_norm_weight: Tensor, layer_norm_bias: Tensor,
                       proj_a_weight: Tensor, proj_a_bias: Tensor | None, proj_b_weight: Tensor,
                       proj_b_bias: Tensor | None, out_proj_weight: Tensor, out_proj_bias: Tensor, normalization: str,
                       count_eps: float, precision: str, train: bool) -> Tensor:
    """The fused op's output (B, N, N, R) from the same arguments, by the two ops."""
    c = proj_a_weight.shape[0]
    weights = [proj_a_weight, proj_b_weight]
    ab = projections(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, torch.cat(weights),
                     joined_bias([proj_a_bias, proj_b_bias], weights), precision, train)
    return contraction(ab[..., :c], ab[..., c:], counts_of(msa_mask, normalization), out_proj_weight, out_proj_bias,
                       normalization, count_eps, precision, train)


def _projections(msa_repr: Tensor, msa_mask: Tensor | None, layer_norm_weight: Tensor, layer_norm_bias: Tensor,
                 weight: Tensor, bias: Tensor | None, precision: str, train: bool) -> Tensor:
    """[a | b] (B, S, N, 2c) = (LayerNorm(msa_repr) @ weight^T + bias) * mask; weight (2c, D): a's rows then b's."""
    return layer_norm_linear(msa_repr, layer_norm_weight, layer_norm_bias, weight, bias, msa_mask, precision)


def _projections_fake(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, weight, bias, precision, train):
    return msa_repr.new_empty(*msa_repr.shape[:-1], weight.shape[0])


def _projections_setup(ctx, inputs, output):
    msa_repr, msa_mask, *params, precision, _ = inputs
    keep_for_backward(ctx, [msa_repr, msa_mask, *params], [], precision=precision)


def _projections_grads(ctx, needs, grad):
    msa_repr, mask, lnw, lnb, weight, _ = ctx.saved_tensors
    names = ("msa_repr", "layer_norm_weight", "layer_norm_bias", "weight", "bias")
    grads = layer_norm_linear_backward(msa_repr, lnw, lnb, weight, grad, tuple(needs[n] for n in names),
                                       ctx.precision, mask)
    return {n: g for n, g in zip(names, grads) if needs[n]}


def _contraction(a: Tensor, b: Tensor, counts: Tensor | None, out_proj_weight: Tensor, out_proj_bias: Tensor,
                 normalization: str, count_eps: float, precision: str, train: bool) -> Tensor:
    """out (B, N_i, N, R) for a (B, S, N_i, c), b (B, S, N, c), counts (B, N_i, N) float32 or None (every count S),
    out_proj_weight (R, c*c), out_proj_bias (R,)."""
    B, S, N_i, c = a.shape
    N = b.shape[2]
    out = a.new_empty(B, N_i, N, out_proj_weight.shape[0])
    if out.numel():
        project_blocks(a.contiguous(), b.contiguous().view(B, S, N * c), counts, out_proj_weight, out_proj_bias, out,
                       count_eps if normalization == "count_ij_after" else 0.0, precision)
    return out


def _contraction_fake(a, b, counts, out_proj_weight, out_proj_bias, normalization, count_eps, precision, train):
    return a.new_empty(a.shape[0], a.shape[2], b.shape[2], out_proj_weight.shape[0])


def _contraction_setup(ctx, inputs, output):
    a, b, counts, weight, _, normalization, count_eps, precision, _ = inputs
    keep_for_backward(ctx, [a, b, counts, weight], [], normalization=normalization, count_eps=count_eps,
                      precision=precision)


CONTRACTION_GRADS = tuple[Tensor, Tensor, Tensor, Tensor]


def contraction_grads(a: Tensor, b: Tensor, grad_out: Tensor, counts: Tensor | None, weight: Tensor,
                      normalization: str, count_eps: float, need_ab: int, need_weight: bool,
                      precision: str) -> CONTRACTION_GRADS:
    """(da, db, d_weight, d_bias): a's and b's gradients in their dtype (empty unless need_ab, a 0/1 int:
    `_runtime.custom_op`), out_proj's weight's (empty unless need_weight) and bias's in float32, for the output's
    gradient grad_out (B, N_i, N, R)."""
    B, S, N, c = b.shape
    da, db, d_weight, d_bias = contraction_backward(a.contiguous(), b.contiguous().view(B, S, N * c), grad_out, counts,
                                                    weight, normalization, count_eps, bool(need_ab), need_weight,
                                                    precision)
    if da is None:
        return a.new_empty(0), b.new_empty(0), d_weight, d_bias
    return da, db.view(b.shape).to(b.dtype), d_weight, d_bias


def _contraction_grads_fake(a, b, grad_out, counts, weight, normalization, count_eps, need_ab, need_weight,
                            precision):
    R, cc = weight.shape
    return (torch.empty_like(a) if need_ab else a.new_empty(0), torch.empty_like(b) if need_ab else b.new_empty(0),
            a.new_empty((R, cc if need_weight else 0), dtype=torch.float32), a.new_empty((R,), dtype=torch.float32))


def _contraction_backward(ctx, needs, grad_out):
    a, b, counts, weight = ctx.saved_tensors
    need_ab = int(needs["a"] or needs["b"])
    backward = contraction_grads_op if traced(grad_out) else contraction_grads
    da, db, d_weight, d_bias = backward(a, b, grad_out, counts, weight, ctx.normalization, ctx.count_eps, need_ab,
                                        needs["out_proj_weight"], ctx.precision)
    grads = dict(a=da, b=db, out_proj_weight=d_weight.to(weight.dtype), out_proj_bias=d_bias.to(weight.dtype))
    return {n: g for n, g in grads.items() if needs[n]}


projections_op, projections = operation("outer_product_mean_projections", _projections, _projections_fake,
                                        _projections_setup, _projections_grads)
contraction_op, contraction = operation("outer_product_mean_contraction", _contraction, _contraction_fake,
                                        _contraction_setup, _contraction_backward)
contraction_grads_op = custom_op("outer_product_mean_contraction_backward", contraction_grads, _contraction_grads_fake)

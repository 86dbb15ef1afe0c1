"""MSA global column attention (AF2 Algorithm 19) as a torch.library custom op, `evofuse::msa_column_global_attention`,
with its fake and its backward. Each residue's column holds S rows but only one query a head, so the work is linear in
S N and bound by the passes over the rows: one `layer_norm_linear` makes every row's gate, query, key and value (the
queries before the masked mean, which a linear layer commutes with); one program a column (`kernels.columns_kernel`)
makes the masked mean, the h x S logits, their softmax and the attention result in float32; the gated rows go through
one output product. Eager PyTorch makes LayerNorm(x), the masked rows, k, v, the gate and the gated rows in passes of
their own. The backward's kernel (`kernels.columns_backward_kernel`) makes the softmax again from the kept queries (a
kept log-sum-exp would lose the weights of a column whose rows are all masked: its logits are -1e9) and writes the
rows' query, key and value gradients.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import as_rows, custom_op, keep_for_backward, next_pow2, operation, permuted, rows_first, traced
from ...reference import MASK_LOGIT, TRIANGLE_MIN_INF
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.layer_norm_linear import layer_norm_linear
from ...stages.matmul import linear, matmul
from .kernels import columns_backward_kernel, columns_kernel

COLUMN_TILE = 8192  # elements of a (rows, heads, head width) tile of the columns' kernel


def _column_args(proj: Tensor, mask: Tensor | None, num_heads: int, d: int, inf: float) -> tuple[tuple, dict]:
    """The mask's arguments and the constexprs of the columns' kernels."""
    block_h, block_d = next_pow2(num_heads), next_pow2(d)
    masks = (proj, 0, 0, 0) if mask is None else (mask, *mask.stride())
    return masks, dict(HEADS=num_heads, BLOCK_H=block_h, BLOCK_D=block_d,
                       BLOCK_L=max(8, min(128, COLUMN_TILE // (block_h * block_d))), FILL=inf >= TRIANGLE_MIN_INF,
                       MASK_LOGIT=MASK_LOGIT, HAS_MASK=mask is not None)


def _attention(proj: Tensor, mask: Tensor | None, query_bias: Tensor | None, HC: int, num_heads: int, inf: float,
               eps: float) -> tuple[Tensor, Tensor]:
    """(q, o) (B, R, HC) float32: each column's scaled query and attention result, by `kernels.columns_kernel` from the
    rows' projection (B, R, L, 2HC + 2d)."""
    B, R, L, _ = proj.shape
    d = HC // num_heads
    q = torch.empty(B, R, HC, dtype=torch.float32, device=proj.device)
    o = torch.empty_like(q)
    if B * R:
        masks, consts = _column_args(proj, mask, num_heads, d, inf)
        columns_kernel[(B * R,)](proj, *proj.stride()[:3], *masks, proj if query_bias is None else query_bias, q, o, R, L,
                                 HC, d, d ** -0.5, eps, inf, HAS_QUERY_BIAS=query_bias is not None, **consts)
    return q, o


def core_backward(proj: Tensor, mask: Tensor | None, q: Tensor, du: Tensor, num_heads: int, inf: float,
                  eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(d_proj (B, R, L, 2HC + 2d), gated (B, R, L, HC), both in proj's dtype, dq (B, R, HC) float32): the projection's
    gradient, the gated rows sigmoid(g) o again (the output projection's input) and the queries' gradient before
    their scale (their bias's, summed over the columns), from the rows' projection proj (B, R, L, 2HC + 2d), their
    mask, the kept scaled queries q (B, R, HC) and the gated rows' gradient du (B, R, L, HC): the results' gradient
    d_o = sum_l du sigmoid(g), then `kernels.columns_backward_kernel` (the rows' query, key and value gradients and o),
    then the gate's."""
    B, R, L, _ = proj.shape
    HC = q.shape[2]
    d = HC // num_heads
    sg = torch.sigmoid(proj[..., :HC])  # (B, R, L, HC)
    d_o = (du * sg).sum(2, dtype=torch.float32)  # (B, R, HC)
    d_proj = torch.empty_like(proj)
    o, dq = torch.empty_like(q), torch.empty_like(q)
    if B * R:
        masks, consts = _column_args(proj, mask, num_heads, d, inf)
        columns_backward_kernel[(B * R,)](proj, *proj.stride()[:3], *masks, q, d_o, o, dq, d_proj, *d_proj.stride()[:3],
                                          R, L, HC, d, d ** -0.5, eps, inf, **consts)
    o = o.view(B, R, 1, HC).to(proj.dtype)
    torch.mul(du * o, sg * (1 - sg), out=d_proj[..., :HC])
    return d_proj, sg * o, dq


def _core_backward_fake(proj, mask, q, du, num_heads, inf, eps):
    return torch.empty_like(proj), torch.empty_like(du), torch.empty_like(q)


core_backward_op = custom_op("msa_column_global_attention_core_backward", core_backward, _core_backward_fake)


def msa_column_global_attention_forward(x: Tensor, mask: Tensor | None, layer_norm_weight: Tensor,
                                        layer_norm_bias: Tensor, proj_weight: Tensor, proj_bias: Tensor | None,
                                        query_bias: Tensor | None, out_weight: Tensor, out_bias: Tensor | None,
                                        num_heads: int, inf: float, eps: float, precision: str,
                                        train: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(out (B, R, L, D), proj (B, R, L, 2HC + 2d), q (B, R, HC) float32): the output, then what the backward takes
    (each empty unless `train`). x (B, R, L, D) any strides (the MSA's transposed view: R residues'
    columns of L rows); mask (B, R, L) 0/1 of any real dtype or None; proj_weight (2HC + 2d, D): the gate's and the
    queries' HC rows, then the key's and the value's d; proj_bias of its width or None (the queries' part zero: their
    bias, query_bias (HC,) or None, is added after the mean); out_weight (D, HC), out_bias (D,) or None. q is the
    scaled query."""
    B, R, L, _ = x.shape
    HC = out_weight.shape[1]
    proj = layer_norm_linear(x, layer_norm_weight, layer_norm_bias, proj_weight, proj_bias, None, precision)
    q, o = _attention(proj, mask, query_bias, HC, num_heads, inf, eps)
    gated = torch.sigmoid(proj[..., :HC]) * o.view(B, R, 1, HC).to(x.dtype)  # (B, R, L, HC)
    out = linear(gated, out_weight, out_bias, precision)
    if not train:
        return out, x.new_empty(0), q.new_empty(0)
    return out, proj, q


def _fake(x, mask, layer_norm_weight, layer_norm_bias, proj_weight, proj_bias, query_bias, out_weight, out_bias,
          num_heads, inf, eps, precision, train):
    B, R, L, D = x.shape
    out = x.new_empty(B, R, L, D)
    if not train:
        return out, x.new_empty(0), x.new_empty(0, dtype=torch.float32)
    return out, x.new_empty(B, R, L, proj_weight.shape[0]), x.new_empty(B, R, out_weight.shape[1], dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    x, mask, *params, num_heads, inf, eps, precision, _ = inputs
    keep_for_backward(ctx, [x, mask, *params], list(output[1:]), num_heads=num_heads, inf=inf, eps=eps,
                      precision=precision)


def _backward(ctx, needs, grad_out, *_):
    x, mask, lnw, lnb, w_proj, _, b_q, wo, _, proj, q = ctx.saved_tensors
    HC = wo.shape[1]
    dtype, precision = x.dtype, ctx.precision
    order = rows_first(grad_out)  # (by residues: each device's rows one block, nothing gathered)
    rows = as_rows(grad_out, order)  # (the MSA's transposed view's: the copy the products need)
    du = permuted(matmul(rows, wo, precision).view(*permuted(x, order).shape[:3], HC), order, back=True)  # gated's
    backward = core_backward_op if traced(grad_out) else core_backward
    d_proj, gated, dq = backward(proj, mask, q, du, ctx.num_heads, ctx.inf, ctx.eps)
    grads = dict(out_bias=grad_out.sum((0, 1, 2), dtype=torch.float32).to(dtype) if needs["out_bias"] else None,
                 out_weight=matmul(rows.t(), as_rows(gated, order), precision) if needs["out_weight"] else None,
                 query_bias=dq.sum((0, 1)).to(dtype) if needs["query_bias"] and b_q is not None else None)
    inner = ("x", "layer_norm_weight", "layer_norm_bias", "proj_weight", "proj_bias")
    if not any(needs[name] for name in inner):  # the output projection's and the query bias's alone
        return grads
    return grads | dict(zip(inner, layer_norm_linear_backward(x, lnw, lnb, w_proj, d_proj, [needs[n] for n in inner],
                                                              precision)))


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
msa_column_global_attention_op, msa_column_global_attention = operation(
    "msa_column_global_attention", msa_column_global_attention_forward, _fake, _setup_context, _backward)

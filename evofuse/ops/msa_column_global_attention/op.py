"""MSA global column attention (AF2 Algorithm 19) as a torch.library custom op, `evofuse::msa_column_global_attention`,
with its fake and its backward. Each residue's column holds S rows but only one query a head, so the work is linear in
S N and bound by the passes over the rows: one `layer_norm_linear` makes every row's gate, query, key and value (the
queries before the masked mean, which a linear layer commutes with), and the rest runs on tensors of a column's
width: the masked mean, the h x S logits, the softmax and the attention result by batched products accumulated in
float32, then the gated rows through one output product. Eager PyTorch makes LayerNorm(x), the masked rows, k, v, the
gate and the gated rows in separate passes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import keep_for_backward, operation
from ...reference import MASK_LOGIT, TRIANGLE_MIN_INF
from ..layer_norm_linear import layer_norm_linear, layer_norm_linear_backward
from ..matmul import float32_products, linear, matmul


def _mask(x: Tensor, mask: Tensor | None) -> Tensor:
    """The rows' mask (B, R, L) in float32, contiguous (the MSA's mask comes transposed): ones for None."""
    if mask is None:
        return x.new_ones(x.shape[:3], dtype=torch.float32)
    return mask.to(torch.float32).contiguous()


def _parts(proj: Tensor, HC: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The projection (B, R, L, 2HC + 2d) as its gate and queries (B, R, L, HC) and keys and values (B, R, L, d)."""
    d = (proj.shape[-1] - 2 * HC) // 2
    return proj[..., :HC], proj[..., HC:2 * HC], proj[..., 2 * HC:2 * HC + d], proj[..., 2 * HC + d:]


def _columns(t: Tensor) -> Tensor:
    """(B, R, L, K) as (B*R, L, K): each column's rows one matrix (a view: the projection is contiguous)."""
    return t.reshape(-1, *t.shape[2:])


def _operand(t: Tensor, dtype: torch.dtype) -> Tensor:
    """A float32 product's operand in the other operand's dtype (16-bit products take both in 16 bits, as the
    reference's)."""
    return t if t.dtype == dtype else t.to(dtype)


def msa_column_global_attention_forward(x: Tensor, mask: Tensor | None, layer_norm_weight: Tensor,
                                        layer_norm_bias: Tensor, proj_weight: Tensor, proj_bias: Tensor | None,
                                        query_bias: Tensor | None, out_weight: Tensor, out_bias: Tensor | None,
                                        num_heads: int, inf: float, eps: float, precision: str,
                                        train: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out (B, R, L, D), proj (B, R, L, 2HC + 2d), q (B, R, HC) float32, p (B*R, h, L) float32): the output, then what
    the backward takes (each empty unless `train`). x (B, R, L, D) any strides (the MSA's transposed view: R residues'
    columns of L rows); mask (B, R, L) 0/1 of any real dtype or None; proj_weight (2HC + 2d, D): the gate's and the
    queries' HC rows, then the key's and the value's d; proj_bias of its width or None (the queries' part zero: their
    bias, query_bias (HC,) or None, is added after the mean); out_weight (D, HC), out_bias (D,) or None. q is the
    scaled query, p the attention weights."""
    B, R, L, _ = x.shape
    HC = out_weight.shape[1]
    d = HC // num_heads
    dtype = x.dtype
    proj = layer_norm_linear(x, layer_norm_weight, layer_norm_bias, proj_weight, proj_bias, None, precision)
    g, qs, k, v = _parts(proj, HC)
    m = _mask(x, mask)
    count = m.sum(-1) + eps  # (B, R)
    # the masked mean of the rows' queries: a (1, L) x (L, HC) product a column
    q = float32_products(_operand(m.view(B * R, 1, L), dtype), _columns(qs), precision).view(B, R, HC)
    q = q / count[..., None]
    if query_bias is not None:
        q = q + query_bias
    q = q * d ** -0.5
    logits = float32_products(_operand(q.view(B * R, num_heads, d), dtype), _columns(k).transpose(1, 2), precision)
    if inf >= TRIANGLE_MIN_INF:  # a masked row's logit -1e9 as float32 rounds logit - inf (NaN stays NaN)
        logits = torch.where(m.view(B * R, 1, L) == 0, logits * 0 + MASK_LOGIT, logits)
    else:
        logits += (inf * (m - 1)).view(B * R, 1, L)
    p = torch.softmax(logits, dim=-1)  # (B*R, h, L)
    o = float32_products(_operand(p, dtype), _columns(v), precision).view(B, R, 1, HC)
    gated = torch.sigmoid(g) * o.to(dtype)  # (B, R, L, HC)
    out = linear(gated, out_weight, out_bias, precision)
    if not train:
        return out, x.new_empty(0), q.new_empty(0), p.new_empty(0)
    return out, proj, q, p


def _fake(x, mask, layer_norm_weight, layer_norm_bias, proj_weight, proj_bias, query_bias, out_weight, out_bias,
          num_heads, inf, eps, precision, train):
    B, R, L, D = x.shape
    out = x.new_empty(B, R, L, D)
    if not train:
        return out, x.new_empty(0), x.new_empty(0, dtype=torch.float32), x.new_empty(0, dtype=torch.float32)
    HC = out_weight.shape[1]
    return (out, x.new_empty(B, R, L, proj_weight.shape[0]), x.new_empty(B, R, HC, dtype=torch.float32),
            x.new_empty(B * R, num_heads, L, dtype=torch.float32))


def _setup_context(ctx, inputs, output):
    x, mask, *params, num_heads, inf, eps, precision, _ = inputs
    keep_for_backward(ctx, [x, mask, *params], list(output[1:]), num_heads=num_heads, eps=eps, precision=precision)


def _backward(ctx, grad_out, *_):
    x, mask, lnw, lnb, w_proj, _, b_q, wo, _, proj, q, p = ctx.saved_tensors
    needs = ctx.needs_input_grad
    B, R, L, D = x.shape
    HC = wo.shape[1]
    h = ctx.num_heads
    d = HC // h
    dtype, precision = x.dtype, ctx.precision
    g, _, k, v = _parts(proj, HC)
    o = float32_products(_operand(p, dtype), _columns(v), precision).view(B, R, 1, HC).to(dtype)
    sg = torch.sigmoid(g)  # (B, R, L, HC)
    rows = grad_out.reshape(-1, D)
    d_bo = grad_out.sum((0, 1, 2), dtype=torch.float32).to(dtype) if needs[8] else None
    d_wo = matmul(rows.t(), (sg * o).view(-1, HC), precision).to(dtype) if needs[7] else None
    if not any(needs[:7]):  # the output projection's alone
        return (None,) * 7 + (d_wo, d_bo) + (None,) * 5
    du = matmul(rows, wo, precision).view(B, R, L, HC)  # the gated rows' gradient
    d_proj = torch.empty(B, R, L, w_proj.shape[0], dtype=dtype, device=x.device)
    torch.mul(du * o, sg * (1 - sg), out=d_proj[..., :HC])  # the gate's pre-activation
    d_o = (du * sg).sum(2, dtype=torch.float32).view(B * R, h, d)
    dp = float32_products(_operand(d_o, dtype), _columns(v).transpose(1, 2), precision)  # (B*R, h, L)
    d_logits = p * (dp - (p * dp).sum(-1, keepdim=True))
    d_proj[..., 2 * HC + d:] = float32_products(_operand(p.transpose(1, 2), dtype), _operand(d_o, dtype),
                                                precision).view(B, R, L, d)
    d_proj[..., 2 * HC:2 * HC + d] = float32_products(_operand(d_logits.transpose(1, 2), dtype),
                                                      _operand(q.view(B * R, h, d), dtype), precision).view(B, R, L, d)
    dq = float32_products(_operand(d_logits, dtype), _columns(k), precision).view(B, R, HC) * d ** -0.5
    d_bq = dq.sum((0, 1)).to(dtype) if needs[6] and b_q is not None else None
    m = _mask(x, mask)
    # every row's query gets its column's gradient times its mask over the count
    torch.mul(m[..., None], (dq / (m.sum(-1) + ctx.eps)[..., None])[:, :, None, :], out=d_proj[..., HC:2 * HC])
    dx, dlnw, dlnb, dw, db = layer_norm_linear_backward(x, lnw, lnb, w_proj, d_proj, needs[0:1] + needs[2:6],
                                                        precision)
    return dx, None, dlnw, dlnb, dw, db, d_bq, d_wo, d_bo, None, None, None, None, None


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
msa_column_global_attention_op, msa_column_global_attention = operation(
    "msa_column_global_attention", msa_column_global_attention_forward, _fake, _setup_context, _backward)

"""One key tile of the attention core, for ring attention (context parallelism): the core's kernels on queries of one
tile of residues against the keys and values of another, of the same length. The forward returns the un-gated output
and the rows' log-sum-exp over the tile's keys (the kernel's GATED off); the backward takes the merged output and
log-sum-exp of every tile, so that the probabilities it makes again are the whole row's, and uses the merged rows'
delta as given (the dq kernel's EXACT_DELTA off: its correction holds for a whole row alone). Neither subtracts the
bias gradient's mean over the keys, which is zero only over a whole row."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..._runtime import bucket, cdiv, custom_op
from .core import launch_backward, launch_constants, mask_args, no_bias, tuned_kernels

LN2 = math.log(2.0)


def _rows(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """q, k, v (B, S, N, h, d) as the core's rows (B, S, N, 3H): q, k and v at channels 0, H and 2H."""
    B, S, N, h, d = q.shape
    return torch.cat([t.reshape(B, S, N, h * d) for t in (q, k, v)], -1)


def tile_forward(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, mask: Tensor | None, mask_mode: str,
                 precision: str) -> tuple[Tensor, Tensor]:
    """(o (B, S, N, h, d) in q's dtype, lse (B, S, N, h) float64, natural log): `reference.attention_tile_reference`
    by the core's forward kernel. q, k, v (B, S, N, h, d) of one floating dtype; bias (B, h, N, N), any strides, or
    None; mask (B, S, N) 0/1 of any dtype or None."""
    B, S, N, h, d = q.shape
    H = h * d
    rows = _rows(q, k, v)
    o = torch.empty(B, S, N, H, dtype=q.dtype, device=q.device)
    stats = torch.empty(2, B, S, N, h, dtype=torch.float32, device=q.device)
    if o.numel():
        z = no_bias(rows, h) if bias is None else bias

        def grid(meta):
            return B * h * cdiv(N, meta["BLOCK_M"]) * S,

        tuned_kernels()[0][grid](rows, *rows.stride()[:3], z, *z.stride(), *mask_args(mask, rows), o, *o.stride()[:3],
                            stats, *stats.stride()[1:], stats.stride(0), S, N, h, H, d,
                            math.log2(math.e) / math.sqrt(d), bucket(N), TRAIN=True, ADDITIVE_MASK=mask_mode == "add",
                            GATED=False, **launch_constants(q.dtype, mask, d, precision))
    return o.view(B, S, N, h, d), (stats[0].double() + stats[1].double()) * LN2


def tile_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, mask: Tensor | None,
                  out: Tensor, lse: Tensor, mask_mode: str, precision: str,
                  bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv (B, S, N, h, d) in q's dtype, dbias (B, h, N, N) float32, empty without `bias_grad`): this key
    tile's share of the gradients for grad_out, the gradient of the merged output `out` (B, S, N, h, d), whose rows'
    merged log-sum-exp is lse (B, S, N, h). dq is this tile's term of the queries' gradient (the tiles' terms sum
    to it); dk, dv and dbias are the tile's own. `bias_grad` needs a bias."""
    B, S, N, h, d = q.shape
    H = h * d
    rows = _rows(q, k, v)
    d_rows = torch.empty_like(rows)
    if not rows.numel():
        dz = torch.zeros((B, h, N, N) if bias_grad else (0,), dtype=torch.float32, device=q.device)
        return (*d_rows.view(B, S, N, 3, h, d).unbind(3), dz)
    z = bias.contiguous() if bias_grad else no_bias(rows, h) if bias is None else bias  # (dz is written in z's strides)
    do = grad_out.to(q.dtype).reshape(B, S, N, H).contiguous()
    delta = (grad_out.float() * out.float()).sum(-1).contiguous()  # (B, S, N, h): rowsum(do * o) of the whole rows
    # the kernels' statistics (largest logit, log2 of the sum), base 2: the log-sum-exp as two float32 that add to it
    log2 = lse.double() * math.log2(math.e)
    top = log2.float()
    stats = torch.stack([top, (log2 - top.double()).float()])
    dz = launch_backward(rows, z, mask, do, stats, delta, d_rows, h, H, mask_mode, precision, bias_grad,
                         exact_delta=False)
    return (*d_rows.view(B, S, N, 3, h, d).unbind(3), dz)


def _tile_forward_fake(q, k, v, bias, mask, mask_mode, precision):
    return torch.empty_like(q), q.new_empty(q.shape[:4], dtype=torch.float64)


def _tile_backward_dispatched(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
                              mask: Tensor | None, out: Tensor, lse: Tensor, mask_mode: str, precision: str,
                              bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`tile_backward` as its op returns it: dq, dk and dv apart (views of one tensor there, and a custom op's outputs
    must not alias)."""
    dq, dk, dv, dz = tile_backward(grad_out, q, k, v, bias, mask, out, lse, mask_mode, precision, bias_grad)
    return dq.contiguous(), dk.contiguous(), dv.contiguous(), dz


def _tile_backward_fake(grad_out, q, k, v, bias, mask, out, lse, mask_mode, precision, bias_grad):
    B, _, N, h, _ = q.shape
    dz = q.new_empty((B, h, N, N) if bias_grad else (0,), dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(q), torch.empty_like(q), dz


# the tiles' calls as ops (`evofuse::attention_tile_forward` and `_backward`), for a traced ring (torch.compile)
tile_forward_op = custom_op("attention_tile_forward", tile_forward, _tile_forward_fake)
tile_backward_op = custom_op("attention_tile_backward", _tile_backward_dispatched, _tile_backward_fake)

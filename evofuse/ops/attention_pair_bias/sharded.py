"""Attention with pair bias on a single representation split by tokens (`torch.distributed.tensor`): each device
takes the queries of its own tokens and the pair's rows of them, and DTensor gathers the keys and values of every
token (2H channels a token), never the pair.

- The projections q, k, v and g of the device's tokens and the output projection are `F.linear` (DTensor's own
  rules: the tokens' split kept, the weights' gradients partial sums).
- The bias (B, h, N, N) of the device's pair rows is `evofuse::triangle_bias` (the pair's LayerNorm and
  projection; a given bias is only permuted), split as the pair's rows are.
- `evofuse::attention_pair_bias_tokens`: the attention of the device's R queries against every token's keys, key
  tile by key tile of R tokens on the ring-attention kernels (`evofuse.ring`; a last tile of fewer tokens, where N
  is not a multiple of R, in PyTorch), the tiles merged by their log-sum-exps, then the gate. Its sharding rule
  (`evofuse.sharding`) asks the keys and values and the keys' mask replicated; in its backward their gradient is a
  partial sum over the devices.

Taken where the tokens are split evenly; plain tensors and other splits take the one fused op."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..._runtime import custom_op, keep_for_backward, operation, traced
from ...ring import attention_tile_backward, attention_tile_forward, merge_tiles
from ..triangle_attention.op import triangle_bias


def by_tokens(single_repr: Tensor, pair_norm_weight: Tensor | None, pair_weight: Tensor | None) -> bool:
    """Whether a call takes this composition: single_repr a distributed (B, N, c_s) split along its tokens alone
    (dimension 1) into equal parts (DTensor does not flatten the pair's rows split unevenly); the pair's bias
    normalized (the models') or given."""
    placements = getattr(single_repr, "placements", ())
    splits = [k for k, p in enumerate(placements) if getattr(p, "dim", None) is not None]
    if single_repr.dim() != 3 or [placements[k].dim for k in splits] != [1]:
        return False
    return (single_repr.shape[1] % single_repr.device_mesh.size(splits[0]) == 0
            and (pair_weight is None or pair_norm_weight is not None))


def attention_pair_bias(single_repr: Tensor, pair_repr: Tensor, mask: Tensor | None, qkvg_weight: Tensor,
                        qkvg_bias: Tensor | None, out_weight: Tensor, pair_norm_weight: Tensor | None,
                        pair_norm_bias: Tensor | None, pair_weight: Tensor | None, num_heads: int, precision: str,
                        train: bool) -> Tensor:
    """The fused op's output (B, N, c_s) from its arguments (`op.attention_pair_bias_forward`), by the composition
    above."""
    H = qkvg_weight.shape[0] // 4
    qkvg = F.linear(single_repr, qkvg_weight, qkvg_bias)  # (B, N, 4H)
    z = (pair_repr.permute(0, 3, 1, 2) if pair_weight is None else
         triangle_bias(pair_repr, pair_norm_weight, pair_norm_bias, pair_weight, 0, precision, train))
    gated = attend(qkvg, qkvg[..., H:3 * H], z, mask, num_heads, precision, train)[0]
    return F.linear(gated, out_weight)


def _tiles(qkvg: Tensor, kv: Tensor, z: Tensor, mask: Tensor | None, num_heads: int):
    """q (B, 1, R, h, d) and, for each key tile of R tokens (the last of fewer where N is not a multiple of R), (k,
    v (B, 1, M, h, d), its bias (B, h, R, M), its keys' mask (B, 1, M) or None, its first token)."""
    B, R, W = qkvg.shape
    H, N = W // 4, kv.shape[1]
    d = H // num_heads
    q = qkvg[..., :H].reshape(B, 1, R, num_heads, d)
    for j0 in range(0, N, R):
        k, v = (kv[:, j0:j0 + R, c:c + H].reshape(B, 1, -1, num_heads, d) for c in (0, H))
        yield q, k, v, z[..., j0:j0 + R], None if mask is None else mask[:, None, j0:j0 + R], j0


def _attend(qkvg: Tensor, kv: Tensor, z: Tensor, mask: Tensor | None, num_heads: int, precision: str,
            train: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(gated (B, R, H), o (B, R, H) the un-gated output, lse (B, R, h) float64; o and lse empty unless `train`):
    sigmoid(g) * softmax(q k^T / sqrt(d) + z, keys masked) v for R queries against N keys. qkvg (B, R, 4H): the
    queries' q, k, v and g (k and v unused); kv (B, N, 2H): every key's k and v; z (B, h, R, N)
    the bias, any strides; mask (B, N) 0/1 or None; all of qkvg's dtype but the mask."""
    B, R, W = qkvg.shape
    H = W // 4
    outs, lses = [], []
    for q, k, v, bias, keys_mask, _ in _tiles(qkvg, kv, z, mask, num_heads):
        o, lse = attention_tile_forward(q, k, v, bias, keys_mask, mask_mode="add", precision=precision)
        outs.append(o)
        lses.append(lse)
    o, lse = merge_tiles(outs, lses)
    o, lse = o.reshape(B, R, H), lse.reshape(B, R, num_heads)
    gated = (torch.sigmoid(qkvg[..., 3 * H:].float()) * o.float()).to(qkvg.dtype)
    return (gated, o, lse) if train else (gated, o.new_empty(0), lse.new_empty(0))


def _attend_fake(qkvg, kv, z, mask, num_heads, precision, train):
    B, R, W = qkvg.shape
    if not train:
        return qkvg.new_empty(B, R, W // 4), qkvg.new_empty(0), qkvg.new_empty(0, dtype=torch.float64)
    return (qkvg.new_empty(B, R, W // 4), qkvg.new_empty(B, R, W // 4),
            qkvg.new_empty(B, R, num_heads, dtype=torch.float64))


def _attend_setup(ctx, inputs, output):
    qkvg, kv, z, mask, num_heads, precision, _ = inputs
    keep_for_backward(ctx, [qkvg, kv, z, mask], list(output[1:]), num_heads=num_heads, precision=precision)


def attend_backward(d_gated: Tensor, qkvg: Tensor, kv: Tensor, z: Tensor, mask: Tensor | None, o: Tensor,
                    lse: Tensor, num_heads: int, precision: str) -> tuple[Tensor, Tensor, Tensor]:
    """(d_qkvg (B, R, 4H): q's and g's gradients, zero at k's and v's channels; d_kv (B, N, 2H): every key's k and v
    gradient from these queries; dz (B, h, R, N)), in qkvg's dtype, from the gated output's gradient d_gated (B, R,
    H), any strides, and the forward's o and lse: the gate's backward, then each key tile's share of the core's
    (`attention_tile_backward` with the merged o and lse), the queries' terms summed in float32."""
    B, R, W = qkvg.shape
    H, h = W // 4, num_heads
    s = torch.sigmoid(qkvg[..., 3 * H:].float())
    d_o = (d_gated.float() * s).to(qkvg.dtype).reshape(B, 1, R, h, H // h)
    d_qkvg = torch.zeros_like(qkvg)
    d_qkvg[..., 3 * H:] = d_gated.float() * o.float() * s * (1 - s)
    d_kv, dz = torch.empty_like(kv), torch.empty(z.shape, dtype=qkvg.dtype, device=qkvg.device)
    dq = torch.zeros(B, 1, R, h, H // h, dtype=torch.float32, device=qkvg.device)
    o_tiles, lse_tiles = o.reshape(B, 1, R, h, H // h), lse.reshape(B, 1, R, h)
    for q, k, v, bias, keys_mask, j0 in _tiles(qkvg, kv, z, mask, num_heads):
        dq_j, dk, dv, dz_j = attention_tile_backward(d_o, q, k, v, bias, keys_mask, o_tiles, lse_tiles,
                                                     mask_mode="add", precision=precision)
        dq += dq_j
        d_kv[:, j0:j0 + R] = torch.cat([dk.reshape(B, -1, H), dv.reshape(B, -1, H)], -1)
        dz[..., j0:j0 + R] = dz_j
    d_qkvg[..., :H] = dq.reshape(B, R, H)
    return d_qkvg, d_kv, dz


def _attend_backward_fake(d_gated, qkvg, kv, z, mask, o, lse, num_heads, precision):
    return torch.empty_like(qkvg), torch.empty_like(kv), z.new_empty(z.shape)


def _attend_grads(ctx, needs, d_gated, *_):
    qkvg, kv, z, mask, o, lse = ctx.saved_tensors
    backward = attend_backward_op if traced(d_gated) else attend_backward
    d_qkvg, d_kv, dz = backward(d_gated, qkvg, kv, z, mask, o, lse, ctx.num_heads, ctx.precision)
    return {n: g for n, g in (("qkvg", d_qkvg), ("kv", d_kv), ("z", dz)) if needs[n]}


attend_op, attend = operation("attention_pair_bias_tokens", _attend, _attend_fake, _attend_setup, _attend_grads)
attend_backward_op = custom_op("attention_pair_bias_tokens_backward", attend_backward, _attend_backward_fake)

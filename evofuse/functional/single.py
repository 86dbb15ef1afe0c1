"""The single representation's operation's functional form: attention with pair bias (see `evofuse.functional`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from .._validation import check_floating, check_rows_input, check_shapes
from ._common import apb, att, cast, check_heads, check_last, check_options, dispatch, follows_autocast, parameters


@follows_autocast
def attention_pair_bias(
    single_repr: torch.Tensor,
    pair_repr: torch.Tensor,
    mask: torch.Tensor | None,
    query_weight: torch.Tensor,
    query_bias: torch.Tensor | None,
    key_weight: torch.Tensor,
    value_weight: torch.Tensor,
    gate_weight: torch.Tensor,
    out_weight: torch.Tensor,
    pair_norm_weight: torch.Tensor | None,
    pair_norm_bias: torch.Tensor | None,
    pair_weight: torch.Tensor | None,
    *,
    num_heads: int,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """Attention with pair bias over the single representation (AF3 Algorithm 24, Boltz-2's `AttentionPairBias`):
    gated attention of the N tokens with a bias from the pair, q with a bias, k, v, the gate and the output without
    (`evofuse.reference.attention_pair_bias_reference` is the definition). No (B, h, N, N) logits are formed.

    Args:
        single_repr: (B, N, c_s) float16, bfloat16, float32 or float64, any strides, already normalized (the
            models' LayerNorm or adaptive LayerNorm comes before); any leading dimensions in place of B (none: an
            unbatched (N, c_s)), which the pair, the mask and the output share.
        pair_repr: (B, N, N, c_z) the pair, projected to the bias here; or, where pair_weight is None, the bias
            itself (B, N, N, h), projected once by the caller (the diffusion transformer's).
        mask: (B, N) 0/1 as bool, integer or floating, or None: a masked key's logit is -1e9 with the logit's gradient
            (the models' float32 `logit - inf * (1 - mask)` for every row with a key unmasked; a row whose keys are
            all masked averages v over all keys).
        query_weight, key_weight, value_weight, gate_weight: (h*d, c_s); query_bias (h*d,) or None; out_weight
            (c_s, h*d).
        pair_norm_weight, pair_norm_bias: (c_z,), the pair's LayerNorm before its projection, or None for none;
            pair_weight: (h, c_z), or None for a given bias.
        num_heads: h; precision, impl: as for `outer_product_mean`.
    Returns:
        (B, N, c_s) in single_repr's dtype; the parameters and the pair are cast to it. 16-bit inputs accumulate in
        float32. The kernels take head_dim <= 128 and 16/32-bit floats; anything else runs the reference, with a
        one-time warning.
    """
    check_options(precision)
    single_repr = check_rows_input(single_repr, mask, "single_repr")
    if single_repr.dim() < 2:
        raise ValueError(f"single_repr must have shape (..., N, c_s), got {tuple(single_repr.shape)}")
    if (pair_norm_weight is None) != (pair_norm_bias is None):
        raise ValueError("pair_norm_weight and pair_norm_bias must be given together")
    if pair_weight is None and pair_norm_weight is not None:
        raise ValueError("pair_norm_weight needs pair_weight: a given bias (pair_weight None) has no LayerNorm")
    params = dict(query_weight=query_weight, query_bias=query_bias, key_weight=key_weight, value_weight=value_weight,
                  gate_weight=gate_weight, out_weight=out_weight, pair_norm_weight=pair_norm_weight,
                  pair_norm_bias=pair_norm_bias, pair_weight=pair_weight)
    sizes = parameters(single_repr, "single_repr", params, dict(
        query_weight="H c", query_bias="H", key_weight="H c", value_weight="H c", gate_weight="H c",
        out_weight="c H", pair_norm_weight="P", pair_norm_bias="P", pair_weight="h P"),
        optional=("query_bias", "pair_norm_weight", "pair_norm_bias", "pair_weight"))
    c, H = sizes["c"], sizes["H"]
    check_heads(num_heads, H)
    check_last(single_repr, "single_repr", "..., N", c, "query_weight")
    lead, N = single_repr.shape[:-2], single_repr.shape[-2]
    channels = num_heads if pair_weight is None else sizes["P"]
    check_floating("pair_repr", pair_repr)
    if pair_repr.shape != (*lead, N, N, channels):
        what = "num_heads" if pair_weight is None else "pair_weight"
        raise ValueError(f"pair_repr must have shape {(*lead, N, N, channels)} (single_repr's leading dimensions, N "
                         f"and N, and the size of {what}), got {tuple(pair_repr.shape)}")
    if pair_repr.device != single_repr.device:
        raise ValueError(f"pair_repr is on {pair_repr.device} but single_repr is on {single_repr.device}: all tensors "
                         "must be on one device")
    if pair_weight is not None:
        check_shapes(params, dict(pair_weight="h P"), {**sizes, "h": num_heads})
    batched = single_repr.dim() == 3  # (else the leading dimensions are folded into one, and given back)
    s = single_repr if batched else single_repr.reshape(-1, N, c)
    z = pair_repr if batched else pair_repr.reshape(-1, N, N, channels)
    m = mask if batched or mask is None else mask.reshape(-1, N)
    z, *weights = cast([z, *params.values()], s.dtype)

    def unbatched(out):
        return out if batched else out.view(single_repr.shape)

    def reference():
        return unbatched(ref.attention_pair_bias_reference(s, z, m, *weights, num_heads=num_heads))

    def fused(train):
        wq, bq, wk, wv, wg, wo, pnw, pnb, wz = weights
        qkvg = att.joined_qkvg([wq, wk, wv, wg], [bq, None, None, None])
        return unbatched(apb.attention_pair_bias(s, z, m, *qkvg, wo, pnw, pnb, wz, num_heads, precision, train)[0])

    head, dtype = H // num_heads, s.dtype
    return dispatch("attention with pair bias", s, (s, z, *weights), impl, reference, fused,
                    None if apb.fused(head, dtype) else f"head_dim={head}, dtype={dtype}")

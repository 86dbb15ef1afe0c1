"""The single representation's operation's functional form: attention with pair bias (see `evofuse.functional`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from .._validation import check_floating
from ._common import apb, att
from ._door import Form, front


def _given_together(args: dict) -> None:
    if isinstance(args["single_repr"], torch.Tensor) and args["single_repr"].dim() < 2:
        raise ValueError(f"single_repr must have shape (..., N, c_s), got {tuple(args['single_repr'].shape)}")
    if (args["pair_norm_weight"] is None) != (args["pair_norm_bias"] is None):
        raise ValueError("pair_norm_weight and pair_norm_bias must be given together")
    if args["pair_weight"] is None and args["pair_norm_weight"] is not None:
        raise ValueError("pair_norm_weight needs pair_weight: a given bias (pair_weight None) has no LayerNorm")


def _pair_shape(args: dict, sizes: dict) -> None:
    """The pair (or a given bias) shares single_repr's leading dimensions and N."""
    s, z, given = args["single_repr"], args["pair_repr"], args["pair_weight"] is None
    channels = args["num_heads"] if given else sizes["P"]
    check_floating("pair_repr", z)
    if z.shape != (*s.shape[:-1], s.shape[-2], channels):
        what = "num_heads" if given else "pair_weight"
        raise ValueError(f"pair_repr must have shape {(*s.shape[:-1], s.shape[-2], channels)} (single_repr's leading "
                         f"dimensions, N and N, and the size of {what}), got {tuple(z.shape)}")
    if z.device != s.device:
        raise ValueError(f"pair_repr is on {z.device} but single_repr is on {s.device}: all tensors must be on one "
                         "device")


ATTENTION_PAIR_BIAS = Form(
    "attention with pair bias", "single", ("single_repr", "pair_repr", "mask"),
    dict(query_weight="H c", query_bias="H", key_weight="H c", value_weight="H c", gate_weight="H c",
         out_weight="c H", pair_norm_weight="P", pair_norm_bias="P", pair_weight="h P"),
    ref.attention_pair_bias_reference,
    lambda a, train: apb.attention_pair_bias(
        a.single_repr, a.pair_repr, a.mask,
        *att.joined_qkvg([a.query_weight, a.key_weight, a.value_weight, a.gate_weight], [a.query_bias, None, None, None]),
        a.out_weight, a.pair_norm_weight, a.pair_norm_bias, a.pair_weight, a.num_heads, a.precision, train)[0],
    optional=("query_bias", "pair_norm_weight", "pair_norm_bias", "pair_weight"), width=("c", "query_weight"),
    heads=("H", "the inner width"), later=dict(pair_weight="h P"),
    check=_given_together, checked=_pair_shape,
    supports=lambda a: (None if apb.fused(a.sizes["H"] // a.num_heads, a.dtype)
                        else f"head_dim={a.sizes['H'] // a.num_heads}, dtype={a.dtype}"))


@front(ATTENTION_PAIR_BIAS)
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

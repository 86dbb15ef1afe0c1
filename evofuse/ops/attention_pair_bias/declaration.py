"""Attention with pair bias: its declaration, read top-down: the functional form (its `Form`, which the front door
reads, and its documented signature), the module (the models' parameter names) and its registry entry (`OPERATION`:
the suite's cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ..._validation import check_floating
from ...front.declaration import Case, Operation, heads
from ...front.door import Form, front
from ...front.parts import check_options

if triton_available():  # the kernels (without Triton every call takes the reference)
    from ...stages.attention.core import fused
    from ..row_attention.op import joined_qkvg
    from . import op, sharded
else:
    op = sharded = fused = joined_qkvg = None


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


def _attention_pair_bias(a, train):
    args = (a.single_repr, a.pair_repr, a.mask,
            *joined_qkvg([a.query_weight, a.key_weight, a.value_weight, a.gate_weight], [a.query_bias, None, None, None]),
            a.out_weight, a.pair_norm_weight, a.pair_norm_bias, a.pair_weight, a.num_heads, a.precision, train)
    if sharded.by_tokens(a.single_repr, a.pair_norm_weight, a.pair_weight):  # (split by tokens: the keys gathered)
        return sharded.attention_pair_bias(*args)
    return op.attention_pair_bias(*args)[0]


ATTENTION_PAIR_BIAS = Form(
    "attention with pair bias", "single", ("single_repr", "pair_repr", "mask"),
    dict(query_weight="H c", query_bias="H", key_weight="H c", value_weight="H c", gate_weight="H c",
         out_weight="c H", pair_norm_weight="P", pair_norm_bias="P", pair_weight="h P"),
    ref.attention_pair_bias_reference,
    _attention_pair_bias,
    optional=("query_bias", "pair_norm_weight", "pair_norm_bias", "pair_weight"), width=("c", "query_weight"),
    heads=("H", "the inner width"), later=dict(pair_weight="h P"),
    check=_given_together, checked=_pair_shape,
    supports=lambda a: (None if fused(a.sizes["H"] // a.num_heads, a.dtype)
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


class AttentionPairBias(nn.Module):
    """Attention with pair bias (AF3 Algorithm 24): Boltz-2's constructor and parameter names (`proj_q` with a bias,
    `proj_k`, `proj_v`, `proj_g`, `proj_o` without, `proj_z` a LayerNorm and a linear to the heads), so a Boltz-2
    state_dict of the module loads unchanged.

    Args:
        c_s: the single representation's width; c_z: the pair's (unused where compute_pair_bias is False);
        num_heads: h, dividing c_s; inf: the models' mask magnitude, kept for their calls (a masked key's logit is
        -1e9 whatever it is: the same softmax for every row with a key unmasked); compute_pair_bias: the bias
        projected from the pair here, or (False) given projected, (B, N, N, h), as the diffusion transformer passes
        it; precision, impl: as for OuterProductMean.

    forward(s (B, N, c_s) normalized, z (B, N, N, c_z) or the bias (B, N, N, h), mask (B, N) 0/1 or None, k_in:
    None or s itself (the keys are the queries' tokens), multiplicity: s's batch is z's times this, each z used by
    that many consecutive elements) returns (B, N, c_s) in s's dtype.
    """

    def __init__(self, c_s: int, c_z: int | None = None, num_heads: int | None = None, inf: float = 1e6,
                 compute_pair_bias: bool = True, precision: str = "default", impl: str | None = None):
        super().__init__()
        check_options(precision, impl)
        if not isinstance(num_heads, int) or num_heads < 1 or c_s % num_heads:
            raise ValueError(f"num_heads must be a positive integer dividing c_s {c_s}, got {num_heads!r}")
        if compute_pair_bias and not isinstance(c_z, int):
            raise ValueError(f"c_z must be an integer where compute_pair_bias is True, got {c_z!r}")
        self.c_s, self.num_heads, self.head_dim, self.inf = c_s, num_heads, c_s // num_heads, inf
        self.compute_pair_bias = compute_pair_bias
        self.proj_q = nn.Linear(c_s, c_s)
        self.proj_k = nn.Linear(c_s, c_s, bias=False)
        self.proj_v = nn.Linear(c_s, c_s, bias=False)
        self.proj_g = nn.Linear(c_s, c_s, bias=False)
        self.proj_z = nn.Sequential(nn.LayerNorm(c_z), nn.Linear(c_z, num_heads, bias=False)) if compute_pair_bias \
            else None
        self.proj_o = nn.Linear(c_s, c_s, bias=False)
        self.precision, self.impl = precision, impl

    def forward(self, s: torch.Tensor, z: torch.Tensor, mask: torch.Tensor | None = None,
                k_in: torch.Tensor | None = None, multiplicity: int = 1, *, impl: str | None = None) -> torch.Tensor:
        if k_in is not None and k_in is not s:
            raise ValueError("k_in must be None or s itself: keys other than the queries' tokens are not supported")
        if not isinstance(multiplicity, int) or multiplicity < 1:
            raise ValueError(f"multiplicity must be a positive integer, got {multiplicity!r}")
        if multiplicity > 1:  # (as the models do: each pair serves that many consecutive samples)
            z = z.repeat_interleave(multiplicity, 0)
        norm, linear = (self.proj_z[0], self.proj_z[1]) if self.compute_pair_bias else (None, None)
        return attention_pair_bias(
            s, z, mask, **ATTENTION_PAIR_BIAS.weights(query=self.proj_q, key=self.proj_k, value=self.proj_v,
                                                      gate=self.proj_g, out=self.proj_o, pair_norm=norm, pair=linear),
            num_heads=self.num_heads, precision=self.precision, impl=impl if impl is not None else self.impl)


OPERATION = Operation(
    "apb", lambda c, **kw: AttentionPairBias(c.D, c.pair, c.width, **kw), "proj_z.0",
    ("proj_q.weight", "proj_q.bias", "proj_k.weight", "proj_v.weight", "proj_g.weight", "proj_o.weight",
     "proj_z.0.weight", "proj_z.0.bias", "proj_z.1.weight"), ref.attention_pair_bias_reference, heads,
    "single_pair", "residue",
    lambda c: 2.0 * c.B * (5 * c.N * c.D * c.D + 2 * c.N ** 2 * c.D + c.N ** 2 * c.pair * c.width),
    lambda c: c.B * c.width * c.N ** 2 * 8,  # (the logits, (B, h, N, N))
    (Case("apb-seed", "apb", 2, 1, 32, 64, 32, 4),
     Case("apb-384", "apb", 1, 1, 384, 384, 128, 16),  # the Pairformer's single track (c_s 384, 16 heads)
     Case("apb-1024", "apb", 1, 1, 1024, 384, 128, 16)))

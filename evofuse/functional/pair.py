"""The pair stack's operations' functional forms: triangle attention and triangle multiplication (see
`evofuse.functional`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from .._runtime import distributed
from ._common import att, tri, trimul
from ._door import ROWS, Form, front, masked_inf


def _triangle_attention(a, train):
    x, mask = a.pair_repr, a.pair_mask
    if not a.starting:  # (the ending node on the transposed pair: strided views, no copies)
        x, mask = x.transpose(1, 2), None if mask is None else mask.transpose(1, 2)
    projections = [a.query_weight, a.key_weight, a.value_weight, a.gate_weight]
    if distributed(x):  # the bias apart, so that a pair split by rows gathers it and never the pair
        bias = tri.triangle_bias(x, a.layer_norm_weight, a.layer_norm_bias, a.linear_weight, a.transpose_bias,
                                 a.precision, train)
        proj = tri.joined_projections(projections, None, a.gate_bias)
    else:
        bias, proj = None, tri.joined_projections(projections, a.linear_weight, a.gate_bias)
    out = tri.triangle_attention(x, mask, a.layer_norm_weight, a.layer_norm_bias, *proj, a.out_weight, a.out_bias, bias,
                                 a.num_heads, a.transpose_bias, a.precision, a.chunk_size or 0, train)[0]
    return out if a.starting else out.transpose(1, 2)


TRIANGLE_ATTENTION = Form(
    "triangle attention", "pair", ("pair_repr", "pair_mask"),
    dict(layer_norm_weight="c", layer_norm_bias="c", linear_weight="h c", query_weight="H c", key_weight="H c",
         value_weight="H c", gate_weight="H c", gate_bias="H", out_weight="c H", out_bias="c"),
    ref.triangle_attention_reference, _triangle_attention, optional=("gate_bias", "out_bias"),
    width=("c", "layer_norm_weight"), heads=("H", "the inner width"), later=dict(linear_weight="h c"),
    rules={"chunk_size": ROWS},
    supports=lambda a: masked_inf(a.inf, a.pair_mask) or (None if att.fused(a.sizes["H"] // a.num_heads, a.dtype)
                                          else f"head_dim={a.sizes['H'] // a.num_heads}, dtype={a.dtype}"))

TRIANGLE_MULTIPLICATION = Form(
    "triangle multiplication", "pair", ("pair_repr", "pair_mask"),
    dict(norm_in_weight="cz", norm_in_bias="cz", p_in_weight="2c cz", p_in_bias="2c", g_in_weight="2c cz",
         g_in_bias="2c", norm_out_weight="c", norm_out_bias="c", p_out_weight="cz c", p_out_bias="cz",
         g_out_weight="cz cz", g_out_bias="cz"),
    ref.triangle_multiplication_reference,
    lambda a, train: trimul.triangle_multiplication(
        a.pair_repr, a.pair_mask, a.norm_in_weight, a.norm_in_bias,
        *trimul.joined_inputs([a.p_in_weight, a.g_in_weight, a.g_out_weight], [a.p_in_bias, a.g_in_bias, a.g_out_bias]),
        a.norm_out_weight, a.norm_out_bias, a.p_out_weight, a.p_out_bias, a.outgoing, a.precision, a.chunk_size or 0,
        train)[0],
    optional=("p_in_bias", "g_in_bias", "p_out_bias", "g_out_bias"), width=("cz", "norm_in_weight"),
    rules={"chunk_size": ROWS}, supports=lambda a: "float64" if a.dtype == torch.float64 else None)


@front(TRIANGLE_ATTENTION)
def triangle_attention(
    pair_repr: torch.Tensor,
    pair_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    linear_weight: torch.Tensor,
    query_weight: torch.Tensor,
    key_weight: torch.Tensor,
    value_weight: torch.Tensor,
    gate_weight: torch.Tensor,
    gate_bias: torch.Tensor | None,
    out_weight: torch.Tensor,
    out_bias: torch.Tensor | None,
    *,
    num_heads: int,
    starting: bool = True,
    transpose_bias: bool = False,
    inf: float = ref.TRIANGLE_MIN_INF,
    chunk_size: int | None = None,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """Triangle attention around the starting node (AF2 Algorithm 13, AF3 14) or the ending node (14, 15): row
    attention with pair bias over the pair's own rows, one LayerNorm feeding q, k, v, the gate and the triangle bias
    (`evofuse.reference.triangle_attention_reference` is the definition). No (B, N, h, N, N) tensor is formed.

    Args:
        pair_repr: (B, N, N, c) float16, bfloat16, float32 or float64, any strides; any leading dimensions in place
            of B (none: an unbatched (N, N, c)), which the mask and the output share.
        pair_mask: (B, N, N) 0/1 as bool, integer or floating, or None; a masked pair (i, k) adds inf * (mask - 1) to
            the logits of key k in row i (ending node: in column i).
        layer_norm_weight, layer_norm_bias: (c,); linear_weight: (h, c), the triangle bias's projection (no bias).
        query_weight, key_weight, value_weight, gate_weight: (h*d, c), q, k and v without biases; gate_bias (h*d,)
        or None; out_weight (c, h*d), out_bias (c,) or None (Boltz's gate and output have no biases).
        num_heads: h; starting: the starting node (else the ending node); transpose_bias: the triangle bias of key
            k for query j taken from x[k, j] rather than x[j, k] (OpenFold3's flag, which its blocks set for the
            ending node called on a transposed pair); inf: the mask's magnitude (the models' 1e9; below 1e9 the
            reference runs, with a one-time warning: the kernels' masked logit is -1e9).
        chunk_size: rows of the pair an inference call (no gradient recorded) takes at a time, so that its
            projections, four times the pair, are never whole; None: all at once unless they would pass a quarter
            of the CUDA device's free memory (then as many rows as fit it). The same output either way.
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, N, N, c) in pair_repr's dtype; the parameters are cast to it.
    """


@front(TRIANGLE_MULTIPLICATION)
def triangle_multiplication(
    pair_repr: torch.Tensor,
    pair_mask: torch.Tensor | None,
    norm_in_weight: torch.Tensor,
    norm_in_bias: torch.Tensor,
    p_in_weight: torch.Tensor,
    p_in_bias: torch.Tensor | None,
    g_in_weight: torch.Tensor,
    g_in_bias: torch.Tensor | None,
    norm_out_weight: torch.Tensor,
    norm_out_bias: torch.Tensor,
    p_out_weight: torch.Tensor,
    p_out_bias: torch.Tensor | None,
    g_out_weight: torch.Tensor,
    g_out_bias: torch.Tensor | None,
    *,
    outgoing: bool = True,
    chunk_size: int | None = None,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """The triangle multiplicative update, outgoing (AF2 Algorithm 11, AF3 12) or incoming (12, 13), in Boltz-2's and
    AF3's form (`evofuse.reference.triangle_multiplication_reference` is the definition; OpenFold's separate a and b
    projections are these stacked, a's first).

    Args:
        pair_repr: (B, N, N, c_z) float16, bfloat16, float32 or float64, any strides; any leading dimensions in
            place of B (none: an unbatched (N, N, c_z)), which the mask and the output share.
        pair_mask: (B, N, N) 0/1 as bool, integer or floating, or None; a and b are zero at a masked pair (i, k).
        norm_in_weight, norm_in_bias: (c_z,); p_in_weight, g_in_weight: (2c, c_z), a's c rows then b's; p_in_bias,
            g_in_bias: (2c,) or None; norm_out_weight, norm_out_bias: (c,); p_out_weight (c_z, c), p_out_bias (c_z,)
            or None; g_out_weight (c_z, c_z), g_out_bias (c_z,) or None (Boltz's and AF3's have no biases).
        outgoing: t[i, j] = sum_k a[i, k] b[j, k] (else incoming: sum_k a[k, i] b[k, j]).
        chunk_size: output rows i an inference call (no gradient recorded) takes at a time, so that a and t (each c
            planes of the pair) are never whole, b alone for every pair; None: all at once unless a, b and t would
            pass a quarter of the CUDA device's free memory (then as many rows as fit it). The same output either way.
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, N, N, c_z) in pair_repr's dtype; the parameters are cast to it. 16-bit inputs accumulate in float32.
    """

"""The pair stack's operations' functional forms: triangle attention and triangle multiplication (see
`evofuse.functional`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from .._dispatch import warn_once
from .._validation import check_pair_input, check_shapes
from ._common import (
    att,
    cast,
    check_heads,
    check_last,
    check_options,
    dispatch,
    follows_autocast,
    pair_batched,
    parameters,
    tri,
    trimul,
)


@follows_autocast
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
    check_options(precision)
    check_pair_input(pair_repr, pair_mask)
    params = dict(layer_norm_weight=layer_norm_weight, layer_norm_bias=layer_norm_bias, linear_weight=linear_weight,
                  query_weight=query_weight, key_weight=key_weight, value_weight=value_weight, gate_weight=gate_weight,
                  gate_bias=gate_bias, out_weight=out_weight, out_bias=out_bias)
    sizes = parameters(pair_repr, "pair_repr", params, dict(
        layer_norm_weight="c", layer_norm_bias="c", query_weight="H c", key_weight="H c", value_weight="H c",
        gate_weight="H c", gate_bias="H", out_weight="c H", out_bias="c"), optional=("gate_bias", "out_bias"))
    c, H = sizes["c"], sizes["H"]
    check_last(pair_repr, "pair_repr", "..., N, N", c, "layer_norm_weight")
    check_heads(num_heads, H)
    check_shapes(params, dict(linear_weight="h c"), {**sizes, "h": num_heads})
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    if inf < ref.TRIANGLE_MIN_INF and pair_mask is not None and impl != "torch":
        warn_once(f"tri-inf-{inf}", f"evofuse: triangle attention with inf={inf} runs the PyTorch reference (the "
                  f"kernels' masked logit is -1e9, equal for inf >= {ref.TRIANGLE_MIN_INF:g})")
        impl = "torch"
    z, mask, unbatched = pair_batched(pair_repr, pair_mask)
    weights = cast(params.values(), z.dtype)

    def reference():
        return unbatched(ref.triangle_attention_reference(z, mask, *weights, num_heads=num_heads, starting=starting,
                                                          inf=inf, transpose_bias=transpose_bias))

    def fused(train):
        lnw, lnb, linear_w, wq, wk, wv, wg, bg, wo, bo = weights
        x, m = (z, mask) if starting else (z.transpose(1, 2), None if mask is None else mask.transpose(1, 2))
        proj = tri.joined_projections([wq, wk, wv, wg], linear_w, bg)
        out = tri.triangle_attention(x, m, lnw, lnb, *proj, wo, bo, num_heads, transpose_bias, precision,
                                     chunk_size or 0, train)[0]
        return unbatched(out if starting else out.transpose(1, 2))  # (the ending node: strided views, no copies)

    return dispatch("triangle attention", z, (z, *weights), impl, reference, fused,
                    None if att.fused(H // num_heads, z.dtype) else f"head_dim={H // num_heads}, dtype={z.dtype}")


@follows_autocast
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
    check_options(precision)
    check_pair_input(pair_repr, pair_mask)
    params = dict(norm_in_weight=norm_in_weight, norm_in_bias=norm_in_bias, p_in_weight=p_in_weight,
                  p_in_bias=p_in_bias, g_in_weight=g_in_weight, g_in_bias=g_in_bias, norm_out_weight=norm_out_weight,
                  norm_out_bias=norm_out_bias, p_out_weight=p_out_weight, p_out_bias=p_out_bias,
                  g_out_weight=g_out_weight, g_out_bias=g_out_bias)
    cz = parameters(pair_repr, "pair_repr", params, dict(
        norm_in_weight="cz", norm_in_bias="cz", p_in_weight="2c cz", p_in_bias="2c", g_in_weight="2c cz", g_in_bias="2c",
        norm_out_weight="c", norm_out_bias="c", p_out_weight="cz c", p_out_bias="cz", g_out_weight="cz cz",
        g_out_bias="cz"), optional=("p_in_bias", "g_in_bias", "p_out_bias", "g_out_bias"))["cz"]
    check_last(pair_repr, "pair_repr", "..., N, N", cz, "norm_in_weight")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    z, mask, unbatched = pair_batched(pair_repr, pair_mask)
    weights = cast(params.values(), z.dtype)

    def reference():
        return unbatched(ref.triangle_multiplication_reference(z, mask, *weights, outgoing=outgoing))

    def fused(train):
        nw_in, nb_in, p_in_w, p_in_b, g_in_w, g_in_b, nw_out, nb_out, p_out_w, p_out_b, g_out_w, g_out_b = weights
        joined = trimul.joined_inputs([p_in_w, g_in_w, g_out_w], [p_in_b, g_in_b, g_out_b])
        return unbatched(trimul.triangle_multiplication(z, mask, nw_in, nb_in, *joined, nw_out, nb_out, p_out_w,
                                                        p_out_b, outgoing, precision, chunk_size or 0, train)[0])

    return dispatch("triangle multiplication", z, (z, *weights), impl, reference, fused,
                    "float64" if z.dtype == torch.float64 else None)

"""The MSA's row-wise operations' functional forms: the Outer Product Mean, row attention with pair bias and
pair-weighted averaging (see `evofuse.functional`; the column attentions: `functional.columns`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from .._validation import check_mask, check_msa, check_pair, check_pair_mask, check_shapes, check_width
from ._common import (
    att,
    cast,
    check_heads,
    check_options,
    dispatch,
    folds_leading,
    follows_autocast,
    opm,
    parameters,
    pwa,
)


@follows_autocast
@folds_leading("msa_repr", "msa_mask")
def outer_product_mean(
    msa_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    proj_a_weight: torch.Tensor,
    proj_a_bias: torch.Tensor | None,
    proj_b_weight: torch.Tensor,
    proj_b_bias: torch.Tensor | None,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor,
    *,
    normalization: str = "count_i",
    count_eps: float = ref.COUNT_EPS,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """The Outer Product Mean.

    Args:
        msa_repr: (B, S, N, D) float16, bfloat16, float32 or float64, any strides; any leading dimensions in
            place of B (none: an unbatched (S, N, D)), which every other input and the output share.
        msa_mask: (B, S, N) 0/1 as bool, integer or floating, or None for all ones.
        layer_norm_weight, layer_norm_bias: (D,).
        proj_a_weight, proj_b_weight: (c, D); proj_a_bias, proj_b_bias: (c,), or None for a projection
            without a bias (OpenFold, Protenix, OpenFold3, Boltz).
        out_proj_weight: (pair_dim, c*c), flat index p*c + q; out_proj_bias: (pair_dim,).
        normalization: what the outer products are divided by: "count_i" by max(sum_s mask[s, i], 1) before
            out_proj (the seed module); "count_ij_after" divides out_proj's output, bias included, by
            1e-3 + sum_s mask[s, i] mask[s, j] (AF2, OpenFold, AF3, Protenix); "count_ij" by
            max(sum_s mask[s, i] mask[s, j], 1) before out_proj (Boltz).
        count_eps: what "count_ij_after" adds to the counts (> 0; AF2 1e-3, OpenFold3's model 1e-8).
        precision: "default" (float32 meets rel <= 1e-5) or "fast" (one float16 or TF32 product, rel <= 5e-3).
        impl: "auto", "triton" or "torch"; None follows EVOFUSE_IMPL (default "auto").
    Returns:
        (B, N, N, pair_dim) in msa_repr's dtype; the parameters are cast to it, and 16-bit inputs
        accumulate in float32. The fused kernels take hidden_dim c in (8, 16, 32, 64) and 16/32-bit floats;
        anything else runs the reference, with a one-time warning.
    """
    check_options(precision, normalization)
    if not count_eps > 0:
        raise ValueError(f"count_eps must be > 0, got {count_eps!r}")
    msa_repr = check_msa(msa_repr)
    params = dict(layer_norm_weight=layer_norm_weight, layer_norm_bias=layer_norm_bias, proj_a_weight=proj_a_weight,
                  proj_a_bias=proj_a_bias, proj_b_weight=proj_b_weight, proj_b_bias=proj_b_bias,
                  out_proj_weight=out_proj_weight, out_proj_bias=out_proj_bias)
    sizes = parameters(msa_repr, "msa_repr", params, dict(layer_norm_weight="D", layer_norm_bias="D",
                                                          proj_a_weight="c D", proj_a_bias="c", proj_b_weight="c D",
                                                          proj_b_bias="c"), optional=("proj_a_bias", "proj_b_bias"))
    D, c = sizes["D"], sizes["c"]
    # (out_proj's inputs: the c*c outer products)
    check_shapes(params, dict(out_proj_weight="R cc", out_proj_bias="R"), {"cc": c * c})
    B, S, N = check_width(msa_repr, D, "layer_norm_weight")
    check_mask(msa_mask, B, S, N, msa_repr.device)
    weights = cast(params.values(), msa_repr.dtype)

    def reference():
        return ref.outer_product_mean_reference(msa_repr, msa_mask, *weights, normalization, count_eps)

    def fused(train):
        return opm.outer_product_mean(msa_repr, msa_mask, *weights, normalization, float(count_eps), precision,
                                      train)[0]

    return dispatch("Outer Product Mean", msa_repr, (msa_repr, *weights), impl, reference, fused,
                    None if opm.fused(c, msa_repr.dtype) else f"hidden_dim={c}, dtype={msa_repr.dtype}")


@follows_autocast
@folds_leading("msa_repr", "pair_repr", "msa_mask")
def msa_row_attention(
    msa_repr: torch.Tensor,
    pair_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    query_weight: torch.Tensor,
    query_bias: torch.Tensor | None,
    key_weight: torch.Tensor,
    key_bias: torch.Tensor | None,
    value_weight: torch.Tensor,
    value_bias: torch.Tensor | None,
    gate_weight: torch.Tensor,
    gate_bias: torch.Tensor | None,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor | None,
    pair_bias_weight: torch.Tensor,
    pair_bias_bias: torch.Tensor | None,
    *,
    num_heads: int,
    pair_norm_weight: torch.Tensor | None = None,
    pair_norm_bias: torch.Tensor | None = None,
    mask_mode: str = "replace",
    dropout: float = 0.0,
    training: bool = False,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """MSA row attention with pair bias and gating.

    Args:
        msa_repr: (B, S, N, D) float16, bfloat16, float32 or float64; any leading dimensions in place of B, as
            for `outer_product_mean`.
        pair_repr: (B, N, N, P) real floating.
        msa_mask: (B, S, N) 0/1 as bool, integer or floating, or None; a key j with mask 0 gets the logit
            -1e9 (replaced, not added), so a row whose keys are all masked averages v over all N keys.
        query/key/value/gate weights: (H, D) and out_proj weight (D, H) for an inner width H = num_heads * d
            (D by default; OpenFold: heads x c_hidden), channel = head * d + e; each bias of the layer's output
            width, or None (OpenFold's q, k, v have none).
        pair_bias_weight: (num_heads, P); pair_bias_bias: (num_heads,) or None.
        pair_norm_weight, pair_norm_bias: (P,), a LayerNorm of the pair before its projection (OpenFold's
            layer_norm_z), fused into the projection's kernel; None for none.
        mask_mode: a masked key's logit is -1e9 either way; "replace" (default) gives it no gradient, "add"
            passes the gradient on as OpenFold's float32 `logit + 1e9 * (mask - 1)` does (a row of masked keys
            alone then sends gradient to its q, k and pair bias).
        dropout, training: dropout on the attention weights; in training with dropout > 0 the reference
            runs (with a one-time warning).
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, S, N, D) in msa_repr's dtype; 16-bit inputs accumulate in float32. The fused kernels take
        head_dim <= 128 and 16/32-bit floats; anything else runs the reference, with a one-time warning.
    """
    check_options(precision)
    if mask_mode not in ref.MASK_MODES:
        raise ValueError(f"mask_mode must be one of {ref.MASK_MODES}, got {mask_mode!r}")
    if (pair_norm_weight is None) != (pair_norm_bias is None):
        raise ValueError("pair_norm_weight and pair_norm_bias must be given together")
    msa_repr = check_msa(msa_repr)
    params = dict(layer_norm_weight=layer_norm_weight, layer_norm_bias=layer_norm_bias, query_weight=query_weight,
                  query_bias=query_bias, key_weight=key_weight, key_bias=key_bias, value_weight=value_weight,
                  value_bias=value_bias, gate_weight=gate_weight, gate_bias=gate_bias, out_proj_weight=out_proj_weight,
                  out_proj_bias=out_proj_bias, pair_bias_weight=pair_bias_weight, pair_bias_bias=pair_bias_bias,
                  pair_norm_weight=pair_norm_weight, pair_norm_bias=pair_norm_bias)
    shapes = {f"{name}_{kind}": "H D" if kind == "weight" else "H"
              for name in ("query", "key", "value", "gate") for kind in ("weight", "bias")}
    sizes = parameters(msa_repr, "msa_repr", params, dict(
        layer_norm_weight="D", layer_norm_bias="D", **shapes, out_proj_weight="D H", out_proj_bias="D",
        pair_bias_weight="h P", pair_norm_weight="P", pair_norm_bias="P"),
        optional=("query_bias", "key_bias", "value_bias", "gate_bias", "out_proj_bias", "pair_bias_bias",
                  "pair_norm_weight", "pair_norm_bias"))
    D, H, P = sizes["D"], sizes["H"], sizes["P"]
    check_heads(num_heads, H)
    check_shapes(params, dict(pair_bias_weight="h P", pair_bias_bias="h"), {**sizes, "h": num_heads})
    B, S, N = check_width(msa_repr, D, "layer_norm_weight")
    check_pair(pair_repr, B, N, P, "pair_bias_weight", msa_repr.device)
    check_mask(msa_mask, B, S, N, msa_repr.device)

    dtype = msa_repr.dtype
    pair_repr, *weights = cast([pair_repr, *params.values()], dtype)

    def reference():
        return ref.msa_row_attention_reference(msa_repr, pair_repr, msa_mask, *weights[:-2], num_heads=num_heads,
                                               dropout=dropout, training=training, pair_norm_weight=weights[-2],
                                               pair_norm_bias=weights[-1], mask_mode=mask_mode)

    def fused(train):
        qkvg = att.joined_qkvg(weights[2:10:2], weights[3:10:2])
        return att.row_attention(msa_repr, pair_repr, msa_mask, *weights[:2], *qkvg, *weights[10:], num_heads,
                                 mask_mode, precision, train)[0]

    unsupported = ("attention dropout in training mode" if training and dropout > 0
                   else None if att.fused(H // num_heads, dtype) else f"head_dim={H // num_heads}, dtype={dtype}")
    return dispatch("row attention", msa_repr, (msa_repr, pair_repr, *weights), impl, reference, fused, unsupported)


@follows_autocast
@folds_leading("msa_repr", "pair_repr", "pair_mask")
def pair_weighted_averaging(
    msa_repr: torch.Tensor,
    pair_repr: torch.Tensor,
    pair_mask: torch.Tensor | None,
    norm_m_weight: torch.Tensor,
    norm_m_bias: torch.Tensor,
    norm_z_weight: torch.Tensor,
    norm_z_bias: torch.Tensor,
    proj_m_weight: torch.Tensor,
    proj_g_weight: torch.Tensor,
    proj_z_weight: torch.Tensor,
    proj_o_weight: torch.Tensor,
    *,
    num_heads: int,
    inf: float = ref.PAIR_MASK_INF,
    mask_mode: str = "relative",
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """Pair-weighted averaging, the MSA operation of AF3-family trunks (Boltz's form).

    Args:
        msa_repr: (B, S, N, c_m) float16, bfloat16, float32 or float64; any leading dimensions in place of B,
            as for `outer_product_mean`.
        pair_repr: (B, N, N, c_z) real floating.
        pair_mask: (B, N, N) 0/1 as bool, integer or floating, or None; a masked pair (i, j) gets
            (1 - mask) * -inf added to its weight logit, as Boltz does (so a row of i whose pairs are all
            masked averages with the unmasked softmax of its logits).
        norm_m_weight, norm_m_bias: (c_m,); norm_z_weight, norm_z_bias: (c_z,).
        proj_m_weight, proj_g_weight: (h*c, c_m); proj_z_weight: (h, c_z); proj_o_weight: (c_m, h*c).
        num_heads: h (h*c must divide by it); inf: the mask's magnitude (Boltz's default 1e6; OpenFold3 1e9).
        mask_mode: "relative" (default) evaluates the mask term in exact arithmetic; "add" adds it to the
            logits in float32 as the models do, which in a row of masked pairs alone rounds the logits to inf's
            spacing (uniform weights for inf = 1e9, as OpenFold3 and Boltz compute them).
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, S, N, c_m) in msa_repr's dtype; the parameters and the pair input are cast to it.
    """
    check_options(precision)
    if mask_mode not in ref.PAIR_MASK_MODES:
        raise ValueError(f"mask_mode must be one of {ref.PAIR_MASK_MODES}, got {mask_mode!r}")
    msa_repr = check_msa(msa_repr)
    params = dict(norm_m_weight=norm_m_weight, norm_m_bias=norm_m_bias, norm_z_weight=norm_z_weight,
                  norm_z_bias=norm_z_bias, proj_m_weight=proj_m_weight, proj_g_weight=proj_g_weight,
                  proj_z_weight=proj_z_weight, proj_o_weight=proj_o_weight)
    sizes = parameters(msa_repr, "msa_repr", params, dict(
        norm_m_weight="c_m", norm_m_bias="c_m", norm_z_weight="c_z", norm_z_bias="c_z", proj_m_weight="inner c_m",
        proj_g_weight="inner c_m", proj_o_weight="c_m inner"))
    c_m, c_z, inner = sizes["c_m"], sizes["c_z"], sizes["inner"]
    B, S, N = check_width(msa_repr, c_m, "norm_m_weight")
    check_pair(pair_repr, B, N, c_z, "norm_z_weight", msa_repr.device)
    check_pair_mask(pair_mask, B, N, msa_repr.device)
    check_heads(num_heads, inner, "proj_m's width")
    check_shapes(params, dict(proj_z_weight="h c_z"), {**sizes, "h": num_heads})
    dtype = msa_repr.dtype
    pair_repr, *weights = cast([pair_repr, *params.values()], dtype)

    def reference():
        return ref.pair_weighted_averaging_reference(msa_repr, pair_repr, pair_mask, *weights, num_heads=num_heads,
                                                     inf=inf, mask_mode=mask_mode)

    def fused(train):
        proj_mg = torch.cat(weights[4:6])  # (the op takes proj_m's and proj_g's weights stacked)
        return pwa.pair_weighted_averaging(msa_repr, pair_repr, pair_mask, *weights[:4], proj_mg, *weights[6:],
                                           float(inf), mask_mode, precision, train)[0]

    head = inner // num_heads
    return dispatch("pair-weighted averaging", msa_repr, (msa_repr, pair_repr, *weights), impl, reference, fused,
                    None if pwa.fused(head, c_m, dtype) else f"head width {head}, c_m={c_m}, dtype={dtype}")

"""The MSA's row-wise operations' functional forms: the Outer Product Mean, row attention with pair bias and
pair-weighted averaging (see `evofuse.functional`; the column attentions: `functional.columns`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from ._common import att, opm, pwa
from ._door import POSITIVE, Form, front, one_of


def _pair_norm_together(args: dict) -> None:
    if (args["pair_norm_weight"] is None) != (args["pair_norm_bias"] is None):
        raise ValueError("pair_norm_weight and pair_norm_bias must be given together")


OUTER_PRODUCT_MEAN = Form(
    "Outer Product Mean", "msa", ("msa_repr", "msa_mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D", proj_a_weight="c D", proj_a_bias="c", proj_b_weight="c D",
         proj_b_bias="c", out_proj_weight="R cc", out_proj_bias="R"),
    ref.outer_product_mean_reference,
    lambda a, train: opm.outer_product_mean(
        a.msa_repr, a.msa_mask, a.layer_norm_weight, a.layer_norm_bias, a.proj_a_weight, a.proj_a_bias,
        a.proj_b_weight, a.proj_b_bias, a.out_proj_weight, a.out_proj_bias, a.normalization, float(a.count_eps),
        a.precision, train)[0],
    optional=("proj_a_bias", "proj_b_bias"),
    later=dict(out_proj_weight="R cc", out_proj_bias="R"), letters=lambda sizes: {"cc": sizes["c"] ** 2},
    rules={"normalization": one_of(ref.NORMALIZATIONS), "count_eps": POSITIVE},
    supports=lambda a: None if opm.fused(a.sizes["c"], a.dtype) else f"hidden_dim={a.sizes['c']}, dtype={a.dtype}")

_PROJECTIONS = ("query", "key", "value", "gate")
MSA_ROW_ATTENTION = Form(
    "row attention", "msa", ("msa_repr", "pair_repr", "msa_mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D",
         **{f"{name}_{kind}": "H D" if kind == "weight" else "H" for name in _PROJECTIONS
            for kind in ("weight", "bias")},
         out_proj_weight="D H", out_proj_bias="D", pair_bias_weight="h P", pair_bias_bias="h", pair_norm_weight="P",
         pair_norm_bias="P"),
    ref.msa_row_attention_reference,
    lambda a, train: att.row_attention(
        a.msa_repr, a.pair_repr, a.msa_mask, a.layer_norm_weight, a.layer_norm_bias,
        *att.joined_qkvg([a.query_weight, a.key_weight, a.value_weight, a.gate_weight],
                         [a.query_bias, a.key_bias, a.value_bias, a.gate_bias]),
        a.out_proj_weight, a.out_proj_bias, a.pair_bias_weight, a.pair_bias_bias, a.pair_norm_weight,
        a.pair_norm_bias, a.num_heads, a.mask_mode, a.precision, train)[0],
    optional=("query_bias", "key_bias", "value_bias", "gate_bias", "out_proj_bias", "pair_bias_bias",
              "pair_norm_weight", "pair_norm_bias"),
    pair=("P", "pair_bias_weight"), heads=("H", "the inner width"),
    later=dict(pair_bias_weight="h P", pair_bias_bias="h"),
    rules={"mask_mode": one_of(ref.MASK_MODES)}, check=_pair_norm_together,
    supports=lambda a: ("attention dropout in training mode" if a.training and a.dropout > 0
                        else None if att.fused(a.sizes["H"] // a.num_heads, a.dtype)
                        else f"head_dim={a.sizes['H'] // a.num_heads}, dtype={a.dtype}"))

PAIR_WEIGHTED_AVERAGING = Form(
    "pair-weighted averaging", "msa", ("msa_repr", "pair_repr", "pair_mask"),
    dict(norm_m_weight="c_m", norm_m_bias="c_m", norm_z_weight="c_z", norm_z_bias="c_z", proj_m_weight="inner c_m",
         proj_g_weight="inner c_m", proj_z_weight="h c_z", proj_o_weight="c_m inner"),
    ref.pair_weighted_averaging_reference,
    lambda a, train: pwa.pair_weighted_averaging(
        a.msa_repr, a.pair_repr, a.pair_mask, a.norm_m_weight, a.norm_m_bias, a.norm_z_weight, a.norm_z_bias,
        torch.cat([a.proj_m_weight, a.proj_g_weight]), a.proj_z_weight, a.proj_o_weight, float(a.inf), a.mask_mode,
        a.precision, train)[0],  # (the op takes proj_m's and proj_g's weights stacked)
    width=("c_m", "norm_m_weight"), pair=("c_z", "norm_z_weight"), heads=("inner", "proj_m's width"),
    later=dict(proj_z_weight="h c_z"),
    rules={"mask_mode": one_of(ref.PAIR_MASK_MODES)},
    supports=lambda a: (None if pwa.fused(a.sizes["inner"] // a.num_heads, a.sizes["c_m"], a.dtype)
                        else f"head width {a.sizes['inner'] // a.num_heads}, c_m={a.sizes['c_m']}, dtype={a.dtype}"))


@front(OUTER_PRODUCT_MEAN)
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


@front(MSA_ROW_ATTENTION)
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


@front(PAIR_WEIGHTED_AVERAGING)
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

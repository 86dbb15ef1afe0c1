"""The MSA's column operations' functional forms: column attention and global column attention (see
`evofuse.functional`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from .._dispatch import warn_once
from .._validation import check_mask, check_msa, check_width
from ._common import (
    att,
    cast,
    check_heads,
    check_options,
    col,
    dispatch,
    folds_leading,
    follows_autocast,
    gcol,
    parameters,
)


@follows_autocast
@folds_leading("msa_repr", "msa_mask")
def msa_column_attention(
    msa_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    query_weight: torch.Tensor,
    key_weight: torch.Tensor,
    value_weight: torch.Tensor,
    gate_weight: torch.Tensor,
    gate_bias: torch.Tensor | None,
    out_weight: torch.Tensor,
    out_bias: torch.Tensor | None,
    *,
    num_heads: int,
    inf: float = ref.TRIANGLE_MIN_INF,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """MSA column attention (AF2 Algorithm 8): gated attention over the S MSA rows within each residue's column, no
    pair bias (`evofuse.reference.msa_column_attention_reference` is the definition).

    Args:
        msa_repr: (B, S, N, D) float16, bfloat16, float32 or float64, any strides; any leading dimensions in place
            of B, as for `outer_product_mean`.
        msa_mask: (B, S, N) 0/1 as bool, integer or floating, or None; a masked row s adds inf * (mask - 1) to the
            logits of key s in every column.
        layer_norm_weight, layer_norm_bias: (D,); query_weight, key_weight, value_weight, gate_weight: (h*d, D), q, k
            and v without biases; gate_bias (h*d,) or None; out_weight (D, h*d), out_bias (D,) or None (OpenFold3's
            gate and output have no biases).
        num_heads: h; inf: the mask's magnitude (the models' 1e9; below 1e9 the reference runs, with a one-time
            warning: the kernels' masked logit is -1e9).
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, S, N, D) in msa_repr's dtype; the parameters are cast to it.
    """
    check_options(precision)
    msa_repr = check_msa(msa_repr)
    params = dict(layer_norm_weight=layer_norm_weight, layer_norm_bias=layer_norm_bias, query_weight=query_weight,
                  key_weight=key_weight, value_weight=value_weight, gate_weight=gate_weight, gate_bias=gate_bias,
                  out_weight=out_weight, out_bias=out_bias)
    sizes = parameters(msa_repr, "msa_repr", params, dict(
        layer_norm_weight="D", layer_norm_bias="D", query_weight="H D", key_weight="H D", value_weight="H D",
        gate_weight="H D", gate_bias="H", out_weight="D H", out_bias="D"), optional=("gate_bias", "out_bias"))
    D, H = sizes["D"], sizes["H"]
    check_heads(num_heads, H)
    B, S, N = check_width(msa_repr, D, "layer_norm_weight")
    check_mask(msa_mask, B, S, N, msa_repr.device)
    if inf < ref.TRIANGLE_MIN_INF and msa_mask is not None and impl != "torch":
        warn_once(f"col-inf-{inf}", f"evofuse: column attention with inf={inf} runs the PyTorch reference (the "
                  f"kernels' masked logit is -1e9, equal for inf >= {ref.TRIANGLE_MIN_INF:g})")
        impl = "torch"
    weights = cast(params.values(), msa_repr.dtype)

    def reference():
        return ref.msa_column_attention_reference(msa_repr, msa_mask, *weights, num_heads=num_heads, inf=inf)

    def fused(train):
        lnw, lnb, wq, wk, wv, wg, bg, wo, bo = weights
        x = msa_repr.transpose(1, 2)  # (B, N, S, D): each residue's column a row (a view: the kernels take strides)
        mask = None if msa_mask is None else msa_mask.transpose(1, 2)
        qkvg = att.joined_qkvg([wq, wk, wv, wg], [None, None, None, bg])
        return col.msa_column_attention(x, mask, lnw, lnb, *qkvg, wo, bo, num_heads, precision, train)[0].transpose(1, 2)

    head, dtype = H // num_heads, msa_repr.dtype
    return dispatch("column attention", msa_repr, (msa_repr, *weights), impl, reference, fused,
                    None if att.fused(head, dtype) else f"head_dim={head}, dtype={dtype}")


@follows_autocast
@folds_leading("msa_repr", "msa_mask")
def msa_column_global_attention(
    msa_repr: torch.Tensor,
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
    out_weight: torch.Tensor,
    out_bias: torch.Tensor | None,
    *,
    num_heads: int,
    inf: float = 1e9,
    eps: float = ref.GLOBAL_COUNT_EPS,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """MSA global column attention (AF2 Algorithm 19, the extra-MSA stack's): in each residue's column one query a
    head from the masked mean of the rows, keys and values shared by the heads, each row's output gated
    (`evofuse.reference.msa_column_global_attention_reference` is the definition).

    Args:
        msa_repr: (B, S, N, D) float16, bfloat16, float32 or float64, any strides; any leading dimensions in place
            of B, as for `outer_product_mean`.
        msa_mask: (B, S, N) 0/1 as bool, integer or floating, or None; a masked row s is left out of its column's mean
            and adds inf * (mask - 1) to its logit.
        layer_norm_weight, layer_norm_bias: (D,); query_weight, gate_weight: (h*d, D); key_weight, value_weight: (d, D);
            out_weight (D, h*d); each bias of its layer's output width, or None (OpenFold: the gate's and the
            output's alone).
        num_heads: h; inf: the mask's magnitude (1e9); eps: what the mean's count gets added (OpenFold's module 1e-10,
            its model config 1e-8).
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, S, N, D) in msa_repr's dtype; the parameters are cast to it.
    """
    check_options(precision)
    msa_repr = check_msa(msa_repr)
    params = dict(layer_norm_weight=layer_norm_weight, layer_norm_bias=layer_norm_bias, query_weight=query_weight,
                  query_bias=query_bias, key_weight=key_weight, key_bias=key_bias, value_weight=value_weight,
                  value_bias=value_bias, gate_weight=gate_weight, gate_bias=gate_bias, out_weight=out_weight,
                  out_bias=out_bias)
    sizes = parameters(msa_repr, "msa_repr", params, dict(
        layer_norm_weight="D", layer_norm_bias="D", query_weight="H D", query_bias="H", key_weight="d D",
        key_bias="d", value_weight="d D", value_bias="d", gate_weight="H D", gate_bias="H", out_weight="D H",
        out_bias="D"), optional=("query_bias", "key_bias", "value_bias", "gate_bias", "out_bias"))
    D, H, d = sizes["D"], sizes["H"], sizes["d"]
    if not isinstance(num_heads, int) or num_heads < 1 or H != num_heads * d:
        raise ValueError(f"num_heads must be a positive integer with num_heads * {d} (the key's width) = {H} (the "
                         f"query's), got {num_heads!r}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    B, S, N = check_width(msa_repr, D, "layer_norm_weight")
    check_mask(msa_mask, B, S, N, msa_repr.device)
    weights = cast(params.values(), msa_repr.dtype)

    def reference():
        return ref.msa_column_global_attention_reference(msa_repr, msa_mask, *weights, num_heads=num_heads, inf=inf,
                                                         eps=eps)

    def fused(train):
        lnw, lnb, wq, bq, wk, bk, wv, bv, wg, bg, wo, bo = weights
        x = msa_repr.transpose(1, 2)  # (B, N, S, D): each residue's column a row (a view: the kernels take strides)
        mask = None if msa_mask is None else msa_mask.transpose(1, 2)
        proj_weight = torch.cat([wg, wq, wk, wv])  # (the op projects every row's gate, query, key and value at once)
        proj_bias = gcol.joined_bias([bg, None, bk, bv], [wg, wq, wk, wv])  # (the queries' bias after their mean)
        return gcol.msa_column_global_attention(x, mask, lnw, lnb, proj_weight, proj_bias, bq, wo, bo, num_heads,
                                                float(inf), float(eps), precision, train)[0].transpose(1, 2)

    return dispatch("global column attention", msa_repr, (msa_repr, *weights), impl, reference, fused,
                    "float64" if msa_repr.dtype == torch.float64 else None)

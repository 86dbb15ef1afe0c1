"""The MSA's column operations' functional forms: column attention and global column attention (see
`evofuse.functional`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from ._common import att, col, gcol
from ._door import POSITIVE, Form, front, masked_inf


def _columns(a) -> tuple:
    """(x, mask): each residue's column a row, (B, N, S, D) and (B, N, S) (views: the kernels take strides)."""
    return a.msa_repr.transpose(1, 2), None if a.msa_mask is None else a.msa_mask.transpose(1, 2)


def _column_attention(a, train):
    qkvg = att.joined_qkvg([a.query_weight, a.key_weight, a.value_weight, a.gate_weight], [None, None, None, a.gate_bias])
    return col.msa_column_attention(*_columns(a), a.layer_norm_weight, a.layer_norm_bias, *qkvg, a.out_weight,
                                    a.out_bias, a.num_heads, a.precision, train)[0].transpose(1, 2)


MSA_COLUMN_ATTENTION = Form(
    "column attention", "msa", ("msa_repr", "msa_mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D", query_weight="H D", key_weight="H D", value_weight="H D",
         gate_weight="H D", gate_bias="H", out_weight="D H", out_bias="D"),
    ref.msa_column_attention_reference, _column_attention, optional=("gate_bias", "out_bias"),
    heads=("H", "the inner width"),
    supports=lambda a: masked_inf(a.inf, a.msa_mask) or (None if att.fused(a.sizes["H"] // a.num_heads, a.dtype)
                                          else f"head_dim={a.sizes['H'] // a.num_heads}, dtype={a.dtype}"))


def _global_heads(args: dict, sizes: dict) -> None:
    H, d, num_heads = sizes["H"], sizes["d"], args["num_heads"]
    if not isinstance(num_heads, int) or num_heads < 1 or H != num_heads * d:
        raise ValueError(f"num_heads must be a positive integer with num_heads * {d} (the key's width) = {H} (the "
                         f"query's), got {num_heads!r}")


def _global_attention(a, train):
    projections = [a.gate_weight, a.query_weight, a.key_weight, a.value_weight]
    proj_weight = torch.cat(projections)  # (the op projects every row's gate, query, key and value at once)
    proj_bias = gcol.joined_bias([a.gate_bias, None, a.key_bias, a.value_bias], projections)  # (q's after the mean)
    return gcol.msa_column_global_attention(
        *_columns(a), a.layer_norm_weight, a.layer_norm_bias, proj_weight, proj_bias, a.query_bias, a.out_weight,
        a.out_bias, a.num_heads, float(a.inf), float(a.eps), a.precision, train)[0].transpose(1, 2)


MSA_COLUMN_GLOBAL_ATTENTION = Form(
    "global column attention", "msa", ("msa_repr", "msa_mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D", query_weight="H D", query_bias="H", key_weight="d D",
         key_bias="d", value_weight="d D", value_bias="d", gate_weight="H D", gate_bias="H", out_weight="D H",
         out_bias="D"),
    ref.msa_column_global_attention_reference, _global_attention,
    optional=("query_bias", "key_bias", "value_bias", "gate_bias", "out_bias"), rules={"eps": POSITIVE},
    checked=_global_heads, supports=lambda a: "float64" if a.dtype == torch.float64 else None)


@front(MSA_COLUMN_ATTENTION)
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


@front(MSA_COLUMN_GLOBAL_ATTENTION)
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

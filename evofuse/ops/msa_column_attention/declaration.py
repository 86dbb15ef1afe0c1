"""MSA column attention: its declaration, read top-down: the functional form (its `Form`, which the front door
reads, and its documented signature), the module (the models' parameter names) and its registry entry (`OPERATION`:
the suite's cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ...front.common import columns
from ...front.declaration import GATED, Case, Operation, heads
from ...front.door import Form, front, masked_inf
from ...front.parts import GatedAttention, check_options

if triton_available():  # the kernels (without Triton every call takes the reference)
    from ...stages.attention.core import fused
    from ..row_attention.op import joined_qkvg
    from . import op
else:
    op = fused = joined_qkvg = None


def _column_attention(a, train):
    qkvg = joined_qkvg([a.query_weight, a.key_weight, a.value_weight, a.gate_weight], [None, None, None, a.gate_bias])
    return op.msa_column_attention(*columns(a.msa_repr, a.msa_mask), a.layer_norm_weight, a.layer_norm_bias, *qkvg, a.out_weight,
                                   a.out_bias, a.num_heads, a.precision, train)[0].transpose(1, 2)


MSA_COLUMN_ATTENTION = Form(
    "column attention", "msa", ("msa_repr", "msa_mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D", query_weight="H D", key_weight="H D", value_weight="H D",
         gate_weight="H D", gate_bias="H", out_weight="D H", out_bias="D"),
    ref.msa_column_attention_reference, _column_attention, optional=("gate_bias", "out_bias"),
    heads=("H", "the inner width"),
    supports=lambda a: masked_inf(a.inf, a.msa_mask) or (
        None if fused(a.sizes["H"] // a.num_heads, a.dtype) else f"head_dim={a.sizes['H'] // a.num_heads}, dtype={a.dtype}"))


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


class _MSAAttentionParts(nn.Module):
    """The parameters of OpenFold's MSAAttention without pair bias, under its names: layer_norm_m and mha."""

    def __init__(self, c_m: int, c_hidden: int, no_heads: int, bias: bool):
        super().__init__()
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.mha = GatedAttention(c_m, c_hidden, no_heads, bias)


class MSAColumnAttention(nn.Module):
    """MSA column attention (AF2 Algorithm 8): (B, S, N, c_m) -> (B, S, N, c_m), attention over the MSA rows within
    each residue's column. OpenFold's constructor and parameter names (`_msa_att.layer_norm_m`,
    `_msa_att.mha.linear_{q,k,v,g,o}`), so an OpenFold or OpenFold3 state_dict of the module loads unchanged.

    Args:
        c_m, c_hidden, no_heads: the MSA's width, a head's width and the heads; inf: the mask's magnitude (1e9).
        gate_and_output_bias: whether mha.linear_g and mha.linear_o have biases (OpenFold's do; OpenFold3's do not).
        precision, impl: as for OuterProductMean.

    forward(m (B, S, N, c_m), mask (B, S, N) or None, chunk_size=None, ...) returns (B, S, N, c_m) in m's dtype (any
    leading dimensions in place of B); the models' chunking and kernel switches are accepted and change nothing.
    """

    def __init__(self, c_m: int, c_hidden: int, no_heads: int, inf: float = 1e9, gate_and_output_bias: bool = True,
                 precision: str = "default", impl: str | None = None):
        super().__init__()
        if not isinstance(no_heads, int) or no_heads < 1:
            raise ValueError(f"no_heads must be a positive integer, got {no_heads!r}")
        check_options(precision, impl)
        self.c_m, self.c_hidden, self.no_heads, self.inf = c_m, c_hidden, no_heads, inf
        self._msa_att = _MSAAttentionParts(c_m, c_hidden, no_heads, gate_and_output_bias)
        self.precision = precision
        self.impl = impl

    def forward(self, m: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None, *,
                impl: str | None = None, **switches) -> torch.Tensor:
        parts = self._msa_att
        mha = parts.mha
        return msa_column_attention(
            m, mask, **MSA_COLUMN_ATTENTION.weights(layer_norm=parts.layer_norm_m, query=mha.linear_q,
                                                    key=mha.linear_k, value=mha.linear_v, gate=mha.linear_g,
                                                    out=mha.linear_o),
            num_heads=self.no_heads, inf=self.inf, precision=self.precision,
            impl=impl if impl is not None else self.impl)


OPERATION = Operation(
    "col", lambda c, **kw: MSAColumnAttention(c.D, c.head, c.width, **kw), "_msa_att.layer_norm_m",
    ("_msa_att.layer_norm_m.weight", "_msa_att.layer_norm_m.bias",
     *(f"_msa_att.{path}" for path in GATED)), ref.msa_column_attention_reference, heads, "msa", "residue",
    lambda c: 2.0 * c.B * (c.S * c.N * c.D * 5 * c.width * c.head + 2 * c.N * c.S ** 2 * c.width * c.head),
    lambda c: c.B * c.N * c.width * c.S ** 2 * 8,  # (the weights of each column, (B, N, h, S, S))
    (Case("col-seed", "col", 2, 8, 32, 64, 0, 4, 16), Case("col-af2", "col", 1, 512, 384, 256, 0, 8, 32)))

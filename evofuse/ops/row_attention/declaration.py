"""MSA row attention with pair bias: its declaration, read top-down: the functional form (its `Form`, which the
front door reads, and its documented signature), the module (the models' parameter names) and its registry entry
(`OPERATION`: the suite's cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ...front.declaration import Case, Operation, attention_bytes, heads, linears
from ...front.door import Form, front, one_of
from ...front.parts import check_options
from ...reference import MASK_MODES

if triton_available():  # the kernels (without Triton every call takes the reference)
    from ...stages.attention.core import fused
    from . import op
else:
    op = fused = None


def _pair_norm_together(args: dict) -> None:
    if (args["pair_norm_weight"] is None) != (args["pair_norm_bias"] is None):
        raise ValueError("pair_norm_weight and pair_norm_bias must be given together")


_PROJECTIONS = ("query", "key", "value", "gate")


MSA_ROW_ATTENTION = Form(
    "row attention", "msa", ("msa_repr", "pair_repr", "msa_mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D",
         **{f"{name}_{kind}": "H D" if kind == "weight" else "H" for name in _PROJECTIONS
            for kind in ("weight", "bias")},
         out_proj_weight="D H", out_proj_bias="D", pair_bias_weight="h P", pair_bias_bias="h", pair_norm_weight="P",
         pair_norm_bias="P"),
    ref.msa_row_attention_reference,
    lambda a, train: op.row_attention(
        a.msa_repr, a.pair_repr, a.msa_mask, a.layer_norm_weight, a.layer_norm_bias,
        *op.joined_qkvg([a.query_weight, a.key_weight, a.value_weight, a.gate_weight],
                        [a.query_bias, a.key_bias, a.value_bias, a.gate_bias]),
        a.out_proj_weight, a.out_proj_bias, a.pair_bias_weight, a.pair_bias_bias, a.pair_norm_weight,
        a.pair_norm_bias, a.num_heads, a.mask_mode, a.precision, train)[0],
    optional=("query_bias", "key_bias", "value_bias", "gate_bias", "out_proj_bias", "pair_bias_bias",
              "pair_norm_weight", "pair_norm_bias"),
    pair=("P", "pair_bias_weight"), heads=("H", "the inner width"),
    later=dict(pair_bias_weight="h P", pair_bias_bias="h"),
    rules={"mask_mode": one_of(ref.MASK_MODES)}, check=_pair_norm_together,
    supports=lambda a: ("attention dropout in training mode" if a.training and a.dropout > 0
                        else None if fused(a.sizes["H"] // a.num_heads, a.dtype)
                        else f"head_dim={a.sizes['H'] // a.num_heads}, dtype={a.dtype}"))


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


class MSARowAttentionWithPairBias(nn.Module):
    """MSA row attention with pair bias and gating: (B, S, N, D) -> (B, S, N, D).

    Args:
        msa_dim, pair_dim, num_heads: D, P and h.
        head_dim: d, the width of a head (default D // h, D must divide); the inner width is h * d.
        qkv_bias: whether query, key and value have biases (OpenFold's have none).
        pair_layer_norm: a LayerNorm of the pair before `pair_bias` (`pair_norm`, as OpenFold's layer_norm_z).
        mask_mode: "replace" (masked keys' logits -1e9 without gradient) or "add" (OpenFold's additive mask:
            the same forward, the gradient passed on); see `evofuse.msa_row_attention`.
        dropout: on the attention probabilities in training mode.
        precision, impl: as for OuterProductMean.

    forward(msa_repr (B, S, N, D), pair_repr (B, N, N, P), msa_mask (B, S, N) or None) returns
    (B, S, N, D) in msa_repr's dtype; any leading dimensions (none included) in place of B.
    """

    def __init__(self, msa_dim: int, pair_dim: int, num_heads: int = 4, dropout: float = 0.0,
                 precision: str = "default", impl: str | None = None, head_dim: int | None = None,
                 qkv_bias: bool = True, pair_layer_norm: bool = False, mask_mode: str = "replace"):
        super().__init__()
        if head_dim is None and (num_heads < 1 or msa_dim % num_heads != 0):
            raise ValueError(f"msa_dim={msa_dim} must be divisible by num_heads={num_heads}")
        check_options(precision, impl, mask_mode, MASK_MODES)
        self.num_heads = num_heads
        self.head_dim = msa_dim // num_heads if head_dim is None else head_dim
        inner = num_heads * self.head_dim
        self.layer_norm = nn.LayerNorm(msa_dim)
        self.query = nn.Linear(msa_dim, inner, bias=qkv_bias)
        self.key = nn.Linear(msa_dim, inner, bias=qkv_bias)
        self.value = nn.Linear(msa_dim, inner, bias=qkv_bias)
        self.gate = nn.Linear(msa_dim, inner)
        self.out_proj = nn.Linear(inner, msa_dim)
        self.pair_norm = nn.LayerNorm(pair_dim) if pair_layer_norm else None
        self.pair_bias = nn.Linear(pair_dim, num_heads)
        self.mask_mode = mask_mode
        self.dropout = nn.Dropout(dropout)
        self.precision = precision
        self.impl = impl

    def forward(self, msa_repr: torch.Tensor, pair_repr: torch.Tensor, msa_mask: torch.Tensor | None = None,
                *, impl: str | None = None) -> torch.Tensor:
        return msa_row_attention(
            msa_repr, pair_repr, msa_mask, **MSA_ROW_ATTENTION.weights(
                layer_norm=self.layer_norm, query=self.query, key=self.key, value=self.value, gate=self.gate,
                out_proj=self.out_proj, pair_bias=self.pair_bias, pair_norm=self.pair_norm),
            num_heads=self.num_heads, mask_mode=self.mask_mode, dropout=self.dropout.p,
            training=self.training, precision=self.precision, impl=impl if impl is not None else self.impl)


OPERATION = Operation(
    "att", lambda c, **kw: MSARowAttentionWithPairBias(c.D, c.pair, c.width, **kw), "layer_norm",
    linears("layer_norm", "query", "key", "value", "gate", "out_proj", "pair_bias"),
    ref.msa_row_attention_reference, heads, "msa_pair", "row",
    lambda c: 2.0 * c.B * (c.S * c.N * c.D * 5 * c.D + 2 * c.S * c.N ** 2 * c.D + c.N ** 2 * c.pair * c.width),
    attention_bytes,
    (Case("att-seed", "att", 2, 8, 32, 64, 64, 4), Case("att-af2-main", "att", 1, 512, 384, 256, 128, 8),
     Case("att-long", "att", 1, 128, 1024, 256, 128, 8)),
    ((1, 33, 129, 256, 128, 8), (3, 5, 97, 96, 24, 3), (1, 16, 200, 256, 64, 4), (1, 4, 4096, 64, 32, 4),
     (2, 1, 1, 16, 8, 1), (1, 128, 64, 24, 16, 8), (1, 2048, 32, 64, 16, 8), (2, 64, 256, 128, 64, 2)))

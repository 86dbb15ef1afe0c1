"""The MSA's row-wise modules: the Outer Product Mean, row attention with pair bias, pair-weighted averaging."""

from __future__ import annotations

import torch
from torch import nn

from .. import functional
from ..reference import COUNT_EPS, MASK_MODES, NORMALIZATIONS, PAIR_MASK_MODES
from ._common import check_options, linear_params

_OPM_LINEARS = ("layer_norm", "proj_a", "proj_b", "out_proj")
_ATT_LINEARS = ("layer_norm", "query", "key", "value", "gate", "out_proj", "pair_bias")


class OuterProductMean(nn.Module):
    """Outer Product Mean: (B, S, N, msa_dim) MSA -> (B, N, N, pair_dim) pair update.

    Args:
        msa_dim, pair_dim, hidden_dim: D, the output width and c.
        normalization: "count_i" (default: divide by the rows where residue i is unmasked), "count_ij_after"
            (AF2/OpenFold/AF3/Protenix/FastFold: divide out_proj's output by 1e-3 + the rows where i and j
            both are) or "count_ij" (Boltz: divide by the rows where i and j both are, before out_proj).
        count_eps: what "count_ij_after" adds to the counts (AF2 1e-3; OpenFold3's model 1e-8).
        projection_bias: whether proj_a and proj_b have biases (OpenFold, AF3, Protenix, Boltz: none).
        precision: "default" (float32 inputs meet rel <= 1e-5) or "fast" (one float16 or TF32 product, rel <= 5e-3).
        impl: "auto", "triton" or "torch"; None follows EVOFUSE_IMPL (default auto).

    forward(msa_repr (B, S, N, D) float, msa_mask (B, S, N) 0/1 or None) returns
    (B, N, N, pair_dim) in msa_repr's dtype; any leading dimensions (none included) in place of B.
    """

    def __init__(self, msa_dim: int, pair_dim: int, hidden_dim: int = 32, normalization: str = "count_i",
                 count_eps: float = COUNT_EPS, projection_bias: bool = True, precision: str = "default",
                 impl: str | None = None):
        super().__init__()
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        if not count_eps > 0:
            raise ValueError(f"count_eps must be > 0, got {count_eps!r}")
        check_options(precision, impl)
        self.layer_norm = nn.LayerNorm(msa_dim)
        self.proj_a = nn.Linear(msa_dim, hidden_dim, bias=projection_bias)
        self.proj_b = nn.Linear(msa_dim, hidden_dim, bias=projection_bias)
        self.out_proj = nn.Linear(hidden_dim * hidden_dim, pair_dim)
        self.hidden_dim = hidden_dim
        self.normalization = normalization
        self.count_eps = count_eps
        self.precision = precision
        self.impl = impl

    def forward(self, msa_repr: torch.Tensor, msa_mask: torch.Tensor | None = None, *,
                impl: str | None = None) -> torch.Tensor:
        return functional.outer_product_mean(
            msa_repr, msa_mask, *linear_params(self, _OPM_LINEARS), normalization=self.normalization,
            count_eps=self.count_eps, precision=self.precision, impl=impl if impl is not None else self.impl)


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
        pair_norm = (None, None) if self.pair_norm is None else (self.pair_norm.weight, self.pair_norm.bias)
        return functional.msa_row_attention(
            msa_repr, pair_repr, msa_mask, *linear_params(self, _ATT_LINEARS), num_heads=self.num_heads,
            pair_norm_weight=pair_norm[0], pair_norm_bias=pair_norm[1], mask_mode=self.mask_mode, dropout=self.dropout.p,
            training=self.training, precision=self.precision, impl=impl if impl is not None else self.impl)


class PairWeightedAveraging(nn.Module):
    """Pair-weighted averaging (AF3, Boltz-1/2, Protenix, OpenFold3): (B, S, N, c_m) MSA and (B, N, N, c_z)
    pair -> (B, S, N, c_m). Boltz's constructor and parameter names (`norm_m`, `norm_z`, `proj_m`, `proj_g`,
    `proj_z`, `proj_o`, no biases; proj_o starts at zero), so a Boltz state_dict loads unchanged.

    Args:
        c_m, c_z, c_h, num_heads: the MSA and pair widths, the width of a head and the heads.
        inf: the pair mask's magnitude (a masked pair's logit gets (1 - mask) * -inf).
        mask_mode: "relative" (exact arithmetic) or "add" (float32, as the models); see
            `evofuse.pair_weighted_averaging`.
        precision, impl: as for OuterProductMean.

    forward(m (B, S, N, c_m), z (B, N, N, c_z), mask (B, N, N) or None, chunk_heads=False) returns
    (B, S, N, c_m) in m's dtype (any leading dimensions in place of B); chunk_heads (Boltz's memory option) is
    accepted and changes nothing.
    """

    def __init__(self, c_m: int, c_z: int, c_h: int, num_heads: int, inf: float = 1e6, precision: str = "default",
                 impl: str | None = None, mask_mode: str = "relative"):
        super().__init__()
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
        check_options(precision, impl, mask_mode, PAIR_MASK_MODES)
        self.c_m, self.c_z, self.c_h, self.num_heads, self.inf = c_m, c_z, c_h, num_heads, inf
        self.mask_mode = mask_mode
        self.norm_m = nn.LayerNorm(c_m)
        self.norm_z = nn.LayerNorm(c_z)
        self.proj_m = nn.Linear(c_m, c_h * num_heads, bias=False)
        self.proj_g = nn.Linear(c_m, c_h * num_heads, bias=False)
        self.proj_z = nn.Linear(c_z, num_heads, bias=False)
        self.proj_o = nn.Linear(c_h * num_heads, c_m, bias=False)
        with torch.no_grad():
            self.proj_o.weight.zero_()
        self.precision = precision
        self.impl = impl

    def forward(self, m: torch.Tensor, z: torch.Tensor, mask: torch.Tensor | None = None, chunk_heads: bool = False,
                *, impl: str | None = None) -> torch.Tensor:
        return functional.pair_weighted_averaging(
            m, z, mask, self.norm_m.weight, self.norm_m.bias, self.norm_z.weight, self.norm_z.bias,
            self.proj_m.weight, self.proj_g.weight, self.proj_z.weight, self.proj_o.weight, num_heads=self.num_heads,
            inf=self.inf, mask_mode=self.mask_mode, precision=self.precision,
            impl=impl if impl is not None else self.impl)

"""The MSA's column modules: column attention and global column attention (OpenFold's names)."""

from __future__ import annotations

import torch
from torch import nn

from .. import functional
from ..reference import GLOBAL_COUNT_EPS
from ._common import GatedAttention, check_options, linear_params


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
        return functional.msa_column_attention(
            m, mask, parts.layer_norm_m.weight, parts.layer_norm_m.bias, mha.linear_q.weight, mha.linear_k.weight,
            mha.linear_v.weight, mha.linear_g.weight, mha.linear_g.bias, mha.linear_o.weight, mha.linear_o.bias,
            num_heads=self.no_heads, inf=self.inf, precision=self.precision,
            impl=impl if impl is not None else self.impl)


class _GlobalAttentionParts(nn.Module):
    """The projections of OpenFold's `GlobalAttention`, under its names: linear_q (h*d), linear_k and linear_v (one
    head's width d, shared by the heads), linear_g and linear_o."""

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, bias: bool):
        super().__init__()
        inner = c_hidden * no_heads
        self.linear_q = nn.Linear(c_in, inner, bias=False)
        self.linear_k = nn.Linear(c_in, c_hidden, bias=False)
        self.linear_v = nn.Linear(c_in, c_hidden, bias=False)
        self.linear_g = nn.Linear(c_in, inner, bias=bias)
        self.linear_o = nn.Linear(inner, c_in, bias=bias)


class MSAColumnGlobalAttention(nn.Module):
    """MSA global column attention (AF2 Algorithm 19, the extra-MSA stack's): (B, S, N, c_in) -> (B, S, N, c_in), one
    query a head and column from the masked mean of its rows. OpenFold's constructor and parameter names
    (`layer_norm_m`, `global_attention.linear_{q,k,v,g,o}`), so an OpenFold or OpenFold3 state_dict of the module loads
    unchanged.

    Args:
        c_in, c_hidden, no_heads: the MSA's width, a head's width and the heads; inf: the mask's magnitude (1e9); eps:
            what the mean's count gets added (OpenFold's default 1e-10; its model config 1e-8).
        gate_and_output_bias: whether linear_g and linear_o have biases (OpenFold's do).
        precision, impl: as for OuterProductMean.

    forward(m (B, S, N, c_in), mask (B, S, N) or None, chunk_size=None, ...) returns (B, S, N, c_in) in m's dtype (any
    leading dimensions in place of B); the models' chunking and kernel switches are accepted and change nothing.
    """

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, inf: float = 1e9, eps: float = GLOBAL_COUNT_EPS,
                 gate_and_output_bias: bool = True, precision: str = "default", impl: str | None = None):
        super().__init__()
        if not isinstance(no_heads, int) or no_heads < 1:
            raise ValueError(f"no_heads must be a positive integer, got {no_heads!r}")
        check_options(precision, impl)
        self.c_in, self.c_hidden, self.no_heads, self.inf, self.eps = c_in, c_hidden, no_heads, inf, eps
        self.layer_norm_m = nn.LayerNorm(c_in)
        self.global_attention = _GlobalAttentionParts(c_in, c_hidden, no_heads, gate_and_output_bias)
        self.precision = precision
        self.impl = impl

    def forward(self, m: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None, *,
                impl: str | None = None, **switches) -> torch.Tensor:
        att = self.global_attention
        return functional.msa_column_global_attention(
            m, mask, self.layer_norm_m.weight, self.layer_norm_m.bias,
            *linear_params(att, ("linear_q", "linear_k", "linear_v", "linear_g", "linear_o")),
            num_heads=self.no_heads, inf=self.inf, eps=self.eps, precision=self.precision,
            impl=impl if impl is not None else self.impl)

"""The pair stack's modules: triangle attention (OpenFold's names) and triangle multiplication (Boltz-2's)."""

from __future__ import annotations

import torch
from torch import nn

from .. import functional
from ._common import GatedAttention, check_options


class TriangleAttention(nn.Module):
    """Triangle attention around the starting node (AF2 Algorithm 13) or the ending node (14): (B, N, N, c_in) pair
    -> (B, N, N, c_in). OpenFold's constructor and parameter names (`layer_norm`, `linear` (the triangle bias, no
    bias), `mha.linear_{q,k,v,g,o}`), so an OpenFold or Boltz state_dict of the module loads unchanged.

    Args:
        c_in, c_hidden, no_heads: the pair's width, a head's width and the heads.
        starting: the starting node (else the ending node); inf: the mask's magnitude (the models' 1e9).
        gate_and_output_bias: whether mha.linear_g and mha.linear_o have biases (OpenFold's do; Boltz's do not).
        precision, impl: as for OuterProductMean.

    forward(x (B, N, N, c_in), mask (B, N, N) or None, chunk_size=None, *, transpose_bias=False, ...) returns
    (B, N, N, c_in) in x's dtype (any leading dimensions in place of B; transpose_bias as for
    `evofuse.triangle_attention`, OpenFold3's flag); the models' chunking and kernel switches (`chunk_size`,
    `use_memory_efficient_kernel`, `use_deepspeed_evo_attention`, `use_lma`, `inplace_safe`, `use_kernels`, ...) are
    accepted and change nothing: an inference call takes its rows in chunks where the device's free memory asks for
    it (`evofuse.triangle_attention`'s chunk_size).
    """

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, starting: bool = True, inf: float = 1e9,
                 gate_and_output_bias: bool = True, precision: str = "default", impl: str | None = None):
        super().__init__()
        if not isinstance(no_heads, int) or no_heads < 1:
            raise ValueError(f"no_heads must be a positive integer, got {no_heads!r}")
        check_options(precision, impl)
        self.c_in, self.c_hidden, self.no_heads, self.starting, self.inf = c_in, c_hidden, no_heads, starting, inf
        self.layer_norm = nn.LayerNorm(c_in)
        self.linear = nn.Linear(c_in, no_heads, bias=False)
        self.mha = GatedAttention(c_in, c_hidden, no_heads, gate_and_output_bias)
        self.precision = precision
        self.impl = impl

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None, *,
                transpose_bias: bool = False, impl: str | None = None, **switches) -> torch.Tensor:
        mha = self.mha
        return functional.triangle_attention(
            x, mask, self.layer_norm.weight, self.layer_norm.bias, self.linear.weight, mha.linear_q.weight,
            mha.linear_k.weight, mha.linear_v.weight, mha.linear_g.weight, mha.linear_g.bias, mha.linear_o.weight,
            mha.linear_o.bias, num_heads=self.no_heads, starting=self.starting, transpose_bias=transpose_bias,
            inf=self.inf, precision=self.precision, impl=impl if impl is not None else self.impl)


class TriangleMultiplication(nn.Module):
    """The triangle multiplicative update, outgoing (AF2 Algorithm 11) or incoming (12): (B, N, N, c_z) pair ->
    (B, N, N, c_z). Boltz-2's parameter names (`norm_in`, `p_in` and `g_in` of width 2c, a's rows then b's,
    `norm_out`, `p_out`, `g_out`), so a Boltz-2 state_dict of the module loads unchanged; OpenFold's separate
    projections are these stacked (`evofuse.integrations`).

    Args:
        c_z, c_hidden: the pair's width and a and b's (default c_z, as Boltz-2 and AF3).
        outgoing: the outgoing edges (else incoming); bias: whether the projections have biases (OpenFold's do;
            Boltz's and AF3's do not).
        precision, impl: as for OuterProductMean.

    forward(x (B, N, N, c_z), mask (B, N, N) or None, ...) returns (B, N, N, c_z) in x's dtype (any leading
    dimensions in place of B); the models' switches (`use_kernels`, `inplace_safe`, ...) are accepted and change
    nothing.
    """

    def __init__(self, c_z: int, c_hidden: int | None = None, outgoing: bool = True, bias: bool = False,
                 precision: str = "default", impl: str | None = None):
        super().__init__()
        check_options(precision, impl)
        c = c_z if c_hidden is None else c_hidden
        if not isinstance(c, int) or c < 1:
            raise ValueError(f"c_hidden must be a positive integer, got {c_hidden!r}")
        self.c_z, self.c_hidden, self.outgoing = c_z, c, outgoing
        self.norm_in = nn.LayerNorm(c_z)
        self.p_in = nn.Linear(c_z, 2 * c, bias=bias)
        self.g_in = nn.Linear(c_z, 2 * c, bias=bias)
        self.norm_out = nn.LayerNorm(c)
        self.p_out = nn.Linear(c, c_z, bias=bias)
        self.g_out = nn.Linear(c_z, c_z, bias=bias)
        self.precision = precision
        self.impl = impl

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, impl: str | None = None,
                **switches) -> torch.Tensor:
        return functional.triangle_multiplication(
            x, mask, self.norm_in.weight, self.norm_in.bias, self.p_in.weight, self.p_in.bias, self.g_in.weight,
            self.g_in.bias, self.norm_out.weight, self.norm_out.bias, self.p_out.weight, self.p_out.bias,
            self.g_out.weight, self.g_out.bias, outgoing=self.outgoing, precision=self.precision,
            impl=impl if impl is not None else self.impl)

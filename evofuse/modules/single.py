"""Attention with pair bias over the single representation (Boltz-2's names)."""

from __future__ import annotations

import torch
from torch import nn

from .. import functional
from ._common import check_options


class AttentionPairBias(nn.Module):
    """Attention with pair bias (AF3 Algorithm 24): Boltz-2's constructor and parameter names (`proj_q` with a bias,
    `proj_k`, `proj_v`, `proj_g`, `proj_o` without, `proj_z` a LayerNorm and a linear to the heads), so a Boltz-2
    state_dict of the module loads unchanged.

    Args:
        c_s: the single representation's width; c_z: the pair's (unused where compute_pair_bias is False);
        num_heads: h, dividing c_s; inf: the models' mask magnitude, kept for their calls (a masked key's logit is
        -1e9 whatever it is: the same softmax for every row with a key unmasked); compute_pair_bias: the bias
        projected from the pair here, or (False) given projected, (B, N, N, h), as the diffusion transformer passes
        it; precision, impl: as for OuterProductMean.

    forward(s (B, N, c_s) normalized, z (B, N, N, c_z) or the bias (B, N, N, h), mask (B, N) 0/1 or None, k_in:
    None or s itself (the keys are the queries' tokens), multiplicity: s's batch is z's times this, each z used by
    that many consecutive elements) returns (B, N, c_s) in s's dtype.
    """

    def __init__(self, c_s: int, c_z: int | None = None, num_heads: int | None = None, inf: float = 1e6,
                 compute_pair_bias: bool = True, precision: str = "default", impl: str | None = None):
        super().__init__()
        check_options(precision, impl)
        if not isinstance(num_heads, int) or num_heads < 1 or c_s % num_heads:
            raise ValueError(f"num_heads must be a positive integer dividing c_s {c_s}, got {num_heads!r}")
        if compute_pair_bias and not isinstance(c_z, int):
            raise ValueError(f"c_z must be an integer where compute_pair_bias is True, got {c_z!r}")
        self.c_s, self.num_heads, self.head_dim, self.inf = c_s, num_heads, c_s // num_heads, inf
        self.compute_pair_bias = compute_pair_bias
        self.proj_q = nn.Linear(c_s, c_s)
        self.proj_k = nn.Linear(c_s, c_s, bias=False)
        self.proj_v = nn.Linear(c_s, c_s, bias=False)
        self.proj_g = nn.Linear(c_s, c_s, bias=False)
        self.proj_z = nn.Sequential(nn.LayerNorm(c_z), nn.Linear(c_z, num_heads, bias=False)) if compute_pair_bias \
            else None
        self.proj_o = nn.Linear(c_s, c_s, bias=False)
        self.precision, self.impl = precision, impl

    def forward(self, s: torch.Tensor, z: torch.Tensor, mask: torch.Tensor | None = None,
                k_in: torch.Tensor | None = None, multiplicity: int = 1, *, impl: str | None = None) -> torch.Tensor:
        if k_in is not None and k_in is not s:
            raise ValueError("k_in must be None or s itself: keys other than the queries' tokens are not supported")
        if not isinstance(multiplicity, int) or multiplicity < 1:
            raise ValueError(f"multiplicity must be a positive integer, got {multiplicity!r}")
        if multiplicity > 1:  # (as the models do: each pair serves that many consecutive samples)
            z = z.repeat_interleave(multiplicity, 0)
        norm, linear = (self.proj_z[0], self.proj_z[1]) if self.compute_pair_bias else (None, None)
        return functional.attention_pair_bias(
            s, z, mask, self.proj_q.weight, self.proj_q.bias, self.proj_k.weight, self.proj_v.weight,
            self.proj_g.weight, self.proj_o.weight, None if norm is None else norm.weight,
            None if norm is None else norm.bias, None if linear is None else linear.weight, num_heads=self.num_heads,
            precision=self.precision, impl=impl if impl is not None else self.impl)

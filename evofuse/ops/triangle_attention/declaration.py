"""Triangle attention: its declaration, read top-down: the functional form (its `Form`, which the front door reads,
and its documented signature), the module (the models' parameter names) and its registry entry (`OPERATION`: the
suite's cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ..._runtime import distributed
from ...front.declaration import GATED, Case, Operation, attention_bytes, heads
from ...front.door import ROWS, Form, front, masked_inf
from ...front.parts import GatedAttention, check_options

if triton_available():  # the kernels (without Triton every call takes the reference)
    from ...stages.attention.core import fused
    from . import op
else:
    op = fused = None


def _triangle_attention(a, train):
    x, mask = a.pair_repr, a.pair_mask
    if not a.starting:  # (the ending node on the transposed pair: strided views, no copies)
        x, mask = x.transpose(1, 2), None if mask is None else mask.transpose(1, 2)
    projections = [a.query_weight, a.key_weight, a.value_weight, a.gate_weight]
    if distributed(x):  # the bias apart, so that a pair split by rows gathers it and never the pair
        bias = op.triangle_bias(x, a.layer_norm_weight, a.layer_norm_bias, a.linear_weight, a.transpose_bias,
                                a.precision, train)
        proj = op.joined_projections(projections, None, a.gate_bias)
    else:
        bias, proj = None, op.joined_projections(projections, a.linear_weight, a.gate_bias)
    out = op.triangle_attention(x, mask, a.layer_norm_weight, a.layer_norm_bias, *proj, a.out_weight, a.out_bias, bias,
                                a.num_heads, a.transpose_bias, a.precision, a.chunk_size or 0, train)[0]
    return out if a.starting else out.transpose(1, 2)


TRIANGLE_ATTENTION = Form(
    "triangle attention", "pair", ("pair_repr", "pair_mask"),
    dict(layer_norm_weight="c", layer_norm_bias="c", linear_weight="h c", query_weight="H c", key_weight="H c",
         value_weight="H c", gate_weight="H c", gate_bias="H", out_weight="c H", out_bias="c"),
    ref.triangle_attention_reference, _triangle_attention, optional=("gate_bias", "out_bias"),
    width=("c", "layer_norm_weight"), heads=("H", "the inner width"), later=dict(linear_weight="h c"),
    rules={"chunk_size": ROWS},
    supports=lambda a: masked_inf(a.inf, a.pair_mask) or (
        None if fused(a.sizes["H"] // a.num_heads, a.dtype) else f"head_dim={a.sizes['H'] // a.num_heads}, dtype={a.dtype}"))


@front(TRIANGLE_ATTENTION)
def triangle_attention(
    pair_repr: torch.Tensor,
    pair_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    linear_weight: torch.Tensor,
    query_weight: torch.Tensor,
    key_weight: torch.Tensor,
    value_weight: torch.Tensor,
    gate_weight: torch.Tensor,
    gate_bias: torch.Tensor | None,
    out_weight: torch.Tensor,
    out_bias: torch.Tensor | None,
    *,
    num_heads: int,
    starting: bool = True,
    transpose_bias: bool = False,
    inf: float = ref.TRIANGLE_MIN_INF,
    chunk_size: int | None = None,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """Triangle attention around the starting node (AF2 Algorithm 13, AF3 14) or the ending node (14, 15): row
    attention with pair bias over the pair's own rows, one LayerNorm feeding q, k, v, the gate and the triangle bias
    (`evofuse.reference.triangle_attention_reference` is the definition). No (B, N, h, N, N) tensor is formed.

    Args:
        pair_repr: (B, N, N, c) float16, bfloat16, float32 or float64, any strides; any leading dimensions in place
            of B (none: an unbatched (N, N, c)), which the mask and the output share.
        pair_mask: (B, N, N) 0/1 as bool, integer or floating, or None; a masked pair (i, k) adds inf * (mask - 1) to
            the logits of key k in row i (ending node: in column i).
        layer_norm_weight, layer_norm_bias: (c,); linear_weight: (h, c), the triangle bias's projection (no bias).
        query_weight, key_weight, value_weight, gate_weight: (h*d, c), q, k and v without biases; gate_bias (h*d,)
        or None; out_weight (c, h*d), out_bias (c,) or None (Boltz's gate and output have no biases).
        num_heads: h; starting: the starting node (else the ending node); transpose_bias: the triangle bias of key
            k for query j taken from x[k, j] rather than x[j, k] (OpenFold3's flag, which its blocks set for the
            ending node called on a transposed pair); inf: the mask's magnitude (the models' 1e9; below 1e9 the
            reference runs, with a one-time warning: the kernels' masked logit is -1e9).
        chunk_size: rows of the pair an inference call (no gradient recorded) takes at a time, so that its
            projections, four times the pair, are never whole; None: all at once unless they would pass a quarter
            of the CUDA device's free memory (then as many rows as fit it). The same output either way.
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, N, N, c) in pair_repr's dtype; the parameters are cast to it.
    """


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
        return triangle_attention(
            x, mask, **TRIANGLE_ATTENTION.weights(layer_norm=self.layer_norm, linear=self.linear, query=mha.linear_q,
                                                  key=mha.linear_k, value=mha.linear_v, gate=mha.linear_g,
                                                  out=mha.linear_o),
            num_heads=self.no_heads, starting=self.starting, transpose_bias=transpose_bias,
            inf=self.inf, precision=self.precision, impl=impl if impl is not None else self.impl)


OPERATION = Operation(
    "tri", lambda c, **kw: TriangleAttention(c.D, c.head, c.width, **kw), "layer_norm",
    ("layer_norm.weight", "layer_norm.bias", "linear.weight", *GATED), ref.triangle_attention_reference, heads,
    "pair", "pair_row",
    lambda c: 2.0 * c.B * (c.N ** 2 * c.D * 5 * c.width * c.head + 2 * c.N ** 3 * c.width * c.head
                           + c.N ** 2 * c.D * c.width),
    attention_bytes,
    (Case("tri-seed", "tri", 2, 24, 24, 32, 32, 2, 16), Case("tri-384", "tri", 1, 384, 384, 128, 128, 4, 32),
     Case("tri-768", "tri", 1, 768, 768, 128, 128, 4, 32), Case("tri-2048", "tri", 1, 2048, 2048, 128, 128, 4, 32)))

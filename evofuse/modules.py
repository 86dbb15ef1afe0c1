"""Drop-in nn.Modules. Parameter names match the seed modules, so their state_dicts load unchanged."""

from __future__ import annotations

import torch
from torch import nn

from . import functional
from ._dispatch import IMPLS
from ._runtime import PRECISIONS
from .reference import ACTIVATIONS, COUNT_EPS, GLOBAL_COUNT_EPS, MASK_MODES, NORMALIZATIONS, PAIR_MASK_MODES


def _linear_params(module: nn.Module, names: tuple[str, ...]) -> list[torch.Tensor]:
    """weight, bias of each named submodule, in order (parametrized weights included)."""
    out = []
    for name in names:
        sub = getattr(module, name)
        out += (sub.weight, sub.bias)
    return out


def _check_options(precision: str, impl: str | None, mask_mode: str | None = None, mask_modes: tuple = ()) -> None:
    """A module's options, checked where it is built (the functional forms check them at each call)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if impl is not None and impl not in IMPLS:
        raise ValueError(f"impl must be None or one of {IMPLS}, got {impl!r}")
    if mask_mode is not None and mask_mode not in mask_modes:
        raise ValueError(f"mask_mode must be one of {mask_modes}, got {mask_mode!r}")


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
        _check_options(precision, impl)
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
            msa_repr, msa_mask, *_linear_params(self, _OPM_LINEARS), normalization=self.normalization,
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
        _check_options(precision, impl, mask_mode, MASK_MODES)
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
            msa_repr, pair_repr, msa_mask, *_linear_params(self, _ATT_LINEARS), num_heads=self.num_heads,
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
        _check_options(precision, impl, mask_mode, PAIR_MASK_MODES)
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


class _GatedAttention(nn.Module):
    """The projections of OpenFold's gated `Attention`, under its names: linear_q, linear_k, linear_v (no biases),
    linear_g and linear_o."""

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, bias: bool = True):
        super().__init__()
        inner = c_hidden * no_heads
        self.linear_q = nn.Linear(c_in, inner, bias=False)
        self.linear_k = nn.Linear(c_in, inner, bias=False)
        self.linear_v = nn.Linear(c_in, inner, bias=False)
        self.linear_g = nn.Linear(c_in, inner, bias=bias)
        self.linear_o = nn.Linear(inner, c_in, bias=bias)


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
    accepted and change nothing.
    """

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, starting: bool = True, inf: float = 1e9,
                 gate_and_output_bias: bool = True, precision: str = "default", impl: str | None = None):
        super().__init__()
        if not isinstance(no_heads, int) or no_heads < 1:
            raise ValueError(f"no_heads must be a positive integer, got {no_heads!r}")
        _check_options(precision, impl)
        self.c_in, self.c_hidden, self.no_heads, self.starting, self.inf = c_in, c_hidden, no_heads, starting, inf
        self.layer_norm = nn.LayerNorm(c_in)
        self.linear = nn.Linear(c_in, no_heads, bias=False)
        self.mha = _GatedAttention(c_in, c_hidden, no_heads, gate_and_output_bias)
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
        _check_options(precision, impl)
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


class _MSAAttentionParts(nn.Module):
    """The parameters of OpenFold's MSAAttention without pair bias, under its names: layer_norm_m and mha."""

    def __init__(self, c_m: int, c_hidden: int, no_heads: int, bias: bool):
        super().__init__()
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.mha = _GatedAttention(c_m, c_hidden, no_heads, bias)


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
        _check_options(precision, impl)
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
        _check_options(precision, impl)
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
            *_linear_params(att, ("linear_q", "linear_k", "linear_v", "linear_g", "linear_o")),
            num_heads=self.no_heads, inf=self.inf, eps=self.eps, precision=self.precision,
            impl=impl if impl is not None else self.impl)


class Transition(nn.Module):
    """The transition: LayerNorm, then a two-layer MLP, over every row of x: (..., dim) -> (..., out_dim). Boltz's
    constructor and parameter names (`norm`, `fc1`, `fc2`, `fc3`: out = fc3(silu(fc1(y)) * fc2(y)) for y = norm(x)),
    so a Boltz state_dict of the module loads unchanged; with activation="relu" (AF2's, OpenFold's) out =
    fc3(relu(fc1(y))) and there is no fc2.

    Args:
        dim, hidden, out_dim: the input width, the hidden width (default 4 dim) and the output's (default dim).
        activation: "swiglu" (AF3, Boltz, Protenix, OpenFold3) or "relu" (AF2, OpenFold).
        bias: whether the linears have biases (OpenFold's do; Boltz's, Protenix's and AF3's do not).
        precision, impl: as for OuterProductMean.

    forward(x (..., dim), mask (x's leading shape) 0/1 or None, ...) returns (..., out_dim) in x's dtype, its rows
    times the mask (OpenFold's and OpenFold3's); the models' switches (`chunk_size`, ...) are accepted and change
    nothing (an inference call holds the hidden rows in blocks).
    """

    def __init__(self, dim: int = 128, hidden: int | None = None, out_dim: int | None = None,
                 activation: str = "swiglu", bias: bool = False, precision: str = "default",
                 impl: str | None = None):
        super().__init__()
        _check_options(precision, impl)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        hidden = 4 * dim if hidden is None else hidden
        out_dim = dim if out_dim is None else out_dim
        self.activation = activation
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.fc2 = nn.Linear(dim, hidden, bias=bias) if activation == "swiglu" else None
        self.fc3 = nn.Linear(hidden, out_dim, bias=bias)
        self.precision = precision
        self.impl = impl

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, impl: str | None = None,
                **switches) -> torch.Tensor:
        fc2 = (None, None) if self.fc2 is None else (self.fc2.weight, self.fc2.bias)
        return functional.transition(
            x, mask, self.norm.weight, self.norm.bias, self.fc1.weight, self.fc1.bias, *fc2, self.fc3.weight,
            self.fc3.bias, activation=self.activation, precision=self.precision,
            impl=impl if impl is not None else self.impl)

"""OpenFold3 (`openfold3` 0.5.0): `patch(model)` puts evofuse's fused kernels in place of every
`openfold3.core.model.layers.msa.MSAPairWeightedAveraging`, `...msa.MSARowAttentionWithPairBias`,
`...msa.MSAColumnAttention` and `...msa.MSAColumnGlobalAttention` (the AF2-style blocks),
`openfold3.core.model.layers.outer_product_mean.OuterProductMean`,
`openfold3.core.model.layers.triangular_attention.TriangleAttention` (and its `TriangleAttentionEndingNode`: every
block's `tri_att_start` and `tri_att_end`) and `...triangular_multiplicative_update`'s
TriangleMultiplication{Outgoing, Incoming} and their fused forms (`tri_mul_out`, `tri_mul_in`) and
`openfold3.core.model.layers.transition`'s `SwiGLUTransition` and `ReLUTransition` and
`openfold3.core.model.layers.attention_pair_bias.AttentionPairBias` (the Pairformer's `attn_pair_bias`) and its
`DiffusionAttentionPairBias` (the diffusion transformer's) inside `model`, in place; `unpatch(model)` undoes it.

The replacements hold the original submodules (the same Parameters under the same names), so checkpoints load
unchanged, and take OpenFold3's calls (`pwa(m, z, mask, chunk_size, use_softmax_kernel)`,
`opm(m, mask, chunk_size, inplace_safe)`, `tri(x, mask, transpose_bias, chunk_size, ...)`, `transition(x, mask,
chunk_size, ckpt_chunk_size)`; chunking, the softmax
kernel and the cuEquivariance, DeepSpeed and Triton kernel switches are not needed). The pair mask is
OpenFold3's additive `inf * (mask - 1)` with the module's `inf`. A module evofuse cannot fuse (projections with
biases, a head or hidden width without a kernel) stays as it is, with a warning naming it.
"""

from __future__ import annotations

import torch
from torch import nn

from ..front.common import autocast_dtype
from ..functional import attention_pair_bias as apb
from ..functional import msa_row_attention as row
from ..functional import pair_weighted_averaging as pwa
from ..stages.attention.core import MAX_HEAD_DIM
from ._adapters import (
    FusedOpenFoldColumnAttention,
    FusedOpenFoldGlobalColumnAttention,
    FusedOpenFoldOuterProductMean,
    FusedOpenFoldRowAttention,
    FusedOpenFoldTriangleAttention,
    FusedOpenFoldTriangleMultiplication,
    FusedTransition,
)
from ._crossover import RunsOriginal, rows_of, scores
from ._patching import (
    check_layer_norm,
    check_linears,
    check_pair_weighted_averaging,
    patch_modules,
    unpatch_modules,
)

__all__ = ["patch", "unpatch"]


class FusedPairWeightedAveraging(nn.Module):
    """OpenFold3's MSAPairWeightedAveraging (submodules `layer_norm_m`, `layer_norm_z`, `linear_z`, `linear_v`,
    `linear_g`, `linear_o`, all without biases) computed by `evofuse.pair_weighted_averaging`."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_in, self.c_hidden, self.c_z = original.c_in, original.c_hidden, original.c_z
        self.no_heads, self.inf = original.no_heads, original.inf
        for name in ("layer_norm_m", "layer_norm_z", "linear_z", "linear_v", "linear_o", "linear_g"):
            setattr(self, name, getattr(original, name))

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        linears = (module.linear_z, module.linear_v, module.linear_g, module.linear_o)
        return (check_linears(*linears) or check_pair_weighted_averaging(module.c_hidden, module.linear_o.out_features,
                                                                          *linears)
                or check_layer_norm(module.layer_norm_m) or check_layer_norm(module.layer_norm_z))

    def forward(self, m: torch.Tensor, z: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                chunk_size: int | None = None, use_softmax_kernel: bool = False, **kwargs) -> torch.Tensor:
        """m (*, S, N, c_in), z (*, N, N, c_z), mask (*, N, N) or None -> (*, S, N, c_in) in the compute dtype."""
        dtype = autocast_dtype(m)
        with torch.autocast(m.device.type, enabled=False):
            return pwa(m.to(dtype), z.to(dtype), mask, **pwa.form.weights(
                norm_m=self.layer_norm_m, norm_z=self.layer_norm_z, proj_m=self.linear_v, proj_g=self.linear_g,
                proj_z=self.linear_z, proj_o=self.linear_o), num_heads=self.no_heads, inf=self.inf, mask_mode="add")


class _AttentionWithPairBias(RunsOriginal, nn.Module):
    """What OpenFold3's two attentions with pair bias share: the original's submodules `PARTS` under their names, the
    original itself for calls below the crossover, and why one cannot be fused (gating, `inf`, the head width, the
    linears)."""

    PARTS: tuple[str, ...] = ()
    OPERATION = "attention_pair_bias"

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_q, self.c_s, self.c_z, self.inf = original.c_q, original.c_s, original.c_z, original.inf
        for name in self.PARTS:
            setattr(self, name, getattr(original, name))
        self.keep(original)

    @staticmethod
    def attention_reason(module: nn.Module) -> str | None:
        mha = module.mha
        if mha.linear_g is None:
            return "attention without gating"
        if module.inf < FusedOpenFoldRowAttention.MIN_INF:
            return f"inf {module.inf} (fused: masked keys as -1e9, equal for inf >= 1e9)"
        if mha.c_hidden > MAX_HEAD_DIM:
            return f"head width {mha.c_hidden} (fused: up to {MAX_HEAD_DIM})"
        return check_linears(mha.linear_q, mha.linear_k, mha.linear_v, mha.linear_g, mha.linear_o, module.linear_z)


class FusedAttentionPairBias(_AttentionWithPairBias):
    """OpenFold3's AttentionPairBias (the Pairformer's single track, AF3 Algorithm 24: `layer_norm_a`,
    `layer_norm_z`, `linear_z`, `mha`) computed by `evofuse.msa_row_attention` as one row of N tokens (both LayerNorms
    fused into their projections; the mask's `inf * (mask - 1)` as the kernels' additive mask). Its kernel and
    precision switches are accepted and not needed."""

    PARTS = ("layer_norm_a", "layer_norm_z", "linear_z", "mha", "sigmoid")

    @classmethod
    def unsupported_reason(cls, module: nn.Module) -> str | None:
        return (cls.attention_reason(module) or check_layer_norm(module.layer_norm_a)
                or check_layer_norm(module.layer_norm_z))

    def forward(self, a: torch.Tensor, z: torch.Tensor, mask: torch.Tensor | None = None, **switches) -> torch.Tensor:
        """a (*, N, c_q), z (*, N, N, c_z), mask (N,) or (*, N) or None -> (*, N, c_q) in the compute dtype."""
        if self.small(scores(a), a):
            return self.original(a, z, mask, **switches)
        dtype = autocast_dtype(a)
        mha = self.mha
        rows = None if mask is None else mask.expand(a.shape[:-1]).unsqueeze(-2)  # (*, 1, N): one row of N keys
        with torch.autocast(a.device.type, enabled=False):
            return row(a.to(dtype).unsqueeze(-3), z.to(dtype), rows, **row.form.weights(
                layer_norm=self.layer_norm_a, query=mha.linear_q, key=mha.linear_k, value=mha.linear_v,
                gate=mha.linear_g, out_proj=mha.linear_o, pair_bias=self.linear_z, pair_norm=self.layer_norm_z),
                num_heads=mha.no_heads, mask_mode="add").squeeze(-3)


class FusedDiffusionAttentionPairBias(_AttentionWithPairBias):
    """OpenFold3's DiffusionAttentionPairBias (the diffusion transformer's: `layer_norm_a` an adaptive LayerNorm of a
    by s, `linear_z` the pair's projection, `mha` with q's bias alone, the output gated by sigmoid(`linear_ada_out`(s)))
    computed by `evofuse.attention_pair_bias` after the module's own adaptive LayerNorm; a pair shared by the samples
    (fewer leading dimensions than a's) is projected once and its bias broadcast."""

    PARTS = ("layer_norm_a", "linear_ada_out", "linear_z", "mha", "sigmoid")

    @classmethod
    def unsupported_reason(cls, module: nn.Module) -> str | None:
        mha = module.mha
        biased = any(layer.bias is not None for layer in (mha.linear_k, mha.linear_v, mha.linear_o, module.linear_z))
        return cls.attention_reason(module) or (
            "biases beside the query's" if biased or mha.linear_g.bias is not None else None)

    def forward(self, a: torch.Tensor, z: torch.Tensor, s: torch.Tensor, mask: torch.Tensor | None = None,
                **switches) -> torch.Tensor:
        """a (*, N, c_q), z (*, N, N, c_z) (or fewer leading dimensions), s (*, N, c_s), mask (*, N) or None ->
        (*, N, c_q) in the compute dtype."""
        if self.small(scores(a), a):
            return self.original(a, z, s, mask, **switches)
        x = self.layer_norm_a(a, s)
        dtype, mha = autocast_dtype(x), self.mha
        lead = x.shape[:-2]
        mask = None if mask is None else mask.expand(x.shape[:-1])
        with torch.autocast(x.device.type, enabled=False):
            z, weight = z.to(dtype), self.linear_z.weight
            if z.shape[:-3] != lead:  # (one pair for every sample: its bias projected once, broadcast)
                z = torch.nn.functional.linear(z, weight.to(dtype))
                z, weight = z.expand(*lead, *z.shape[-3:]), None
            out = apb(x.to(dtype), z, mask, **apb.form.weights(
                query=mha.linear_q, key=mha.linear_k, value=mha.linear_v, gate=mha.linear_g, out=mha.linear_o,
                pair_norm=None, pair=(weight, None)), num_heads=mha.no_heads)
        return self.sigmoid(self.linear_ada_out(s)) * out


class FusedTriangleAttention(FusedOpenFoldTriangleAttention):
    """OpenFold3's TriangleAttention: OpenFold's with the bias projection named `linear_z` and the `transpose_bias`
    flag (its blocks call the ending node on the transposed pair with the bias transposed)."""

    BIAS = "linear_z"

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, transpose_bias: bool = False,
                chunk_size: int | None = None, **kwargs) -> torch.Tensor:
        """x (*, N, N, c_in), mask (*, N, N) or None -> (*, N, N, c_in) in the compute dtype."""
        if self.small(rows_of(x), x):
            return self.original(x, mask=mask, transpose_bias=transpose_bias, chunk_size=chunk_size, **kwargs)
        return self.attend(x, mask, transpose_bias)


class FusedSwiGLUTransition(FusedTransition):
    """OpenFold3's SwiGLUTransition (AF3 Algorithm 11: `layer_norm`, `swiglu.linear_a`, `swiglu.linear_b`,
    `linear_out`; the output times the mask)."""

    PARTS = ("layer_norm", "swiglu.linear_a", "swiglu.linear_b", "linear_out")
    MASKED = True


class FusedReLUTransition(FusedTransition):
    """OpenFold3's ReLUTransition (AF2 Algorithms 9 and 15: `layer_norm`, `transition_mlp.layers[0][0]`,
    `transition_mlp.linear_out`; the output times the mask), with one linear and ReLU layer."""

    PARTS = ("layer_norm", "transition_mlp.layers.0.0", None, "transition_mlp.linear_out")
    ACTIVATION = "relu"
    MASKED = True

    @classmethod
    def unsupported_reason(cls, module: nn.Module) -> str | None:
        if module.transition_mlp.num_relu_layers != 1:
            return f"{module.transition_mlp.num_relu_layers} linear and ReLU layers (fused: 1)"
        return super().unsupported_reason(module)


_TRIANGLE = "openfold3.core.model.layers.triangular_attention"
_TRIANGLE_MULT = "openfold3.core.model.layers.triangular_multiplicative_update"
REPLACEMENTS = {
    ("openfold3.core.model.layers.msa", "MSAColumnAttention"): FusedOpenFoldColumnAttention,
    ("openfold3.core.model.layers.msa", "MSAColumnGlobalAttention"): FusedOpenFoldGlobalColumnAttention,
    ("openfold3.core.model.layers.msa", "MSAPairWeightedAveraging"): FusedPairWeightedAveraging,
    ("openfold3.core.model.layers.msa", "MSARowAttentionWithPairBias"): FusedOpenFoldRowAttention,
    ("openfold3.core.model.layers.outer_product_mean", "OuterProductMean"): FusedOpenFoldOuterProductMean,
    (_TRIANGLE, "TriangleAttention"): FusedTriangleAttention,
    (_TRIANGLE, "TriangleAttentionEndingNode"): FusedTriangleAttention,
    **{(_TRIANGLE_MULT, f"{fused}TriangleMultiplication{edges}"): FusedOpenFoldTriangleMultiplication
       for fused in ("", "Fused") for edges in ("Outgoing", "Incoming")},
    ("openfold3.core.model.layers.transition", "SwiGLUTransition"): FusedSwiGLUTransition,
    ("openfold3.core.model.layers.transition", "ReLUTransition"): FusedReLUTransition,
    ("openfold3.core.model.layers.attention_pair_bias", "AttentionPairBias"): FusedAttentionPairBias,
    ("openfold3.core.model.layers.attention_pair_bias", "DiffusionAttentionPairBias"): FusedDiffusionAttentionPairBias,
}


def patch(model: nn.Module) -> list[str]:
    """Replaces, in place, every OpenFold3 pair-weighted averaging, row, column and global column attention, Outer
    Product Mean, triangle attention, triangle multiplication, transition and (trunk) attention with pair bias among
    `model`'s descendants by evofuse's; returns the names of the modules replaced."""
    return patch_modules(model, REPLACEMENTS)


def unpatch(model: nn.Module) -> list[str]:
    """Puts back the modules `patch` replaced inside `model`; returns their names."""
    return unpatch_modules(model)

"""Protenix (`protenix` 2.0.0): `patch(model)` puts evofuse's fused kernels in place of every
`protenix.model.modules.pairformer.MSAPairWeightedAveraging`, `protenix.model.triangular.layers.OuterProductMean`
`protenix.model.triangular.triangular.TriangleAttention` (and `TriangleAttentionEndingNode`: the Pairformer's and
the MSA module's `tri_att_start`, `tri_att_end`) and its `TriangleMultiplicationOutgoing` and
`TriangleMultiplicationIncoming` (`tri_mul_out`, `tri_mul_in`) and `protenix.model.modules.primitives.Transition`
(the Pairformer's and the MSA module's transitions) and `protenix.model.modules.transformer.AttentionPairBias` (the
Pairformer's `attention_pair_bias` and the diffusion transformer's, conditioned) inside `model`, in place;
`unpatch(model)` undoes it.

The replacements hold the original submodules (the same Parameters under the same names), so checkpoints load
unchanged, and take Protenix's calls (`pwa(m, z)`, `opm(m, mask, chunk_size, inplace_safe)`, `tri(x, mask,
chunk_size, triangle_attention, inplace_safe)`, `tri_mul(z, mask, inplace_safe, _add_with_inplace, ...,
triangle_multiplicative)`, `transition(x)`: the kernel choice, cuEquivariance's included, is not needed). Protenix runs
its Outer Product Mean in float32 under float16 autocast, and so does the replacement; its triangle multiplications
take their product in float32 there (after scaling a and b), and the replacements compute in float32. A module evofuse cannot
fuse stays as it is, with a warning naming it.
"""

from __future__ import annotations

import torch
from torch import nn

from ..front.common import autocast_dtype
from ..functional import attention_pair_bias as apb
from ..functional import msa_row_attention as row
from ..functional import pair_weighted_averaging as pwa
from ..reference import LAYER_NORM_EPS
from ._adapters import (
    FusedOpenFoldOuterProductMean,
    FusedOpenFoldTriangleAttention,
    FusedOpenFoldTriangleMultiplication,
    FusedTransition,
)
from ._crossover import RunsOriginal, scores
from ._patching import check_layer_norm, check_pair_weighted_averaging, patch_modules, unpatch_modules

__all__ = ["patch", "unpatch"]


class FusedPairWeightedAveraging(nn.Module):
    """Protenix's MSAPairWeightedAveraging (submodules `layernorm_m`, `linear_no_bias_mv`, `layernorm_z`,
    `linear_no_bias_z`, `linear_no_bias_mg`, `linear_no_bias_out`; no mask) computed by
    `evofuse.pair_weighted_averaging`."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_m, self.c, self.c_z, self.n_heads = original.c_m, original.c, original.c_z, original.n_heads
        for name in ("layernorm_m", "linear_no_bias_mv", "layernorm_z", "linear_no_bias_z", "linear_no_bias_mg",
                     "linear_no_bias_out"):
            setattr(self, name, getattr(original, name))

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        return (check_pair_weighted_averaging(module.c, module.linear_no_bias_out.out_features,
                                              module.linear_no_bias_mv, module.linear_no_bias_mg,
                                              module.linear_no_bias_z, module.linear_no_bias_out)
                or check_layer_norm(module.layernorm_m) or check_layer_norm(module.layernorm_z))

    def forward(self, m: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """m (*, S, N, c_m), z (*, N, N, c_z) -> (*, S, N, c_m) in the compute dtype."""
        dtype = autocast_dtype(m)
        with torch.autocast(m.device.type, enabled=False):
            return pwa(m.to(dtype), z.to(dtype), None, **pwa.form.weights(
                norm_m=self.layernorm_m, norm_z=self.layernorm_z, proj_m=self.linear_no_bias_mv,
                proj_g=self.linear_no_bias_mg, proj_z=self.linear_no_bias_z, proj_o=self.linear_no_bias_out),
                num_heads=self.n_heads)


class _Float32UnderFloat16:
    """A replacement that computes in float32 under CUDA float16 autocast, as Protenix decides it with its own
    `is_fp16_enabled` (bound once, when the model is patched: no import per call)."""

    def bind_float16_test(self) -> None:
        from protenix.model.utils import is_fp16_enabled

        self.is_fp16_enabled = is_fp16_enabled

    def compute_dtype(self, x: torch.Tensor) -> torch.dtype:
        return torch.float32 if self.is_fp16_enabled() else autocast_dtype(x)


class FusedOuterProductMean(_Float32UnderFloat16, FusedOpenFoldOuterProductMean):
    """Protenix's OuterProductMean: OpenFold's, computed in float32 under CUDA float16 autocast (as Protenix does)."""

    def __init__(self, original: nn.Module):
        super().__init__(original)
        self.bind_float16_test()


class FusedTriangleMultiplication(_Float32UnderFloat16, FusedOpenFoldTriangleMultiplication):
    """Protenix's TriangleMultiplicativeUpdate: OpenFold's, computed in float32 under CUDA float16 autocast, where
    Protenix divides a and b by their standard deviations and takes their product in float32 (so that it stays in
    range: a float16 product would overflow where Protenix's does not)."""

    def __init__(self, original: nn.Module):
        super().__init__(original)
        self.bind_float16_test()


class FusedAttentionPairBias(RunsOriginal, nn.Module):
    """Protenix's AttentionPairBias (AF3 Algorithm 24: `layernorm_a`, a LayerNorm or, conditioned (`has_s`), an
    adaptive one of a by s; `layernorm_z` without offset, `linear_nobias_z`, `attention` with q's bias alone; the
    conditioned output gated by sigmoid(`linear_a_last`(s)); no mask): the Pairformer's by `evofuse.msa_row_attention`
    as one row of N tokens (both LayerNorms fused into their projections), the diffusion transformer's by
    `evofuse.attention_pair_bias` after the module's own adaptive LayerNorm; with `enable_efficient_fusion` (its
    inference setting) the diffusion module hands every block the pair normalized once, channels first, and the
    bias is that module's product with the block's weights, given to `evofuse.attention_pair_bias` ready made. The
    atom transformer's local attention (`n_queries`, `n_keys`) runs the original, as calls below the crossover do;
    cross attention stays unreplaced."""

    OPERATION = "attention_pair_bias"

    def __init__(self, original: nn.Module):
        super().__init__()
        self.n_heads, self.has_s = original.n_heads, original.has_s
        self.cross_attention_mode = original.cross_attention_mode
        self.local_attention_method = original.local_attention_method
        for name in ("layernorm_a", "attention", "layernorm_z", "linear_nobias_z", "linear_a_last"):
            if hasattr(original, name):
                setattr(self, name, getattr(original, name))
        self.keep(original)

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        if module.cross_attention_mode:
            return "a cross attention (the atom transformer's)"
        if module.attention.linear_g is None:
            return "attention without gating"
        if module.layernorm_z.weight is None or module.layernorm_z.eps != LAYER_NORM_EPS:
            return "a pair LayerNorm without scale or of another eps"
        return None if module.has_s else check_layer_norm(module.layernorm_a)

    def forward(self, a: torch.Tensor, s: torch.Tensor | None, z: torch.Tensor, n_queries: int | None = None,
                n_keys: int | None = None, inplace_safe: bool = False, chunk_size: int | None = None,
                enable_efficient_fusion: bool = False) -> torch.Tensor:
        """a (*, N, c_a), s (*, N, c_s) or None, z (*, N, N, c_z) -> (*, N, c_a) in the compute dtype."""
        if (n_queries and n_keys) or self.small(scores(a), a):
            return self.original(a, s, z, n_queries, n_keys, inplace_safe, chunk_size, enable_efficient_fusion)
        attention, norm_z = self.attention, self.layernorm_z
        norm_z_bias = torch.zeros_like(norm_z.weight) if norm_z.bias is None else norm_z.bias
        if self.has_s:
            a = self.layernorm_a(a=a, s=s)
        dtype = autocast_dtype(a)
        parts = dict(query=attention.linear_q, key=attention.linear_k, value=attention.linear_v,
                     gate=attention.linear_g, pair_norm=(norm_z.weight, norm_z_bias))
        with torch.autocast(a.device.type, enabled=False):
            if self.has_s and enable_efficient_fusion:  # (the bias from the pair normalized once, channels first)
                out = apb(a.to(dtype), self._fused_bias(z, a, dtype), None, **apb.form.weights(
                    **(parts | {"pair_norm": None}), out=attention.linear_o, pair=None), num_heads=self.n_heads)
            elif self.has_s:
                out = apb(a.to(dtype), z.to(dtype), None, **apb.form.weights(
                    **parts, out=attention.linear_o, pair=self.linear_nobias_z), num_heads=self.n_heads)
            else:
                return row(a.to(dtype).unsqueeze(-3), z.to(dtype), None, **row.form.weights(
                    **parts, layer_norm=self.layernorm_a, out_proj=attention.linear_o,
                    pair_bias=self.linear_nobias_z), num_heads=self.n_heads, mask_mode="add").squeeze(-3)
        return torch.sigmoid(self.linear_a_last(s)) * out

    def _fused_bias(self, z: torch.Tensor, a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The bias (*a's leading shape, N, N, h), a broadcast view where the samples share it, as the module's
        `enable_efficient_fusion` path makes it: z (*, c_z, N, N), the pair normalized without scale or offset,
        against linear_nobias_z's weight times layernorm_z's (which has no offset), head major in memory."""
        weight = self.linear_nobias_z.weight * self.layernorm_z.weight  # (h, c_z)
        bias = torch.einsum("hc,...cij->...hij", weight.to(dtype), z.to(dtype)).movedim(-3, -1)
        return bias.expand(*a.shape[:-1], *bias.shape[-2:])


class FusedProtenixTransition(FusedTransition):
    """Protenix's Transition (AF3 Algorithm 11: `layernorm1`, `linear_no_bias_a`, `linear_no_bias_b`,
    `linear_no_bias`; called as `t(x)`)."""

    PARTS = ("layernorm1", "linear_no_bias_a", "linear_no_bias_b", "linear_no_bias")


REPLACEMENTS = {
    ("protenix.model.modules.pairformer", "MSAPairWeightedAveraging"): FusedPairWeightedAveraging,
    ("protenix.model.triangular.layers", "OuterProductMean"): FusedOuterProductMean,
    # (OpenFold's module, without the gate's and the output's biases)
    ("protenix.model.triangular.triangular", "TriangleAttention"): FusedOpenFoldTriangleAttention,
    ("protenix.model.triangular.triangular", "TriangleAttentionEndingNode"): FusedOpenFoldTriangleAttention,
    ("protenix.model.triangular.triangular", "TriangleMultiplicationOutgoing"): FusedTriangleMultiplication,
    ("protenix.model.triangular.triangular", "TriangleMultiplicationIncoming"): FusedTriangleMultiplication,
    ("protenix.model.modules.primitives", "Transition"): FusedProtenixTransition,
    ("protenix.model.modules.transformer", "AttentionPairBias"): FusedAttentionPairBias,
}


def patch(model: nn.Module) -> list[str]:
    """Replaces, in place, every Protenix pair-weighted averaging, Outer Product Mean, triangle attention, triangle
    multiplication, transition and attention with pair bias among `model`'s descendants by evofuse's; returns the
    names of the modules replaced."""
    return patch_modules(model, REPLACEMENTS)


def unpatch(model: nn.Module) -> list[str]:
    """Puts back the modules `patch` replaced inside `model`; returns their names."""
    return unpatch_modules(model)

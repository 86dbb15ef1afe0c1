"""Boltz-1 and Boltz-2 (`boltz` 2.2.1): `patch(model)` puts evofuse's fused kernels in place of every
`boltz.model.layers.pair_averaging.PairWeightedAveraging`, `boltz.model.layers.outer_product_mean.OuterProductMean`
`boltz.model.layers.triangular_attention.attention.TriangleAttention` (starting and ending node: the Pairformer's and
the MSA module's `tri_att_start`, `tri_att_end`) and `boltz.model.layers.triangular_mult`'s
`TriangleMultiplicationOutgoing` and `TriangleMultiplicationIncoming` (`tri_mul_out`, `tri_mul_in`) and
`boltz.model.layers.transition.Transition` (`transition_s`, `transition_z`, `msa_transition`, `z_transition`, the
encoders') and Boltz-2's `boltz.model.layers.attentionv2.AttentionPairBias` (the Pairformers' `attention`, the diffusion
transformers' `pair_bias_attn`) inside `model`, in place; each `boltz.model.layers.pairformer.PairformerLayer` adds its
pair updates into one copy of the pair in inference (no gradients), where the original holds three float32 pairs at
once; with `patch(model, diffusion_graphs=True)` the diffusion module's network replays its sampling steps from a
CUDA graph.

The replacements hold the original submodules themselves (the same Parameters under the same names), so the model's
checkpoints load unchanged and training updates the original modules too; they take Boltz's calls as Boltz makes them
(`pwa(m, z, mask, chunk_heads)`, `opm(m, mask, chunk_size)`, `tri(z, mask, chunk_size, use_kernels)`, `tri_mul(z, mask,
use_kernels)`, `transition(x, chunk_size)`, `attention(s, z, mask, k_in, multiplicity)`; chunking and cuEquivariance's
kernels are not needed) and, under `torch.autocast`, compute in the autocast dtype as Boltz's linear layers do. A module
evofuse cannot fuse (a head or hidden width it has no kernel for) stays as it is, with a warning naming it.
"""

from __future__ import annotations

import types

import torch
from torch import nn

from ..front.common import autocast_dtype
from ..functional import outer_product_mean as opm
from ..functional import pair_weighted_averaging as pwa
from ..functional import triangle_multiplication as trimul
from ..modules import AttentionPairBias
from ._adapters import FusedOpenFoldTriangleAttention, FusedTransition
from ._crossover import RunsOriginal, rows_of, scores
from ._patching import (
    check_layer_norm,
    check_outer_product_mean,
    check_pair_weighted_averaging,
    patch_modules,
    unpatch_modules,
)
from ._replay import Replayed

__all__ = ["patch", "unpatch"]


class FusedPairWeightedAveraging(nn.Module):
    """Boltz's PairWeightedAveraging (its submodules `norm_m`, `norm_z`, `proj_m`, `proj_g`, `proj_z`, `proj_o`)
    computed by `evofuse.pair_weighted_averaging`."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_m, self.c_z, self.c_h = original.c_m, original.c_z, original.c_h
        self.num_heads, self.inf = original.num_heads, original.inf
        for name in ("norm_m", "norm_z", "proj_m", "proj_g", "proj_z", "proj_o"):
            setattr(self, name, getattr(original, name))

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        return (check_pair_weighted_averaging(module.c_h, module.proj_o.out_features) or check_layer_norm(module.norm_m)
                or check_layer_norm(module.norm_z))

    def forward(self, m: torch.Tensor, z: torch.Tensor, mask: torch.Tensor, chunk_heads: bool = False) -> torch.Tensor:
        dtype = autocast_dtype(m)
        with torch.autocast(m.device.type, enabled=False):
            return pwa(m.to(dtype), z.to(dtype), mask, **pwa.form.weights(
                norm_m=self.norm_m, norm_z=self.norm_z, proj_m=self.proj_m, proj_g=self.proj_g, proj_z=self.proj_z,
                proj_o=self.proj_o), num_heads=self.num_heads, inf=self.inf, mask_mode="add")


class FusedOuterProductMean(nn.Module):
    """Boltz's OuterProductMean (its submodules `norm`, `proj_a`, `proj_b` without biases, `proj_o`; the outer
    products divided by max(count_ij, 1) before proj_o) computed by `evofuse.outer_product_mean`."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_hidden = original.c_hidden
        for name in ("norm", "proj_a", "proj_b", "proj_o"):
            setattr(self, name, getattr(original, name))

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        return check_outer_product_mean(module.c_hidden) or check_layer_norm(module.norm)

    def forward(self, m: torch.Tensor, mask: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
        dtype = autocast_dtype(m)
        with torch.autocast(m.device.type, enabled=False):
            return opm(m.to(dtype), mask, **opm.form.weights(
                layer_norm=self.norm, proj_a=self.proj_a, proj_b=self.proj_b, out_proj=self.proj_o),
                normalization="count_ij")


class FusedTriangleMultiplication(RunsOriginal, nn.Module):
    """Boltz-2's TriangleMultiplicationOutgoing / Incoming (submodules `norm_in`, `p_in`, `g_in`, `norm_out`, `p_out`,
    `g_out`, no biases) computed by `evofuse.triangle_multiplication`; a pair below the crossover runs the original."""

    OPERATION = "triangle_multiplication"

    def __init__(self, original: nn.Module):
        super().__init__()
        self.outgoing = type(original).__name__.endswith("Outgoing")
        for name in ("norm_in", "p_in", "g_in", "norm_out", "p_out", "g_out"):
            setattr(self, name, getattr(original, name))
        self.keep(original)

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        return check_layer_norm(module.norm_in) or check_layer_norm(module.norm_out)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, use_kernels: bool = False) -> torch.Tensor:
        if self.small(rows_of(x), x):
            return self.original(x, mask, use_kernels)
        dtype = autocast_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            return trimul(x.to(dtype), mask, **trimul.form.weights(
                norm_in=self.norm_in, p_in=self.p_in, g_in=self.g_in, norm_out=self.norm_out, p_out=self.p_out,
                g_out=self.g_out), outgoing=self.outgoing)


class FusedAttentionPairBias(RunsOriginal, AttentionPairBias):
    """Boltz-2's AttentionPairBias (attentionv2) as `evofuse.AttentionPairBias`, whose names and call it has, on the
    original's own submodules (its `proj_z` keeps Boltz's trailing rearrangement); keys other than the queries'
    tokens (the atom transformer's windows, `k_in` not s) take the original's forward, and so do calls below the
    crossover."""

    OPERATION = "attention_pair_bias"

    def __init__(self, original: nn.Module):
        nn.Module.__init__(self)  # (the original's parameters, not new ones)
        self.c_s, self.num_heads, self.head_dim = original.c_s, original.num_heads, original.head_dim
        self.inf, self.compute_pair_bias = original.inf, original.compute_pair_bias
        for name in ("proj_q", "proj_k", "proj_v", "proj_g", "proj_z", "proj_o"):
            setattr(self, name, getattr(original, name))
        self.precision, self.impl = "default", None
        self.keep(original)

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        return check_layer_norm(module.proj_z[0]) if module.compute_pair_bias else None

    def forward(self, s: torch.Tensor, z: torch.Tensor, mask: torch.Tensor, k_in: torch.Tensor,
                multiplicity: int = 1) -> torch.Tensor:
        if k_in is not s or self.small(scores(s), s):
            return self.original(s, z, mask, k_in, multiplicity)
        return super().forward(s, z, mask, multiplicity=multiplicity)


def _pairformer_inference_forward(layer: nn.Module, s: torch.Tensor, z: torch.Tensor, mask: torch.Tensor,
                                  pair_mask: torch.Tensor, chunk_size_tri_attn: int | None = None,
                                  use_kernels: bool = False, use_cuequiv_mul: bool = False,
                                  use_cuequiv_attn: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Boltz's PairformerLayer.forward (boltz 2.2.1), its five pair updates added into one copy of z in inference (the
    dropout masks then all ones: the same sums, rounded the same): the original's `z + dropout * update` holds three
    float32 pairs at once beside the caller's, this one copy. In training or with gradients on, the original's."""
    if layer.training or torch.is_grad_enabled():
        return type(layer).forward(layer, s, z, mask, pair_mask, chunk_size_tri_attn, use_kernels, use_cuequiv_mul,
                                   use_cuequiv_attn)
    z = z.clone()  # (the caller's z is left as it was)
    z += layer.tri_mul_out(z, mask=pair_mask, use_kernels=use_cuequiv_mul or use_kernels)
    z += layer.tri_mul_in(z, mask=pair_mask, use_kernels=use_cuequiv_mul or use_kernels)
    z += layer.tri_att_start(z, mask=pair_mask, chunk_size=chunk_size_tri_attn,
                             use_kernels=use_cuequiv_attn or use_kernels)
    z += layer.tri_att_end(z, mask=pair_mask, chunk_size=chunk_size_tri_attn, use_kernels=use_cuequiv_attn or use_kernels)
    z += layer.transition_z(z)
    with torch.autocast("cuda", enabled=False):
        s_normed = layer.pre_norm_s(s.float())
        s = s.float() + layer.attention(s=s_normed, z=z.float(), mask=mask.float(), k_in=s_normed)
        s = s + layer.transition_s(s)
        s = layer.s_post_norm(s)
    return s, z


_PAIRFORMER_LAYER = ("boltz.model.layers.pairformer", "PairformerLayer")
_TRIANGLE_MULT = "boltz.model.layers.triangular_mult"
REPLACEMENTS = {
    ("boltz.model.layers.pair_averaging", "PairWeightedAveraging"): FusedPairWeightedAveraging,
    ("boltz.model.layers.outer_product_mean", "OuterProductMean"): FusedOuterProductMean,
    # (OpenFold's module, without the gate's and the output's biases)
    ("boltz.model.layers.triangular_attention.attention", "TriangleAttention"): FusedOpenFoldTriangleAttention,
    ("boltz.model.layers.triangular_attention.attention", "TriangleAttentionEndingNode"): FusedOpenFoldTriangleAttention,
    (_TRIANGLE_MULT, "TriangleMultiplicationOutgoing"): FusedTriangleMultiplication,
    (_TRIANGLE_MULT, "TriangleMultiplicationIncoming"): FusedTriangleMultiplication,
    ("boltz.model.layers.transition", "Transition"): FusedTransition,
    ("boltz.model.layers.attentionv2", "AttentionPairBias"): FusedAttentionPairBias,
}


_DIFFUSION_MODULES = (("boltz.model.modules.diffusionv2", "DiffusionModule"),
                      ("boltz.model.modules.diffusion", "DiffusionModule"))


def patch(model: nn.Module, diffusion_graphs: bool = False) -> list[str]:
    """Replaces, in place, every Boltz pair-weighted averaging, Outer Product Mean, triangle attention, triangle
    multiplication, transition and (Boltz-2) attention with pair bias module among `model`'s descendants by
    evofuse's, and gives each PairformerLayer the inference forward that updates one copy of the pair
    (`_pairformer_inference_forward`); returns the names of the modules replaced. With `diffusion_graphs`, the
    diffusion module's network (`DiffusionModule`, called once a sampling step) replays its inference calls from a
    CUDA graph from a prediction's second step on (`_replay.Replayed`)."""
    replaced = patch_modules(model, REPLACEMENTS)
    for module in model.modules():
        kind = (type(module).__module__, type(module).__name__)
        if kind == _PAIRFORMER_LAYER:
            module.forward = types.MethodType(_pairformer_inference_forward, module)
        elif diffusion_graphs and kind in _DIFFUSION_MODULES:
            module.forward = Replayed(types.MethodType(type(module).forward, module), module)
    return replaced


def unpatch(model: nn.Module) -> list[str]:
    """Puts back the modules `patch` replaced inside `model`, the PairformerLayers' and the diffusion modules' own
    forward; returns the names of the modules put back."""
    for module in model.modules():
        forward = vars(module).get("forward")
        if getattr(forward, "__func__", None) is _pairformer_inference_forward or isinstance(forward, Replayed):
            del module.forward
    return unpatch_modules(model)

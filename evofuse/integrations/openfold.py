"""OpenFold (AlphaFold 2): `patch(model)` puts evofuse's fused kernels in place of every
`openfold.model.msa.MSARowAttentionWithPairBias`, `...msa.MSAColumnAttention` and `...msa.MSAColumnGlobalAttention`
(the extra-MSA stack's), `openfold.model.outer_product_mean.OuterProductMean`,
`openfold.model.triangular_attention.TriangleAttention` (starting and ending node) and
`openfold.model.triangular_multiplicative_update.TriangleMultiplication{Outgoing, Incoming}`,
`openfold.model.evoformer.MSATransition` and `openfold.model.pair_transition.PairTransition` inside
`model`, in place; `unpatch(model)` undoes it.

The replacements hold the original submodules (the same Parameters under the same names: checkpoints
load unchanged) and take OpenFold's calls (`att(m, z, mask, chunk_size, use_memory_efficient_kernel,
use_deepspeed_evo_attention, use_lma, use_flash, inplace_safe, ...)`, `col(m, mask, chunk_size, ...)` (the global
one's `col(m, mask, chunk_size, use_lma)`), `opm(m, mask, chunk_size, inplace_safe)`,
`tri_mul(z, mask, inplace_safe, _add_with_inplace)`, `transition(m, mask, chunk_size)`).
A module evofuse cannot fuse stays as it is, with a warning naming it.
"""

from __future__ import annotations

from torch import nn

from ._adapters import (
    FusedOpenFoldColumnAttention,
    FusedOpenFoldGlobalColumnAttention,
    FusedOpenFoldOuterProductMean,
    FusedOpenFoldRowAttention,
    FusedOpenFoldTriangleAttention,
    FusedOpenFoldTriangleMultiplication,
    FusedTransition,
)
from ._patching import patch_modules, unpatch_modules

__all__ = ["patch", "unpatch"]

class FusedOpenFoldTransition(FusedTransition):
    """OpenFold's MSATransition and PairTransition (AF2 Algorithms 9 and 15: `layer_norm`, `linear_1`, ReLU,
    `linear_2`, with biases; the output times the mask)."""

    PARTS = ("layer_norm", "linear_1", None, "linear_2")
    ACTIVATION = "relu"
    MASKED = True


REPLACEMENTS = {
    ("openfold.model.msa", "MSAColumnAttention"): FusedOpenFoldColumnAttention,
    ("openfold.model.msa", "MSAColumnGlobalAttention"): FusedOpenFoldGlobalColumnAttention,
    ("openfold.model.msa", "MSARowAttentionWithPairBias"): FusedOpenFoldRowAttention,
    ("openfold.model.outer_product_mean", "OuterProductMean"): FusedOpenFoldOuterProductMean,
    ("openfold.model.triangular_attention", "TriangleAttention"): FusedOpenFoldTriangleAttention,  # (starting node)
    ("openfold.model.triangular_attention", "TriangleAttentionEndingNode"): FusedOpenFoldTriangleAttention,
    ("openfold.model.triangular_multiplicative_update", "TriangleMultiplicationOutgoing"):
        FusedOpenFoldTriangleMultiplication,
    ("openfold.model.triangular_multiplicative_update", "TriangleMultiplicationIncoming"):
        FusedOpenFoldTriangleMultiplication,
    ("openfold.model.evoformer", "MSATransition"): FusedOpenFoldTransition,
    ("openfold.model.pair_transition", "PairTransition"): FusedOpenFoldTransition,
}


def patch(model: nn.Module) -> list[str]:
    """Replaces, in place, every OpenFold row attention with pair bias, column and global column attention, Outer
    Product Mean, triangle attention, triangle multiplication and transition among `model`'s descendants by evofuse's;
    returns the names replaced."""
    return patch_modules(model, REPLACEMENTS)


def unpatch(model: nn.Module) -> list[str]:
    """Puts back the modules `patch` replaced inside `model`; returns their names."""
    return unpatch_modules(model)

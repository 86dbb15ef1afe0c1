"""OpenFold (AlphaFold 2): `patch(model)` puts evofuse's fused kernels in place of every
`openfold.model.msa.MSARowAttentionWithPairBias` and `openfold.model.outer_product_mean.OuterProductMean`
inside `model`, in place; `unpatch(model)` undoes it.

OpenFold is not on the package index in a usable form, so its modules are recognized by their class's module
and name. The replacements hold the original submodules (the same Parameters under the same names: checkpoints
load unchanged) and take OpenFold's calls (`att(m, z, mask, chunk_size, use_memory_efficient_kernel,
use_deepspeed_evo_attention, use_lma, use_flash, inplace_safe, ...)`, `opm(m, mask, chunk_size, inplace_safe)`).
A module evofuse cannot fuse stays as it is, with a warning naming it.
"""

from __future__ import annotations

from torch import nn

from ._adapters import FusedOpenFoldOuterProductMean, FusedOpenFoldRowAttention
from ._patching import patch_modules, unpatch_modules
from ._patching import unsupported as _unsupported

__all__ = ["patch", "unpatch"]

_REPLACEMENTS = {
    ("openfold.model.msa", "MSARowAttentionWithPairBias"): FusedOpenFoldRowAttention,
    ("openfold.model.outer_product_mean", "OuterProductMean"): FusedOpenFoldOuterProductMean,
}


def _replacement(module: nn.Module, name: str) -> nn.Module | None:
    kind = (type(module).__module__, type(module).__name__)
    fused = _REPLACEMENTS.get(kind)
    if fused is None:
        return None
    reason = fused.unsupported_reason(module)
    if reason:
        _unsupported(name, kind[1], reason)
        return None
    return fused(module)


def patch(model: nn.Module) -> list[str]:
    """Replaces, in place, every OpenFold row attention with pair bias and Outer Product Mean among `model`'s
    descendants by evofuse's; returns the names of the modules replaced."""
    return patch_modules(model, _replacement)


def unpatch(model: nn.Module) -> list[str]:
    """Puts back the modules `patch` replaced inside `model`; returns their names."""
    return unpatch_modules(model)

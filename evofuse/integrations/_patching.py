"""What every model family's `patch` and `unpatch` share: walking a model and swapping its submodules in place,
remembering each original, and why a module cannot be fused."""

from __future__ import annotations

import warnings
import weakref

from torch import nn

from ..ops.outer_product_mean.op import FUSED_HIDDEN_DIMS
from ..ops.pair_weighted_averaging.op import MAX_HEAD_WIDTH, MAX_MSA_WIDTH
from ..reference import LAYER_NORM_EPS

_ORIGINALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # replacement -> the module it replaced


def check_layer_norm(layer_norm: nn.Module) -> str | None:
    """Why a model's LayerNorm cannot be fused (None if it can): an affine LayerNorm of eps 1e-5."""
    if getattr(layer_norm, "weight", None) is None or getattr(layer_norm, "bias", None) is None:
        return "a LayerNorm without scale or offset"
    if getattr(layer_norm, "eps", LAYER_NORM_EPS) != LAYER_NORM_EPS:
        return f"a LayerNorm eps {layer_norm.eps} (fused: {LAYER_NORM_EPS})"
    return None


def check_linears(*linears: nn.Module) -> str | None:
    """Why a model's linear layers cannot be fused (None if they can): one that fixes its own compute precision
    (OpenFold3's `Linear(precision=...)`) would not compute in the dtype evofuse takes."""
    if any(getattr(linear, "precision", None) is not None for linear in linears):
        return "a linear layer with its own fixed precision"
    return None


def check_outer_product_mean(c_hidden: int, eps: float | None = None) -> str | None:
    """Why an Outer Product Mean cannot be fused (None if it can)."""
    if c_hidden not in FUSED_HIDDEN_DIMS:
        return f"c_hidden {c_hidden} (fused: {FUSED_HIDDEN_DIMS})"
    if eps is not None and not eps > 0:
        return f"eps {eps} (fused: > 0)"
    return None


def check_pair_weighted_averaging(head_width: int, msa_width: int, *linears: nn.Module) -> str | None:
    """Why a pair-weighted averaging cannot be fused (None if it can): head width, MSA width c_m and bias-free
    projections."""
    if head_width > MAX_HEAD_WIDTH:
        return f"head width {head_width} (fused: up to {MAX_HEAD_WIDTH})"
    if msa_width > MAX_MSA_WIDTH:
        return f"MSA width {msa_width} (fused: up to {MAX_MSA_WIDTH})"
    if any(getattr(linear, "bias", None) is not None for linear in linears):
        return "projections with biases"
    return None


def _require_module(model: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def patch_modules(model: nn.Module, replacements: dict[tuple[str, str], type[nn.Module]]) -> list[str]:
    """Replaces, in place, each descendant of `model` whose class (its module, its name) is a key of
    `replacements` by that replacement built from it, unless the replacement's `unsupported_reason(module)`
    names a reason: then the module stays, with a warning. Returns the names replaced."""
    _require_module(model)
    replaced = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            fused = replacements.get((type(child).__module__, type(child).__name__))
            if fused is None:
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            reason = fused.unsupported_reason(child)
            if reason:
                warnings.warn(f"evofuse: {name} ({type(child).__name__}) left unpatched: {reason}", RuntimeWarning,
                              stacklevel=3)
                continue
            new = fused(child)
            _ORIGINALS[new] = child
            setattr(parent, child_name, new)
            replaced.append(name)
    return replaced


def unpatch_modules(model: nn.Module) -> list[str]:
    """Puts back every module that `patch_modules` replaced inside `model`; returns their names."""
    _require_module(model)
    restored = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if child in _ORIGINALS:
                setattr(parent, child_name, _ORIGINALS.pop(child))
                restored.append(f"{parent_name}.{child_name}" if parent_name else child_name)
    return restored

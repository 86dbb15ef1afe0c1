"""Replacement modules shared by several model families.

`FusedOpenFoldOuterProductMean` stands in for the Outer Product Mean of OpenFold (AF2), OpenFold3 and Protenix,
which share one definition: submodules `layer_norm`, `linear_1`, `linear_2` (biases optional) and `linear_out`,
the outer products through linear_out, then divided by eps + the rows where residues i and j both are
("count_ij_after"); called as `opm(m, mask=None, chunk_size=None, inplace_safe=False)`.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import functional
from ._patching import check_layer_norm, check_outer_product_mean, compute_dtype


class FusedOpenFoldOuterProductMean(nn.Module):
    """An OpenFold-style OuterProductMean computed by `evofuse.outer_product_mean`; holds the original's
    submodules (the same Parameters under the same names). Under `torch.autocast` it computes in the autocast
    dtype, as the original's linear layers do; `chunk_size` and `inplace_safe` are accepted and not needed."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_m, self.c_z, self.c_hidden, self.eps = original.c_m, original.c_z, original.c_hidden, original.eps
        for name in ("layer_norm", "linear_1", "linear_2", "linear_out"):
            setattr(self, name, getattr(original, name))

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        """Why `module` cannot be replaced (None if it can)."""
        if any(getattr(getattr(module, n), "precision", None) is not None for n in ("linear_1", "linear_2",
                                                                                   "linear_out")):
            return "a linear layer with its own fixed precision"
        return check_outer_product_mean(module.c_hidden, module.eps) or check_layer_norm(module.layer_norm)

    def compute_dtype(self, m: torch.Tensor) -> torch.dtype:
        return compute_dtype(m)

    def forward(self, m: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None,
                inplace_safe: bool = False) -> torch.Tensor:
        """m (*, S, N, c_m), mask (*, S, N) or None -> (*, N, N, c_z), in the dtype the original returns: the
        autocast dtype under autocast (its counts come from an autocast einsum), else m's promoted with the
        mask's."""
        dtype = self.compute_dtype(m)
        with torch.autocast(m.device.type, enabled=False):
            out = functional.outer_product_mean(
                m.to(dtype), mask, self.layer_norm.weight, self.layer_norm.bias, self.linear_1.weight,
                self.linear_1.bias, self.linear_2.weight, self.linear_2.bias, self.linear_out.weight,
                self.linear_out.bias, normalization="count_ij_after", count_eps=self.eps)
        if torch.is_autocast_enabled(m.device.type) or mask is None or not mask.is_floating_point():
            return out
        return out.to(torch.promote_types(out.dtype, mask.dtype))

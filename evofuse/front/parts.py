"""What the modules share: the option checks, and OpenFold's gated attention's projections under its names."""

from __future__ import annotations

from torch import nn

from .._dispatch import IMPLS
from .._runtime import PRECISIONS


def check_options(precision: str, impl: str | None, mask_mode: str | None = None, mask_modes: tuple = ()) -> None:
    """A module's options, checked where it is built (the functional forms check them at each call)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if impl is not None and impl not in IMPLS:
        raise ValueError(f"impl must be None or one of {IMPLS}, got {impl!r}")
    if mask_mode is not None and mask_mode not in mask_modes:
        raise ValueError(f"mask_mode must be one of {mask_modes}, got {mask_mode!r}")


class GatedAttention(nn.Module):
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

"""The transition module (Boltz's names)."""

from __future__ import annotations

import torch
from torch import nn

from .. import functional
from ..reference import ACTIVATIONS
from ._common import check_options


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
        check_options(precision, impl)
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

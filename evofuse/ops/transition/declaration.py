"""The transition: its declaration, read top-down: the functional form (its `Form`, which the front door reads, and
its documented signature), the module (the models' parameter names) and its registry entry (`OPERATION`: the suite's
cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ...front.declaration import Case, Operation, linears
from ...front.door import Form, front, one_of
from ...front.parts import check_options
from ...reference import ACTIVATIONS

if triton_available():  # the kernels (without Triton every call takes the reference)
    from ...stages.layer_norm_linear import joined_bias
    from . import op
else:
    op = joined_bias = None


def _relu_has_no_b(args: dict) -> None:
    if args["activation"] == "relu" and (args["b_weight"] is not None or args["b_bias"] is not None):
        raise ValueError("b_weight and b_bias must be None for activation='relu'")


def _transition(a, train):
    if a.sizes["H"] == 0:  # (no hidden rows: the output is the bias alone)
        return ref.transition_reference(a.x, a.mask, a.layer_norm_weight, a.layer_norm_bias, a.a_weight, a.a_bias,
                                        a.b_weight, a.b_bias, a.out_weight, a.out_bias, activation=a.activation)
    glu = a.activation == "swiglu"
    w_in, b_in = ((torch.cat([a.a_weight, a.b_weight]), joined_bias([a.a_bias, a.b_bias], [a.a_weight, a.b_weight]))
                  if glu else (a.a_weight, a.a_bias))
    return op.transition(a.x, a.mask, a.layer_norm_weight, a.layer_norm_bias, w_in, b_in, a.out_weight, a.out_bias,
                         glu, a.precision, train)


TRANSITION = Form(
    "transition", "rows", ("x", "mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D", a_weight="H D", a_bias="H", b_weight="H D", b_bias="H",
         out_weight="C H", out_bias="C"),
    ref.transition_reference, _transition,
    optional=lambda args: ("a_bias", "b_bias", "out_bias") + (("b_weight",) if args["activation"] == "relu" else ()),
    rules={"activation": one_of(ref.ACTIVATIONS)}, check=_relu_has_no_b,
    supports=lambda a: "float64" if a.dtype == torch.float64 else None)


@front(TRANSITION)
def transition(
    x: torch.Tensor,
    mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    a_weight: torch.Tensor,
    a_bias: torch.Tensor | None,
    b_weight: torch.Tensor | None,
    b_bias: torch.Tensor | None,
    out_weight: torch.Tensor,
    out_bias: torch.Tensor | None,
    *,
    activation: str = "swiglu",
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """The transition: LayerNorm, then a two-layer MLP, over every row of x (the MSA's, the pair's or the single
    representation's; `evofuse.reference.transition_reference` is the definition).

    Args:
        x: (..., D) float16, bfloat16, float32 or float64, any strides and leading dimensions.
        mask: x's leading shape, 0/1 as bool, integer or floating, or None: the output's rows times it (OpenFold's and
            OpenFold3's; Boltz's and Protenix's have none).
        layer_norm_weight, layer_norm_bias: (D,).
        a_weight: (H, D), a_bias (H,) or None; b_weight (H, D) and b_bias (H,) or None for "swiglu", both None for
            "relu"; out_weight (C, H), out_bias (C,) or None.
        activation: "swiglu" (silu(a) * b: AF3 Algorithm 11, Boltz, Protenix, OpenFold3) or "relu" (relu(a): AF2
            Algorithms 9 and 15, OpenFold).
        precision, impl: as for `outer_product_mean`.
    Returns:
        (..., C) in x's dtype; the parameters are cast to it. 16-bit inputs accumulate in float32; the hidden rows are
        never in memory whole (blocks of rows), and a training call keeps nothing but x for the backward.
    """


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
        return transition(
            x, mask, **TRANSITION.weights(layer_norm=self.norm, a=self.fc1, b=self.fc2, out=self.fc3),
            activation=self.activation, precision=self.precision,
            impl=impl if impl is not None else self.impl)


OPERATION = Operation(
    "trans", lambda c, **kw: Transition(c.D, c.width, **kw), "norm",
    linears("norm", "fc1", "fc2", "fc3"), ref.transition_reference, lambda c: {}, "msa", "residue",
    lambda c: 2.0 * c.B * c.S * c.N * c.D * 3 * c.width,
    lambda c: c.B * c.S * c.N * c.width * 8 * 4,  # (a, b, silu(a) and h: (B, S, N, H) each)
    (Case("trans-seed", "trans", 2, 8, 32, 64, 0, 256),
     Case("trans-msa-af3", "trans", 1, 1024, 384, 64, 0, 256),  # the AF3-family MSA module's transition (c_m 64)
     Case("trans-pair-384", "trans", 1, 384, 384, 128, 0, 512),  # the Pairformer's pair transition (c_z 128)
     Case("trans-pair-768", "trans", 1, 768, 768, 128, 0, 512)))

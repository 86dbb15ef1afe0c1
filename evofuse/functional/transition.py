"""The transition's functional form (see `evofuse.functional`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from ._common import trans
from ._door import Form, front, one_of


def _relu_has_no_b(args: dict) -> None:
    if args["activation"] == "relu" and (args["b_weight"] is not None or args["b_bias"] is not None):
        raise ValueError("b_weight and b_bias must be None for activation='relu'")


def _transition(a, train):
    if a.sizes["H"] == 0:  # (no hidden rows: the output is the bias alone)
        return ref.transition_reference(a.x, a.mask, a.layer_norm_weight, a.layer_norm_bias, a.a_weight, a.a_bias,
                                        a.b_weight, a.b_bias, a.out_weight, a.out_bias, activation=a.activation)
    glu = a.activation == "swiglu"
    w_in, b_in = ((torch.cat([a.a_weight, a.b_weight]), trans.joined_bias([a.a_bias, a.b_bias], [a.a_weight, a.b_weight]))
                  if glu else (a.a_weight, a.a_bias))
    return trans.transition(a.x, a.mask, a.layer_norm_weight, a.layer_norm_bias, w_in, b_in, a.out_weight, a.out_bias,
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

"""The transition's functional form (see `evofuse.functional`)."""

from __future__ import annotations

import torch

from .. import reference as ref
from .._validation import check_rows_input
from ._common import cast, check_last, check_options, dispatch, follows_autocast, parameters, trans


@follows_autocast
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
    check_options(precision)
    if activation not in ref.ACTIVATIONS:
        raise ValueError(f"activation must be one of {ref.ACTIVATIONS}, got {activation!r}")
    check_rows_input(x, mask)
    glu = activation == "swiglu"
    params = dict(layer_norm_weight=layer_norm_weight, layer_norm_bias=layer_norm_bias, a_weight=a_weight,
                  a_bias=a_bias, b_weight=b_weight, b_bias=b_bias, out_weight=out_weight, out_bias=out_bias)
    if not glu and (b_weight is not None or b_bias is not None):
        raise ValueError("b_weight and b_bias must be None for activation='relu'")
    sizes = parameters(x, "x", params, dict(layer_norm_weight="D", layer_norm_bias="D", a_weight="H D", a_bias="H",
                                            b_weight="H D", b_bias="H", out_weight="C H", out_bias="C"),
                       optional=("a_bias", "b_bias", "out_bias") + (() if glu else ("b_weight",)))
    check_last(x, "x", "...", sizes["D"], "layer_norm_weight")
    weights = cast(params.values(), x.dtype)

    def reference():
        return ref.transition_reference(x, mask, *weights, activation=activation)

    def fused(train):
        if sizes["H"] == 0:  # (no hidden rows: the output is the bias alone)
            return reference()
        lnw, lnb, wa, ba, wb, bb, wo, bo = weights
        w_in, b_in = (wa, ba) if not glu else (torch.cat([wa, wb]), trans.joined_bias([ba, bb], [wa, wb]))
        return trans.transition(x, mask, lnw, lnb, w_in, b_in, wo, bo, glu, precision, train)

    return dispatch("transition", x, (x, *weights), impl, reference, fused,
                    "float64" if x.dtype == torch.float64 else None)

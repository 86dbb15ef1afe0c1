"""The activations that join a gated linear's halves a and b, and their gradients: one definition for the kernels
that make h (`layer_norm_glu`, its pass through tensor descriptors) and those that take its gradient."""

import triton
import triton.language as tl


@triton.jit
def activation(a, b, ACTIVATION: tl.constexpr):
    """h from the pre-activations a and b (float32; b unused for "relu"), its products in the order the backwards'
    kernels follow where they make h again (`transition_backward_kernel`): from the same a and b, the same bits."""
    if ACTIVATION == "swiglu":
        h = a * tl.sigmoid(a) * b
    elif ACTIVATION == "sigmoid":
        h = a * tl.sigmoid(b)
    else:
        h = tl.maximum(a, 0.0)
    return h


@triton.jit
def activation_grad(a, b, dh, ACTIVATION: tl.constexpr):
    """(da, db) float32 of h = `activation`(a, b) for h's gradient dh (the mask already taken): "sigmoid" da = dh s,
    db = dh a s (1 - s) with s = sigmoid(b) (triangle multiplication's gates); "swiglu" da = dh b silu'(a), db = dh
    silu(a); "relu" da = dh where a > 0 (db unused)."""
    if ACTIVATION == "sigmoid":
        s = tl.sigmoid(b)
        return dh * s, dh * a * s * (1.0 - s)
    elif ACTIVATION == "swiglu":
        s = tl.sigmoid(a)
        return dh * b * (s + a * s * (1.0 - s)), dh * a * s
    else:
        return tl.where(a > 0, dh, 0.0), dh

"""float32 values on float16 tensor cores: the power-of-two scale that brings a tensor into float16's range,
and its high and low float16 halves (x = hi + lo to ~2**-22). Shared by the LayerNorm + linear stage (its
float32 weights) and the Outer Product Mean (its float32 operands).

A tensor is scaled by 2**(SCALE_TOP - e), 2**e the power of two just above its largest finite magnitude (or
2**(e-1) equal to it), so that its largest magnitude lands in [2**(SCALE_TOP-1), 2**SCALE_TOP): a product
summed over rows and divided by their counts stays below 2**14, within float16's range, and values far below
the largest keep ~2**-24 absolute precision in their halves.
"""

from __future__ import annotations

import triton
import triton.language as tl

SCALE_TOP = tl.constexpr(7)


@triton.jit
def finite_abs(x):
    """|x|, with Inf and NaN as 0 (NaN < Inf is false)."""
    return tl.where(tl.abs(x) < float("inf"), tl.abs(x), 0.0)


@triton.jit
def power_of_two_scales(largest):
    """2**(SCALE_TOP - e) for each largest magnitude (any shape, float32, finite), 2**e read from its exponent
    bits (2**SCALE_TOP where it is 0; e at least -120 for subnormal magnitudes, so that the scale stays a normal
    float32): exact powers of two."""
    exponent = ((largest.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 126  # -126 (subnormal) to 128
    exponent = tl.maximum(tl.where(largest > 0, exponent, 0), -120)
    biased = (127 - exponent) + SCALE_TOP  # the float32 exponent field of the scale
    return (biased << 23).to(tl.float32, bitcast=True)


@triton.jit
def store_halves(ptr, stride_h, x, ok, TERMS: tl.constexpr):
    """x (float32, already scaled) as its float16 high half at ptr and, with TERMS 3, its low half x - high
    stride_h on."""
    x_hi = x.to(tl.float16)
    tl.store(ptr, x_hi, mask=ok)
    if TERMS == 3:
        tl.store(ptr + stride_h, (x - x_hi.to(tl.float32)).to(tl.float16), mask=ok)

"""Triangle multiplication's gating kernels, over the channel-major projections (K, M) for M = B N N pairs: one pass
each way in place of PyTorch's chain of float32 temporaries."""

import triton
import triton.language as tl


@triton.jit
def gate_kernel(
    proj_ptr, stride_pk,  # the projections (K, M), channel major: p's 2c planes, then g's 2c
    mask_ptr,  # the pair mask (M,) of any real dtype (unused without HAS_MASK)
    ab_ptr, stride_ak,  # out: a and b (2c, M) in ab's dtype
    M, C2,  # pairs, and 2c
    HAS_MASK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """ab[k, m] = sigmoid(g[k, m]) * p[k, m] * mask[m] in float32, for a block of BLOCK pairs of one plane k."""
    k = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    ok = offs < M
    p = tl.load(proj_ptr + k * stride_pk + offs, mask=ok, other=0.0).to(tl.float32)
    g = tl.load(proj_ptr + (k + C2) * stride_pk + offs, mask=ok, other=0.0).to(tl.float32)
    ab = p * tl.sigmoid(g)
    if HAS_MASK:
        ab = ab * tl.load(mask_ptr + offs, mask=ok, other=0).to(tl.float32)
    tl.store(ab_ptr + k * stride_ak + offs, ab.to(ab_ptr.dtype.element_ty), mask=ok)


@triton.jit
def gate_backward_kernel(
    proj_ptr, stride_pk,  # the projections (K, M), channel major, as gate_kernel reads them
    mask_ptr,  # the pair mask (M,) (unused without HAS_MASK)
    dab_ptr, stride_dk,  # the gradient of a and b (2c, M)
    dproj_ptr, stride_qk,  # out: p's and g's gradients, planes 0 .. 4c of the projections' gradient (K, M)
    M, C2,
    HAS_MASK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """From ab = sigmoid(g) p mask: dp = dab mask sigmoid(g), dg = dab mask p sigmoid(g) (1 - sigmoid(g)), in float32,
    for a block of BLOCK pairs of one plane k < 2c."""
    k = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    ok = offs < M
    p = tl.load(proj_ptr + k * stride_pk + offs, mask=ok, other=0.0).to(tl.float32)
    s = tl.sigmoid(tl.load(proj_ptr + (k + C2) * stride_pk + offs, mask=ok, other=0.0).to(tl.float32))
    d = tl.load(dab_ptr + k * stride_dk + offs, mask=ok, other=0.0).to(tl.float32)
    if HAS_MASK:
        d = d * tl.load(mask_ptr + offs, mask=ok, other=0).to(tl.float32)
    dtype = dproj_ptr.dtype.element_ty
    tl.store(dproj_ptr + k * stride_qk + offs, (d * s).to(dtype), mask=ok)
    tl.store(dproj_ptr + (k + C2) * stride_qk + offs, (d * p * s * (1.0 - s)).to(dtype), mask=ok)

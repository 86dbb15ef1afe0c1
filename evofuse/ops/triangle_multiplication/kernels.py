"""Triangle multiplication's gating kernels (the input gate's forward is `layer_norm_glu`'s), over channel-major
planes of M = B N N pairs: one pass each in place of PyTorch's chain of float32 temporaries."""

import triton
import triton.language as tl


@triton.jit
def gate_backward_kernel(
    proj_ptr, stride_pk,  # p's 2c planes then g's 2c (4c, M), channel major
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


@triton.jit
def out_gate_kernel(
    y_ptr,  # the output projection (M, c_z), rows contiguous
    go_ptr, stride_gk,  # g_out's pre-activation, channel major: c_z planes of M
    out_ptr,  # out: y * sigmoid(g_out) (M, c_z), rows contiguous (may be y_ptr: in place)
    M, CZ,
    BLOCK_M: tl.constexpr,
    BLOCK_C: tl.constexpr,  # c_z rounded up to a power of two
):
    """out = y * sigmoid(g_out) for a block of BLOCK_M pairs, every channel: y read by rows, g_out by planes."""
    offs_m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_c = tl.arange(0, BLOCK_C)
    ok = (offs_m < M)[:, None] & (offs_c < CZ)[None, :]  # [BLOCK_M, BLOCK_C]
    rows = offs_m[:, None] * CZ + offs_c[None, :]
    y = tl.load(y_ptr + rows, mask=ok, other=0.0).to(tl.float32)
    go = tl.load(go_ptr + offs_c[None, :].to(tl.int64) * stride_gk + offs_m[:, None], mask=ok, other=0.0)
    tl.store(out_ptr + rows, (y * tl.sigmoid(go.to(tl.float32))).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def out_gate_backward_kernel(
    grad_ptr, stride_gm, stride_gc,  # the output's gradient (M, c_z), any strides (a broadcast one included)
    y_ptr,  # the output projection (M, c_z), rows contiguous
    go_ptr, stride_gk,  # g_out's pre-activation, channel major
    dy_ptr,  # out: y's gradient grad * sigmoid(g_out) (M, c_z), rows contiguous
    dgo_ptr, stride_dk,  # out: g_out's gradient grad * y * sigmoid'(g_out), channel major
    M, CZ,
    BLOCK_M: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """The output gate's backward for a block of BLOCK_M pairs, every channel, in float32."""
    offs_m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_c = tl.arange(0, BLOCK_C)
    ok = (offs_m < M)[:, None] & (offs_c < CZ)[None, :]  # [BLOCK_M, BLOCK_C]
    rows = offs_m[:, None] * CZ + offs_c[None, :]
    planes = offs_c[None, :].to(tl.int64) * stride_gk + offs_m[:, None]
    g = tl.load(grad_ptr + offs_m[:, None] * stride_gm + offs_c[None, :] * stride_gc, mask=ok, other=0.0)
    g = g.to(tl.float32)
    y = tl.load(y_ptr + rows, mask=ok, other=0.0).to(tl.float32)
    s = tl.sigmoid(tl.load(go_ptr + planes, mask=ok, other=0.0).to(tl.float32))
    tl.store(dy_ptr + rows, (g * s).to(dy_ptr.dtype.element_ty), mask=ok)
    tl.store(dgo_ptr + offs_c[None, :].to(tl.int64) * stride_dk + offs_m[:, None],
             (g * y * s * (1.0 - s)).to(dgo_ptr.dtype.element_ty), mask=ok)

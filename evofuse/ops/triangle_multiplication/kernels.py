"""Triangle multiplication's kernels beside `layer_norm_glu` (which makes a and b, and in the backward p's and g's
gradients) and cuBLAS (their product): the output side's two LayerNorms, projections and gate in one pass, and the
output gate's backward, over M = B N N pairs: one pass each in place of PyTorch's chain of float32 temporaries."""

import triton
import triton.language as tl

from ..layer_norm_glu import projected_rows


@triton.jit
def output_kernel(
    t_ptr, stride_tm, stride_tc,  # the product t as rows (M, c): channel major, its rows' channels M apart
    lno_w_ptr, lno_b_ptr,  # LN_out's weight and bias (c,)
    wp_ptr, stride_pk, stride_pc,  # p_out's weight (c_z, c)
    bp_ptr,  # HAS_P_BIAS: p_out's bias (c_z,)
    z_ptr, stride_zm, stride_zd,  # the pair as rows (M, c_z)
    lni_w_ptr, lni_b_ptr,  # LN_in's weight and bias (c_z,)
    wg_ptr, stride_gk, stride_gd,  # g_out's weight (c_z, c_z)
    bg_ptr,  # HAS_G_BIAS: g_out's bias (c_z,)
    out_ptr,  # out: (M, c_z), rows contiguous
    y_ptr,  # STORE: out, the output projection before its gate (M, c_z), rows contiguous
    go_ptr,  # STORE: out, g_out's pre-activation (c_z, M), channel major
    M, C, CZ, eps,
    M_BUCKET, CZ_BUCKET,  # autotuning key only
    HAS_P_BIAS: tl.constexpr,
    HAS_G_BIAS: tl.constexpr,
    STORE: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """out = p_out(LN_out(t)) * sigmoid(g_out(LN_in(z))) for BLOCK_M pairs and BLOCK_N output channels: both
    LayerNorms on chip (`projected_rows`, the normalized rows and both projections rounded as the reference's), the
    gate in float32, out rounded once; y and g_out's pre-activation written where a backward needs them."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    m_ok = offs_m < M
    n_ok = offs_n < CZ
    rows = offs_m.to(tl.int64)[:, None]  # [BLOCK_M, 1]
    cols = offs_n.to(tl.int64)[None, :]  # [1, BLOCK_N]
    dtype = z_ptr.dtype.element_ty
    y, _ = projected_rows(t_ptr + rows * stride_tm, stride_tc, m_ok, lno_w_ptr, lno_b_ptr, wp_ptr + cols * stride_pk,
                          stride_pk, stride_pc, bp_ptr, offs_n, n_ok, C, 0, eps, dtype, False, HAS_P_BIAS, PRECISION,
                          BLOCK_M, BLOCK_N, BLOCK_D)
    g, _ = projected_rows(z_ptr + rows * stride_zm, stride_zd, m_ok, lni_w_ptr, lni_b_ptr, wg_ptr + cols * stride_gk,
                          stride_gk, stride_gd, bg_ptr, offs_n, n_ok, CZ, 0, eps, dtype, False, HAS_G_BIAS, PRECISION,
                          BLOCK_M, BLOCK_N, BLOCK_D)
    ok = m_ok[:, None] & n_ok[None, :]
    tl.store(out_ptr + rows * CZ + cols, (y.to(tl.float32) * tl.sigmoid(g.to(tl.float32))).to(dtype), mask=ok)
    if STORE:
        tl.store(y_ptr + rows * CZ + cols, y, mask=ok)
        tl.store(go_ptr + cols * M + rows, g, mask=ok)


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

"""Triangle multiplication's kernel beside `layer_norm_glu` (which makes a and b, and in the backward p's and g's
gradients) and cuBLAS (their product): the output side's two LayerNorms, projections and gate in one pass over M = B N
N pairs, forward, and in the backward the output gate's gradients from y and g_out made again on chip: one pass each in
place of PyTorch's chain of float32 temporaries, and nothing of the output side kept for the backward but t."""

import triton
import triton.language as tl

from ...stages.layer_norm_glu import normalized_rows, normalized_rows_projected, projected_rows


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
    grad_ptr, stride_dm, stride_dn,  # GRAD: the output's gradient (M, c_z), any strides (a broadcast one included)
    out_ptr,  # out: (M, c_z), rows contiguous: the output, or with GRAD y's gradient grad * sigmoid(g_out)
    dgo_ptr, stride_gc,  # GRAD: out, g_out's pre-activation's gradient grad * y * sigmoid'(g_out) (c_z, M), channel
    # major: its channels stride_gc apart, its rows contiguous
    M, C, CZ, eps,
    M_BUCKET, CZ_BUCKET,  # autotuning key only
    HAS_P_BIAS: tl.constexpr,
    HAS_G_BIAS: tl.constexpr,
    GRAD: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ROW_STEPS: tl.constexpr = 1,  # > 1: whole rows (BLOCK_D >= c, c_z) normalized once for up to ROW_STEPS blocks of BLOCK_N
):
    """y = p_out(LN_out(t)) and g = g_out(LN_in(z)) for BLOCK_M pairs and BLOCK_N (ROW_STEPS x BLOCK_N) output
    channels, both LayerNorms on chip (the normalized rows and both projections rounded as the reference's), then out =
    y * sigmoid(g) rounded once; with GRAD, the gate's backward in float32 instead (y and g made again, so that the
    forward keeps neither). One block a program (`projected_rows`) reads its rows three times for each block of
    BLOCK_N; whole rows (`normalized_rows`) are read and normalized once."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    m_ok = offs_m < M
    rows = offs_m.to(tl.int64)[:, None]  # [BLOCK_M, 1]
    dtype = z_ptr.dtype.element_ty
    if ROW_STEPS == 1:
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
        n_ok = offs_n < CZ
        cols = offs_n.to(tl.int64)[None, :]  # [1, BLOCK_N]
        y, _ = projected_rows(t_ptr + rows * stride_tm, stride_tc, m_ok, lno_w_ptr, lno_b_ptr, wp_ptr + cols * stride_pk,
                              stride_pk, stride_pc, bp_ptr, offs_n, n_ok, C, 0, eps, dtype, False, HAS_P_BIAS,
                              PRECISION, BLOCK_M, BLOCK_N, BLOCK_D)
        g, _ = projected_rows(z_ptr + rows * stride_zm, stride_zd, m_ok, lni_w_ptr, lni_b_ptr, wg_ptr + cols * stride_gk,
                              stride_gk, stride_gd, bg_ptr, offs_n, n_ok, CZ, 0, eps, dtype, False, HAS_G_BIAS,
                              PRECISION, BLOCK_M, BLOCK_N, BLOCK_D)
        _gate(y, g, rows, m_ok, offs_n, n_ok, grad_ptr, stride_dm, stride_dn, out_ptr, dgo_ptr, stride_gc, CZ, GRAD)
    else:
        xt = normalized_rows(t_ptr + rows * stride_tm, stride_tc, m_ok, lno_w_ptr, lno_b_ptr, C, eps, dtype,
                             BLOCK_D)  # [BLOCK_M, BLOCK_D]
        xz = normalized_rows(z_ptr + rows * stride_zm, stride_zd, m_ok, lni_w_ptr, lni_b_ptr, CZ, eps, dtype,
                             BLOCK_D)  # [BLOCK_M, BLOCK_D]
        n_start = tl.program_id(1) * (ROW_STEPS * BLOCK_N)
        for n0 in range(n_start, tl.minimum(n_start + ROW_STEPS * BLOCK_N, CZ), BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
            n_ok = offs_n < CZ
            y = normalized_rows_projected(xt, wp_ptr, stride_pk, stride_pc, bp_ptr, offs_n, n_ok, C, dtype, HAS_P_BIAS,
                                          PRECISION, BLOCK_D, False)
            g = normalized_rows_projected(xz, wg_ptr, stride_gk, stride_gd, bg_ptr, offs_n, n_ok, CZ, dtype, HAS_G_BIAS,
                                          PRECISION, BLOCK_D, False)
            _gate(y, g, rows, m_ok, offs_n, n_ok, grad_ptr, stride_dm, stride_dn, out_ptr, dgo_ptr, stride_gc, CZ, GRAD)


@triton.jit
def _gate(y, g, rows, m_ok, offs_n, n_ok, grad_ptr, stride_dm, stride_dn, out_ptr, dgo_ptr, stride_gc, CZ,
          GRAD: tl.constexpr):
    """out = y * sigmoid(g) [BLOCK_M, BLOCK_N] (y and g in the pair's dtype) rounded once at rows [BLOCK_M, 1] and
    channels offs_n; with GRAD, y's gradient grad * sigmoid(g) there and g's grad * y * sigmoid'(g) channel major."""
    ok = m_ok[:, None] & n_ok[None, :]
    cols = offs_n.to(tl.int64)[None, :]  # [1, BLOCK_N]
    dtype = out_ptr.dtype.element_ty
    s = tl.sigmoid(g.to(tl.float32))
    if GRAD:
        d = tl.load(grad_ptr + rows * stride_dm + cols * stride_dn, mask=ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + rows * CZ + cols, (d * s).to(dtype), mask=ok)
        tl.store(dgo_ptr + cols * stride_gc + rows, (d * y.to(tl.float32) * s * (1.0 - s)).to(dtype), mask=ok)
    else:
        tl.store(out_ptr + rows * CZ + cols, (y.to(tl.float32) * s).to(dtype), mask=ok)

"""The transition's kernels: the LayerNorm, the input projection and the activation in one pass (the normalized rows
never in memory), and the backward from the output's gradient to the pre-activations' (the hidden rows' gradient on
chip), which also gives back the hidden rows for the output projection's weight gradient (so the forward keeps only
the pre-activations)."""

import triton
import triton.language as tl

from ..layer_norm_rows import row_moments


@triton.jit
def transition_in_kernel(
    x_ptr, stride_xm, stride_xd,  # x: (M, D)
    lnw_ptr, lnb_ptr,  # the LayerNorm's weight and bias (D,)
    w_ptr, stride_wk, stride_wd,  # the input projection (K, D), K = 2H (GLU: a's H rows, then b's) or H
    bias_ptr,  # HAS_BIAS: (K,)
    m_ptr,  # HAS_MASK: the row mask (M,), 0/1 of any dtype
    pre_ptr,  # STORE_PRE: out, the pre-activations (M, K) contiguous, in x's dtype
    h_ptr,  # out: the hidden rows (M, H) contiguous, in x's dtype, times the row mask
    M, D, H, eps,
    M_BUCKET, H_BUCKET,  # autotuning key only
    GLU: tl.constexpr,  # h = silu(a) * b (SwiGLU), else relu(a)
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    STORE_PRE: tl.constexpr,
    PRECISION: tl.constexpr,  # tl.dot's input_precision for float32 rows
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """BLOCK_M rows and BLOCK_N hidden channels: the rows' moments in float32, then LayerNorm(x) chunk by chunk of
    BLOCK_D channels (rounded to x's dtype as the reference's LayerNorm output is) against the projection's a (and b)
    rows on tensor cores, accumulated in float32; a and b rounded to x's dtype (as the reference's linears give them),
    the activation in float32, h times the row mask (a masked row's output is then the bias alone), rounded once."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    m_ok = offs_m < M
    n_ok = offs_n < H
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm  # [BLOCK_M, 1]
    mean, rstd = row_moments(x_rows, m_ok, stride_xd, D, eps, BLOCK_M, BLOCK_D)
    dtype = x_ptr.dtype.element_ty
    acc_a = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    w_a = w_ptr + offs_n.to(tl.int64)[None, :] * stride_wk  # [1, BLOCK_N]
    w_b = w_a + H * stride_wk
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        x = tl.load(x_rows + offs_d[None, :] * stride_xd, mask=m_ok[:, None] & d_ok[None, :], other=0.0)
        xhat = (x.to(tl.float32) - mean[:, None]) * rstd[:, None]  # [BLOCK_M, BLOCK_D]
        lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
        lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
        xn = tl.where(d_ok[None, :], xhat * lnw[None, :] + lnb[None, :], 0.0).to(dtype)
        w_ok = d_ok[:, None] & n_ok[None, :]  # [BLOCK_D, BLOCK_N]
        w_d = offs_d[:, None] * stride_wd
        acc_a = tl.dot(xn, tl.load(w_a + w_d, mask=w_ok, other=0.0), acc_a, input_precision=PRECISION)
        if GLU:
            acc_b = tl.dot(xn, tl.load(w_b + w_d, mask=w_ok, other=0.0), acc_b, input_precision=PRECISION)
    if HAS_BIAS:
        acc_a += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        if GLU:
            acc_b += tl.load(bias_ptr + H + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    a = acc_a.to(dtype)
    ok = m_ok[:, None] & n_ok[None, :]
    rows = offs_m.to(tl.int64)[:, None]
    if GLU:
        b = acc_b.to(dtype)
        h = _silu(a.to(tl.float32)) * b.to(tl.float32)
        if STORE_PRE:
            tl.store(pre_ptr + rows * (2 * H) + H + offs_n[None, :], b, mask=ok)
    else:
        h = tl.maximum(a.to(tl.float32), 0.0)
    if STORE_PRE:
        tl.store(pre_ptr + rows * (H * (1 + GLU)) + offs_n[None, :], a, mask=ok)
    if HAS_MASK:
        h *= tl.load(m_ptr + offs_m, mask=m_ok, other=0).to(tl.float32)[:, None]
    tl.store(h_ptr + rows * H + offs_n[None, :], h.to(dtype), mask=ok)


@triton.jit
def _silu(a):
    return a * tl.sigmoid(a)


@triton.jit
def transition_backward_kernel(
    g_ptr, stride_gm, stride_gc,  # the output's gradient (M, C), any strides (a broadcast one included)
    m_ptr,  # HAS_MASK: the row mask (M,), 0/1 of any dtype
    wo_ptr, stride_wc, stride_wh,  # the output projection (C, H)
    pre_ptr,  # the pre-activations (M, K) contiguous, K = 2H (GLU) or H
    dpre_ptr,  # out: the pre-activations' gradient (M, K) contiguous
    h_ptr,  # out: the hidden rows again, times the row mask (M, H) contiguous, as the forward made them
    M, C, H,
    M_BUCKET, H_BUCKET,  # autotuning key only
    GLU: tl.constexpr,
    HAS_MASK: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,  # output channels c a step
):
    """BLOCK_M rows and BLOCK_N hidden channels: dh = (g mask) W_out on tensor cores in float32 (never in memory),
    then from a (and b), in float32: GLU h = silu(a) b, da = dh b silu'(a) with silu'(a) = s (1 + a (1 - s)) for
    s = sigmoid(a), db = dh silu(a); else h = relu(a), da = dh [a > 0]."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    m_ok = offs_m < M
    n_ok = offs_n < H
    rows = offs_m.to(tl.int64)[:, None]  # [BLOCK_M, 1]
    dtype = pre_ptr.dtype.element_ty
    keep = tl.load(m_ptr + offs_m, mask=m_ok, other=0).to(tl.float32) if HAS_MASK else m_ok.to(tl.float32)
    dh = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(0, C, BLOCK_D):
        offs_c = c0 + tl.arange(0, BLOCK_D)
        c_ok = offs_c < C
        g = tl.load(g_ptr + rows * stride_gm + offs_c[None, :] * stride_gc, mask=m_ok[:, None] & c_ok[None, :],
                    other=0.0)  # [BLOCK_M, BLOCK_D]
        if HAS_MASK:
            g = (g.to(tl.float32) * keep[:, None]).to(dtype)
        w = tl.load(wo_ptr + offs_c[:, None] * stride_wc + offs_n[None, :] * stride_wh,
                    mask=c_ok[:, None] & n_ok[None, :], other=0.0)  # [BLOCK_D, BLOCK_N]
        dh = tl.dot(g.to(dtype), w.to(dtype), dh, input_precision=PRECISION)
    ok = m_ok[:, None] & n_ok[None, :]
    a_at = pre_ptr + rows * (H * (1 + GLU)) + offs_n[None, :]
    a = tl.load(a_at, mask=ok, other=0.0).to(tl.float32)
    da_at = dpre_ptr + rows * (H * (1 + GLU)) + offs_n[None, :]
    if GLU:
        b = tl.load(a_at + H, mask=ok, other=0.0).to(tl.float32)
        s = tl.sigmoid(a)
        silu = a * s
        tl.store(da_at, (dh * b * s * (1.0 + a * (1.0 - s))).to(dtype), mask=ok)
        tl.store(da_at + H, (dh * silu).to(dtype), mask=ok)
        h = silu * b
    else:
        tl.store(da_at, tl.where(a > 0.0, dh, 0.0).to(dtype), mask=ok)
        h = tl.maximum(a, 0.0)
    tl.store(h_ptr + rows * H + offs_n[None, :], (h * keep[:, None]).to(dtype), mask=ok)

"""Pair-weighted averaging's Triton kernels: the weights, the gated output projection, and the backward's
weighted sum dv.

The values v are written head major by the LayerNorm + projection, (h, B, N, S, C) (a head's residues j, MSA
rows s and channels contiguous); the gate g is never written: the gated projection and its backward make it
from the MSA rows (LayerNorm, then proj_g on chip: c_m channels read a row instead of h*C written and read);
w (h, B, N, N) are the weights, one softmax per (b, h, i) shared by every MSA row; the forward's u = w v and the
backward's dw = du v^T are cuBLAS's (op.py). The kernels take each tensor as strides of the einsum's indices, so
that the layouts are the launcher's choice.

`masked_softmax_kernel`: the weights from the pair's head logits, one program a row (b, h, i);
`masked_softmax_backward_kernel` the logits' gradient from theirs.
`gated_projection_kernel`: out = (sigmoid(g) * u) W_o^T for a block of MSA rows of one (b, i), every head, the
gate and the gated sums made on chip only; `gated_projection_backward_kernel` the gate's and u's gradients from
the output's, and partial sums of proj_o's weight gradient, from u and the MSA rows (the gate and the gated sums
made again on chip).
`weighted_sum_kernel`: for a block of residues i, a head and a block of MSA rows s, u[s, i] = sum_j w[i, j] v[s, j]
as one product whose columns are the block's (s, channel) pairs, so that each tile of w is read once for
S_BLOCK rows; with w's strides swapped it is the backward's dv[s, j] = sum_i w[i, j] du[s, i], written into
the projections' gradient as the MSA's rows (B, S, N, hC) for the LayerNorm + projection's backward.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...stages.layer_norm_rows import layer_norm_rows


@triton.jit
def masked_softmax_kernel(
    x_ptr, stride_xb, stride_xh, stride_xi, stride_xj,  # the head logits: (B, h, N, N), any float dtype
    m_ptr, stride_mb, stride_mi, stride_mj,  # HAS_MASK: the pair mask (B, N, N), 0/1 of any dtype
    w_ptr, stride_wb, stride_wh, stride_wi, stride_wj,  # STORE_W: out: the weights (B, h, N, N) float32
    lw_ptr,  # STORE_LOW: out: the weights again in the logits' dtype, laid out as w (w's strides)
    N, H, inf,
    HAS_MASK: tl.constexpr,
    RELATIVE: tl.constexpr,  # the mask term less its smallest over the row
    STORE_W: tl.constexpr,
    STORE_LOW: tl.constexpr,
    BLOCK_J: tl.constexpr,
    ONE_BLOCK: tl.constexpr,  # N <= BLOCK_J: the row loaded once, every pass over it in registers
):
    """w[b, h, i, j] = softmax_j(x[b, h, i, j] - inf * t[b, i, j]) in float32 for one row (b, h, i), with t =
    1 - mask (less its smallest over the row when RELATIVE, so that a row whose pairs are all masked keeps its
    logits' precision), as the reference computes it in float32. A row of up to BLOCK_J residues is loaded once;
    a longer one is taken in passes over j, BLOCK_J residues a step: the smallest mask term, the running maximum
    and sum, the weights (the same arithmetic: a row gives the same weights either way). The heads of a pair row
    (b, i) are consecutive programs, so that they read its mask together from L2."""
    b, h, i = _row(N, H)
    x_row = x_ptr + b * stride_xb + h * stride_xh + i * stride_xi
    m_row = m_ptr + b * stride_mb + i * stride_mi
    w_row = b * stride_wb + h * stride_wh + i * stride_wi
    if ONE_BLOCK:
        offs_j = tl.arange(0, BLOCK_J)  # [BLOCK_J]
        j_ok = offs_j < N
        t = tl.load(x_row + offs_j * stride_xj, mask=j_ok, other=0.0).to(tl.float32)
        if HAS_MASK:
            term = 1.0 - tl.load(m_row + offs_j * stride_mj, mask=j_ok, other=0).to(tl.float32)
            if RELATIVE:
                term = term - tl.min(tl.where(j_ok, term, float("inf")), axis=0)
            t = t - inf * term
        t = tl.where(j_ok, t, float("-inf"))
        e = tl.exp(t - tl.max(t, axis=0))
        _store_weights(e / tl.sum(e, axis=0), w_ptr, lw_ptr, w_row + offs_j * stride_wj, j_ok, STORE_W, STORE_LOW)
    else:
        shift = 0.0
        if HAS_MASK and RELATIVE:
            smallest = tl.full((BLOCK_J,), float("inf"), dtype=tl.float32)
            for j0 in range(0, N, BLOCK_J):
                offs_j = j0 + tl.arange(0, BLOCK_J)  # [BLOCK_J]
                m = tl.load(m_row + offs_j * stride_mj, mask=offs_j < N, other=0).to(tl.float32)
                smallest = tl.minimum(smallest, tl.where(offs_j < N, 1.0 - m, float("inf")))
            shift = tl.min(smallest, axis=0)
        row_max = float("-inf")
        row_sum = 0.0
        for j0 in range(0, N, BLOCK_J):
            t = _masked_logits(x_row, stride_xj, m_row, stride_mj, j0, N, inf, shift, HAS_MASK, BLOCK_J)  # [BLOCK_J]
            new_max = tl.maximum(row_max, tl.max(t, axis=0))
            row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(t - new_max), axis=0)
            row_max = new_max
        for j0 in range(0, N, BLOCK_J):
            offs_j = j0 + tl.arange(0, BLOCK_J)
            t = _masked_logits(x_row, stride_xj, m_row, stride_mj, j0, N, inf, shift, HAS_MASK, BLOCK_J)
            _store_weights(tl.exp(t - row_max) / row_sum, w_ptr, lw_ptr, w_row + offs_j * stride_wj, offs_j < N,
                           STORE_W, STORE_LOW)


@triton.jit
def _store_weights(w, w_ptr, lw_ptr, out, ok, STORE_W: tl.constexpr, STORE_LOW: tl.constexpr):
    """The weights w [BLOCK_J] at the offsets out: in float32 (STORE_W) and in lw's dtype (STORE_LOW)."""
    if STORE_W:
        tl.store(w_ptr + out, w, mask=ok)
    if STORE_LOW:
        tl.store(lw_ptr + out, w.to(lw_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _row(N, H):
    """(b, h, i) of this program's row: heads fastest, then residues i (64-bit)."""
    pid = tl.program_id(0).to(tl.int64)
    return pid // (H * N), pid % H, (pid // H) % N


@triton.jit
def _masked_logits(x_row, stride_xj, m_row, stride_mj, j0, N, inf, shift, HAS_MASK: tl.constexpr,
                   BLOCK_J: tl.constexpr):
    """x - inf * (1 - mask - shift) in float32 for the residues j0 .. j0 + BLOCK_J of a row, [BLOCK_J]; -inf
    where j is past the end (no weight)."""
    offs_j = j0 + tl.arange(0, BLOCK_J)
    j_ok = offs_j < N
    t = tl.load(x_row + offs_j * stride_xj, mask=j_ok, other=0.0).to(tl.float32)
    if HAS_MASK:
        m = tl.load(m_row + offs_j * stride_mj, mask=j_ok, other=0).to(tl.float32)
        t = t - inf * ((1.0 - m) - shift)
    return tl.where(j_ok, t, float("-inf"))


@triton.jit
def masked_softmax_backward_kernel(
    w_ptr, stride_wb, stride_wh, stride_wi, stride_wj,  # the weights: (B, h, N, N) float32
    g_ptr, stride_gb, stride_gh, stride_gi, stride_gj,  # their gradient: (B, h, N, N) float32
    dx_ptr, stride_db, stride_dh, stride_di, stride_dj,  # out: the logits' gradient (B, h, N, N) in its dtype
    N, H,
    BLOCK_J: tl.constexpr,
    ONE_BLOCK: tl.constexpr,  # N <= BLOCK_J: the row loaded once
):
    """dx[b, h, i, j] = w (g - sum_j w g) for one row (b, h, i), in float32 (the mask term has no gradient); a
    row of up to BLOCK_J residues loaded once, a longer one in two passes over j."""
    b, h, i = _row(N, H)
    w_row = w_ptr + b * stride_wb + h * stride_wh + i * stride_wi
    g_row = g_ptr + b * stride_gb + h * stride_gh + i * stride_gi
    dx_row = dx_ptr + b * stride_db + h * stride_dh + i * stride_di
    if ONE_BLOCK:
        offs_j = tl.arange(0, BLOCK_J)  # [BLOCK_J]
        w = tl.load(w_row + offs_j * stride_wj, mask=offs_j < N, other=0.0)
        g = tl.load(g_row + offs_j * stride_gj, mask=offs_j < N, other=0.0)
        tl.store(dx_row + offs_j * stride_dj, (w * (g - tl.sum(w * g, axis=0))).to(dx_ptr.dtype.element_ty),
                 mask=offs_j < N)
    else:
        dot = 0.0
        for j0 in range(0, N, BLOCK_J):
            offs_j = j0 + tl.arange(0, BLOCK_J)  # [BLOCK_J]
            w = tl.load(w_row + offs_j * stride_wj, mask=offs_j < N, other=0.0)
            g = tl.load(g_row + offs_j * stride_gj, mask=offs_j < N, other=0.0)
            dot += tl.sum(w * g, axis=0)
        for j0 in range(0, N, BLOCK_J):
            offs_j = j0 + tl.arange(0, BLOCK_J)
            w = tl.load(w_row + offs_j * stride_wj, mask=offs_j < N, other=0.0)
            g = tl.load(g_row + offs_j * stride_gj, mask=offs_j < N, other=0.0)
            tl.store(dx_row + offs_j * stride_dj, (w * (g - dot)).to(dx_ptr.dtype.element_ty), mask=offs_j < N)


@triton.jit
def weighted_sum_kernel(
    w_ptr, stride_wb, stride_wh, stride_wi, stride_wj,  # weights: (B, h, N, N)
    v_ptr, stride_vb, stride_vh, stride_vs, stride_vn,  # values (B, h, S, N, C) as strides, channel stride 1
    o_ptr, stride_ob, stride_oh, stride_os, stride_on,  # out: (B, h, S, N, C)
    S, N, H,
    C: tl.constexpr,  # the head width (a constant: the compiler sees a head's channels as one aligned run)
    N_BUCKET,  # autotuning key only
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    COLS: tl.constexpr,  # (s, channel) columns a program: S_BLOCK rows of BLOCK_C channels
    BLOCK_C: tl.constexpr,  # C rounded up to a power of two
    HEADS_FASTEST: tl.constexpr,  # the programs' order: heads fastest (every head's w fits L2), else residues i
    PRECISION: tl.constexpr,
):
    S_BLOCK: tl.constexpr = COLS // BLOCK_C
    pid = tl.program_id(0).to(tl.int64)
    n_s = tl.cdiv(S, S_BLOCK)
    n_i = tl.cdiv(N, BLOCK_I)
    if HEADS_FASTEST:
        # programs launched together write whole rows of the output (a head's channels are one part of each:
        # 16 bytes for heads of 8 bf16 channels) and read one block of MSA rows of v; every head's w from L2
        h = pid % H
        blk_i = (pid // H) % n_i
        blk_s = (pid // (H * n_i)) % n_s
        b = pid // (H * n_i * n_s)
    else:
        # the blocks of residues i fastest, then s: programs launched together share one head's w in L2
        blk_i = pid % n_i
        blk_s = (pid // n_i) % n_s
        h = (pid // (n_s * n_i)) % H
        b = pid // (n_s * n_i * H)
    offs_i = blk_i * BLOCK_I + tl.arange(0, BLOCK_I)  # [BLOCK_I]
    col = tl.arange(0, COLS)
    s = blk_s * S_BLOCK + col // BLOCK_C  # [COLS]
    e = col % BLOCK_C
    col_ok = (s < S) & (e < C)
    col_v = s * stride_vs + h * stride_vh + e  # [COLS]: (s, channel) inside a row j of v
    w_rows = w_ptr + b * stride_wb + h * stride_wh + offs_i[:, None] * stride_wi  # [BLOCK_I, 1]
    v_b = v_ptr + b * stride_vb
    acc = tl.zeros((BLOCK_I, COLS), dtype=tl.float32)
    for j0 in range(0, N, BLOCK_J):
        offs_j = j0 + tl.arange(0, BLOCK_J)
        j_ok = offs_j < N
        w = tl.load(w_rows + offs_j[None, :] * stride_wj, mask=(offs_i < N)[:, None] & j_ok[None, :],
                    other=0.0)  # [BLOCK_I, BLOCK_J]
        v = tl.load(v_b + offs_j[:, None].to(tl.int64) * stride_vn + col_v[None, :],
                    mask=j_ok[:, None] & col_ok[None, :], other=0.0)  # [BLOCK_J, COLS]
        acc = tl.dot(w.to(v.dtype), v, acc, input_precision=PRECISION)  # [BLOCK_I, COLS]
    ok = (offs_i < N)[:, None] & col_ok[None, :]
    out = offs_i[:, None].to(tl.int64) * stride_on + (s * stride_os + h * stride_oh + e)[None, :]  # [BLOCK_I, COLS]
    tl.store(o_ptr + b * stride_ob + out, acc.to(o_ptr.dtype.element_ty), mask=ok)


@triton.jit
def gated_projection_kernel(
    u_ptr, stride_ub, stride_uh, stride_ui, stride_us,  # the weighted sums: (B, h, N, S, C) as strides, channel stride 1
    x_ptr, stride_xb, stride_xs, stride_xi, stride_xd,  # the MSA: (B, S, N, c_m)
    lnw_ptr, lnb_ptr,  # its LayerNorm's weight and bias: (c_m,)
    wg_ptr, stride_gk, stride_gd,  # proj_g's weight: (h*C, c_m)
    wo_ptr, stride_wo, stride_wk,  # proj_o's weight: (c_m, h*C)
    o_ptr, stride_ob, stride_os, stride_oi,  # out: (B, S, N, c_m), channel stride 1
    S, N, H, C_OUT, eps,
    C: tl.constexpr,  # the head width
    HEADS_A_STEP: tl.constexpr,  # heads a step: one, or several where a head is narrower than the product's 16
    BLOCK_S: tl.constexpr,
    BLOCK_C: tl.constexpr,  # C rounded up to a power of two (HEADS_A_STEP * BLOCK_C >= 16)
    BLOCK_D: tl.constexpr,  # the MSA's channels c_m, padded: its rows are normalized whole
    BLOCK_O: tl.constexpr,  # output channels a program
    PRECISION: tl.constexpr,
):
    """out[b, s, i] = sum_h (sigmoid(g) * u)[b, h, i, s] @ W_o[:, h]^T for BLOCK_S rows s of one (b, i), with the
    gate g = LayerNorm(x) @ W_g^T made here from the MSA rows (never written: it is as large as v, and x is hC / c_m
    times smaller), rounded to the input's dtype as proj_g's output; the gated sums of HEADS_A_STEP heads a step
    rounded to the input's dtype (as proj_o's input) and multiplied on chip, never written (the backward makes the
    gate and the gated sums again)."""
    b, i, offs_s = _msa_rows(S, N, BLOCK_S)  # [BLOCK_S] rows s of one (b, i)
    col = tl.arange(0, HEADS_A_STEP * BLOCK_C)  # [BLOCK_K]: (head of the step, channel)
    if HEADS_A_STEP == 1:
        step_h = 0  # (no head offsets within a step: a head's loads as plain as without heads a step)
        offs_c = col
    else:
        step_h = (col // BLOCK_C).to(tl.int64)  # (64-bit: head strides)
        offs_c = col % BLOCK_C
    offs_o = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    offs_d = tl.arange(0, BLOCK_D)
    s_ok = offs_s < S
    o_ok = offs_o < C_OUT
    d_ok = offs_d < C_OUT
    xn = _normalized_rows(x_ptr + b * stride_xb + i * stride_xi + offs_s * stride_xs, s_ok, stride_xd, lnw_ptr,
                          lnb_ptr, C_OUT, eps, BLOCK_D)  # [BLOCK_S, BLOCK_D] in x's dtype
    u_rows = (u_ptr + b * stride_ub + i * stride_ui + offs_s[:, None] * stride_us
              + (step_h * stride_uh + offs_c)[None, :])  # [BLOCK_S, BLOCK_K]
    acc = tl.zeros((BLOCK_S, BLOCK_O), dtype=tl.float32)
    for h in range(0, H, HEADS_A_STEP):  # (the pointers step HEADS_A_STEP heads at a time: 64-bit)
        col_ok = offs_c < C  # [BLOCK_K]
        if HEADS_A_STEP > 1:
            col_ok = col_ok & (step_h < H - h)  # (the last step's heads past H)
        cols = h * C + step_h * C + offs_c  # [BLOCK_K]: columns of W_g's and W_o's (head, channel)
        u = tl.load(u_rows, mask=s_ok[:, None] & col_ok[None, :], other=0.0)  # [BLOCK_S, BLOCK_K]
        wg = tl.load(wg_ptr + cols[None, :] * stride_gk + offs_d[:, None] * stride_gd,
                     mask=col_ok[None, :] & d_ok[:, None], other=0.0)  # [BLOCK_D, BLOCK_K]
        g = tl.dot(xn, wg, input_precision=PRECISION).to(u.dtype)  # [BLOCK_S, BLOCK_K]
        gated = (u.to(tl.float32) * _sigmoid(g.to(tl.float32))).to(u.dtype)
        wo = tl.load(wo_ptr + offs_o[None, :] * stride_wo + cols[:, None] * stride_wk,
                     mask=col_ok[:, None] & o_ok[None, :], other=0.0)  # [BLOCK_K, BLOCK_O]
        acc = tl.dot(gated, wo, acc, input_precision=PRECISION)  # [BLOCK_S, BLOCK_O]
        u_rows += HEADS_A_STEP * stride_uh
    tl.store(o_ptr + b * stride_ob + i * stride_oi + offs_s[:, None].to(tl.int64) * stride_os + offs_o[None, :],
             acc.to(o_ptr.dtype.element_ty), mask=s_ok[:, None] & o_ok[None, :])


@triton.jit
def _sigmoid(x):
    """sigmoid(x) = 1 / (1 + 2**(-x log2(e))) of float32 x, by the hardware's exp2 and a division (within a few
    float32 roundings, 0 for x = -inf and below about -88, NaN for NaN). The gates are many (an element of every u),
    and tl.sigmoid's exp and division cost more (a measurable share of the forward's gated projection)."""
    return 1.0 / (1.0 + tl.exp2(x * -1.4426950408889634))


@triton.jit
def _normalized_rows(x_rows, s_ok, stride_xd, lnw_ptr, lnb_ptr, D, eps, BLOCK_D: tl.constexpr):
    """LayerNorm of the MSA rows at the pointers x_rows [BLOCK_S] (rows past s_ok read as zeros), [BLOCK_S,
    BLOCK_D] in x's dtype: statistics in float32, rounded as the reference's LayerNorm output (and as the
    LayerNorm + projection kernel rounds the rows it projects v from); zero in the padding channels."""
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    x = tl.load(x_rows[:, None] + offs_d[None, :] * stride_xd, mask=s_ok[:, None] & d_ok[None, :],
                other=0.0)  # [BLOCK_S, BLOCK_D]
    lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    _, _, xn = layer_norm_rows(x.to(tl.float32), d_ok, D, eps, lnw, lnb, x.dtype)
    return xn.to(x.dtype)


@triton.jit
def _msa_rows(S, N, BLOCK_S: tl.constexpr):
    """(b, i, the rows s) of this program's block of BLOCK_S MSA rows: the blocks of s vary fastest, then i."""
    pid = tl.program_id(0).to(tl.int64)
    n_s = tl.cdiv(S, BLOCK_S)
    return pid // (n_s * N), (pid // n_s) % N, pid % n_s * BLOCK_S + tl.arange(0, BLOCK_S)


@triton.jit
def _head_major(offs_s, cols, C: tl.constexpr, stride_h, stride_s):
    """The offsets [BLOCK_S, BLOCK_K] of rows s and (head, channel) columns in a head-major tensor."""
    return (cols // C).to(tl.int64)[None, :] * stride_h + offs_s[:, None] * stride_s + (cols % C)[None, :]


@triton.jit
def gated_projection_backward_kernel(
    do_ptr, stride_db, stride_ds, stride_di, stride_do,  # the output's gradient: (B, S, N, c_m), any strides
    wo_ptr, stride_wo, stride_wk,  # proj_o's weight: (c_m, h*C)
    u_ptr, stride_ub, stride_uh, stride_ui, stride_us,  # the weighted sums: (B, h, N, S, C), channel stride 1
    x_ptr, stride_xb, stride_xs, stride_xi, stride_xd,  # the MSA: (B, S, N, c_m)
    lnw_ptr, lnb_ptr,  # its LayerNorm's weight and bias: (c_m,)
    wg_ptr, stride_gk, stride_gd,  # proj_g's weight: (h*C, c_m)
    du_ptr, stride_dub, stride_duh, stride_dui, stride_dus,  # out: the weighted sums' gradient, (B, h, N, S, C)
    dg_ptr, stride_eb, stride_es, stride_ei,  # out: the gate's gradient, (B, S, N, h*C), channel stride 1
    part_ptr, stride_pp, stride_po,  # out: the programs' sums of proj_o's weight gradient, (PROGRAMS, c_m, h*C) float32
    B, S, N, HC, C_OUT, eps,
    PROGRAMS,  # programs along the MSA rows
    S_BUCKET,  # autotuning key only
    C: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_K: tl.constexpr,  # (head, channel) columns a program
    BLOCK_O: tl.constexpr,  # the MSA's channels c_m (proj_o's outputs, proj_g's inputs), padded: loaded whole
    PRECISION: tl.constexpr,
):
    """For the blocks of BLOCK_S rows s of one (b, i) numbered pid, pid + PROGRAMS, ... and BLOCK_K (head,
    channel) columns: the gate g = LayerNorm(x) @ W_g^T again from the MSA rows, as the forward makes it;
    d(gated) = grad_out @ W_o on chip (float32), then du = d(gated) * sigmoid(g) and the gate's gradient
    d(gated) * u * sigmoid(g) * (1 - sigmoid(g)); and this program's sum over its rows of proj_o's weight
    gradient grad_out^T gated, with the gated sums rounded as the forward's (proj_o's input), in float32 and in
    a fixed order (the programs' sums added by the launcher). The blocks of columns are the grid's fastest
    dimension, so that the programs of one block of rows run together and can share its MSA rows in L2 (this
    order not measured against the other on its own)."""
    pid = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]: (head, channel)
    k_ok = cols < HC
    offs_o = tl.arange(0, BLOCK_O)
    o_ok = offs_o < C_OUT
    wo = tl.load(wo_ptr + offs_o[:, None] * stride_wo + cols[None, :] * stride_wk,
                 mask=o_ok[:, None] & k_ok[None, :], other=0.0)  # [BLOCK_O, BLOCK_K]
    wg = tl.load(wg_ptr + cols[None, :] * stride_gk + offs_o[:, None] * stride_gd,
                 mask=o_ok[:, None] & k_ok[None, :], other=0.0)  # [BLOCK_O, BLOCK_K]: W_g^T
    acc = tl.zeros((BLOCK_O, BLOCK_K), dtype=tl.float32)  # grad_out^T gated over this program's rows
    n_s = tl.cdiv(S, BLOCK_S)
    for blk in range(pid, B * N * n_s, PROGRAMS):
        b = (blk // (n_s * N)).to(tl.int64)
        i = ((blk // n_s) % N).to(tl.int64)
        offs_s = ((blk % n_s) * BLOCK_S).to(tl.int64) + tl.arange(0, BLOCK_S)  # [BLOCK_S] rows s of one (b, i), 64-bit
        s_ok = offs_s < S
        grad = tl.load(do_ptr + b * stride_db + i * stride_di + offs_s[:, None] * stride_ds
                       + offs_o[None, :] * stride_do, mask=s_ok[:, None] & o_ok[None, :], other=0.0)  # [BLOCK_S, BLOCK_O]
        xn = _normalized_rows(x_ptr + b * stride_xb + i * stride_xi + offs_s * stride_xs, s_ok, stride_xd, lnw_ptr,
                              lnb_ptr, C_OUT, eps, BLOCK_O)  # [BLOCK_S, BLOCK_O]
        ok = s_ok[:, None] & k_ok[None, :]  # [BLOCK_S, BLOCK_K]
        u = tl.load(u_ptr + b * stride_ub + i * stride_ui + _head_major(offs_s, cols, C, stride_uh, stride_us),
                    mask=ok, other=0.0)
        g = tl.dot(xn, wg, input_precision=PRECISION).to(u.dtype)  # [BLOCK_S, BLOCK_K]
        sg = _sigmoid(g.to(tl.float32))
        u_sg = u.to(tl.float32) * sg  # [BLOCK_S, BLOCK_K]
        d_gated = tl.dot(grad, wo, input_precision=PRECISION)  # [BLOCK_S, BLOCK_K] float32
        acc = tl.dot(tl.trans(grad), u_sg.to(u.dtype), acc, input_precision=PRECISION)  # [BLOCK_O, BLOCK_K]
        tl.store(du_ptr + b * stride_dub + i * stride_dui + _head_major(offs_s, cols, C, stride_duh, stride_dus),
                 (d_gated * sg).to(du_ptr.dtype.element_ty), mask=ok)
        tl.store(dg_ptr + b * stride_eb + i * stride_ei + offs_s[:, None] * stride_es + cols[None, :],
                 (d_gated * u_sg * (1.0 - sg)).to(dg_ptr.dtype.element_ty), mask=ok)
    tl.store(part_ptr + pid * stride_pp + offs_o[:, None] * stride_po + cols[None, :], acc,
             mask=o_ok[:, None] & k_ok[None, :])

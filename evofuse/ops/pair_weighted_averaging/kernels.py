"""Pair-weighted averaging's weighted sums, forward and backward, in Triton.

v and the gate g are column blocks of one (B, S, N, 2*h*C) tensor (the LayerNorm + projection's output), head
h at channels h*C .. h*C + C - 1 of each; w (B, h, N, N) are the weights, one softmax per (b, h, i) shared by
every MSA row.

`masked_softmax_kernel`: the weights from the pair's head logits, one program a pair row (b, i) and all its heads;
`masked_softmax_backward_kernel` the logits' gradient from theirs.
`weighted_sum_kernel`: for a block of residues i, a head and a block of MSA rows s, u[s, i] = sum_j w[i, j] v[s, j]
as one product whose columns are the block's (s, channel) pairs, so that each tile of w is read once for
S_BLOCK rows; the gate sigmoid(g) in the epilogue. With w's strides swapped it is the backward's
dv[s, j] = sum_i w[i, j] du[s, i]. `weight_grad_kernel`: dw[i, j] = sum_(s, c) du[s, i, c] v[s, j, c] for a tile of
(i, j), summed over the MSA rows in order (no atomics).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def masked_softmax_kernel(
    x_ptr, stride_xb, stride_xi, stride_xj, stride_xh,  # the head logits: (B, N, N, h), any float dtype
    m_ptr, stride_mb, stride_mi, stride_mj,  # HAS_MASK: the pair mask (B, N, N), 0/1 of any dtype
    w_ptr, stride_wb, stride_wh, stride_wi, stride_wj,  # STORE_W: out: the weights (B, h, N, N) float32
    lw_ptr,  # STORE_LOW: out: the weights again in the logits' dtype, laid out as w (w's strides)
    N, H, inf,
    HAS_MASK: tl.constexpr,
    RELATIVE: tl.constexpr,  # the mask term less its smallest over the row
    STORE_W: tl.constexpr,
    STORE_LOW: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_H: tl.constexpr,  # the heads, padded
):
    """w[b, h, i, j] = softmax_j(x[b, i, j, h] - inf * t[b, i, j]) in float32 for one pair row (b, i), every head,
    with t = 1 - mask (less its smallest over the row when RELATIVE, so that a row whose pairs are all masked
    keeps its logits' precision), as the reference computes it in float32. Passes over j: the smallest mask term,
    the running maximum and sum of each head, the weights."""
    pid = tl.program_id(0).to(tl.int64)
    b = pid // N
    i = pid % N
    offs_h = tl.arange(0, BLOCK_H)  # [BLOCK_H]
    h_ok = offs_h < H
    x_row = x_ptr + b * stride_xb + i * stride_xi
    m_row = m_ptr + b * stride_mb + i * stride_mi
    shift = 0.0
    if HAS_MASK and RELATIVE:
        smallest = tl.full((BLOCK_J,), float("inf"), dtype=tl.float32)
        for j0 in range(0, N, BLOCK_J):
            offs_j = j0 + tl.arange(0, BLOCK_J)
            m = tl.load(m_row + offs_j * stride_mj, mask=offs_j < N, other=0).to(tl.float32)
            smallest = tl.minimum(smallest, tl.where(offs_j < N, 1.0 - m, float("inf")))
        shift = tl.min(smallest, axis=0)
    row_max = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for j0 in range(0, N, BLOCK_J):
        t = _masked_logits(x_row, stride_xj, stride_xh, m_row, stride_mj, j0, N, offs_h, h_ok, inf, shift, HAS_MASK,
                           BLOCK_J)  # [BLOCK_J, BLOCK_H]
        new_max = tl.maximum(row_max, tl.max(t, axis=0))
        row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(t - new_max[None, :]), axis=0)
        row_max = new_max
    w_row = b * stride_wb + i * stride_wi + offs_h.to(tl.int64)[None, :] * stride_wh  # [1, BLOCK_H]
    for j0 in range(0, N, BLOCK_J):
        offs_j = j0 + tl.arange(0, BLOCK_J)
        t = _masked_logits(x_row, stride_xj, stride_xh, m_row, stride_mj, j0, N, offs_h, h_ok, inf, shift, HAS_MASK,
                           BLOCK_J)
        w = tl.exp(t - row_max[None, :]) / row_sum[None, :]  # [BLOCK_J, BLOCK_H]
        out = w_row + offs_j[:, None] * stride_wj
        ok = (offs_j < N)[:, None] & h_ok[None, :]
        if STORE_W:
            tl.store(w_ptr + out, w, mask=ok)
        if STORE_LOW:
            tl.store(lw_ptr + out, w.to(lw_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _masked_logits(x_row, stride_xj, stride_xh, m_row, stride_mj, j0, N, offs_h, h_ok, inf, shift,
                   HAS_MASK: tl.constexpr, BLOCK_J: tl.constexpr):
    """x - inf * (1 - mask - shift) in float32 for the residues j0 .. j0 + BLOCK_J of a row, [BLOCK_J, BLOCK_H];
    -inf where j is past the end (no weight), 0 for the padding heads (never stored; finite, so no NaN)."""
    offs_j = j0 + tl.arange(0, BLOCK_J)
    j_ok = offs_j < N
    ok = j_ok[:, None] & h_ok[None, :]
    t = tl.load(x_row + offs_j[:, None] * stride_xj + offs_h[None, :] * stride_xh, mask=ok, other=0.0).to(tl.float32)
    if HAS_MASK:
        m = tl.load(m_row + offs_j * stride_mj, mask=j_ok, other=0).to(tl.float32)
        t = t - inf * ((1.0 - m) - shift)[:, None]
    return tl.where(h_ok[None, :], tl.where(j_ok[:, None], t, float("-inf")), 0.0)


@triton.jit
def masked_softmax_backward_kernel(
    w_ptr, stride_wb, stride_wh, stride_wi, stride_wj,  # the weights: (B, h, N, N) float32
    g_ptr, stride_gb, stride_gh, stride_gi, stride_gj,  # their gradient: (B, h, N, N) float32
    dx_ptr, stride_db, stride_di, stride_dj, stride_dh,  # out: the logits' gradient (B, N, N, h) in its dtype
    N, H,
    BLOCK_J: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """dx[b, i, j, h] = w (g - sum_j w g) for one pair row (b, i), every head, in float32 (the mask term has no
    gradient); two passes over j."""
    pid = tl.program_id(0).to(tl.int64)
    b = pid // N
    i = pid % N
    offs_h = tl.arange(0, BLOCK_H)
    h_ok = offs_h < H
    w_row = w_ptr + b * stride_wb + i * stride_wi + offs_h.to(tl.int64)[None, :] * stride_wh  # [1, BLOCK_H]
    g_row = g_ptr + b * stride_gb + i * stride_gi + offs_h.to(tl.int64)[None, :] * stride_gh
    dot = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for j0 in range(0, N, BLOCK_J):
        offs_j = j0 + tl.arange(0, BLOCK_J)
        ok = (offs_j < N)[:, None] & h_ok[None, :]
        w = tl.load(w_row + offs_j[:, None] * stride_wj, mask=ok, other=0.0)  # [BLOCK_J, BLOCK_H]
        g = tl.load(g_row + offs_j[:, None] * stride_gj, mask=ok, other=0.0)
        dot += tl.sum(w * g, axis=0)
    dx_row = dx_ptr + b * stride_db + i * stride_di + offs_h[None, :] * stride_dh
    for j0 in range(0, N, BLOCK_J):
        offs_j = j0 + tl.arange(0, BLOCK_J)
        ok = (offs_j < N)[:, None] & h_ok[None, :]
        w = tl.load(w_row + offs_j[:, None] * stride_wj, mask=ok, other=0.0)
        g = tl.load(g_row + offs_j[:, None] * stride_gj, mask=ok, other=0.0)
        tl.store(dx_row + offs_j[:, None] * stride_dj, (w * (g - dot[None, :])).to(dx_ptr.dtype.element_ty),
                 mask=ok)


@triton.jit
def weighted_sum_kernel(
    w_ptr, stride_wb, stride_wh, stride_wi, stride_wj,  # weights: (B, h, N, N)
    v_ptr, stride_vb, stride_vs, stride_vn,  # values: (B, S, N, .) head h at channel h*C, channel stride 1
    g_ptr, stride_gb, stride_gs, stride_gn,  # GATE: the gate's pre-activation, laid out as v
    o_ptr, stride_ob, stride_os, stride_on,  # out: (B, S, N, .) laid out as v
    S, N, H,
    C: tl.constexpr,  # the head width (a constant: the compiler sees a head's channels as one aligned run)
    N_BUCKET,  # autotuning key only
    GATE: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    COLS: tl.constexpr,  # (s, channel) columns a program: S_BLOCK rows of BLOCK_C channels
    BLOCK_C: tl.constexpr,  # C rounded up to a power of two
    PRECISION: tl.constexpr,
):
    S_BLOCK: tl.constexpr = COLS // BLOCK_C
    pid = tl.program_id(0).to(tl.int64)
    n_s = tl.cdiv(S, S_BLOCK)
    n_i = tl.cdiv(N, BLOCK_I)
    # the blocks of residues i vary fastest: programs launched together read the same rows of v, from L2
    blk_i = pid % n_i
    blk_s = (pid // n_i) % n_s
    h = (pid // (n_s * n_i)) % H
    b = pid // (n_s * n_i * H)
    offs_i = blk_i * BLOCK_I + tl.arange(0, BLOCK_I)  # [BLOCK_I]
    col = tl.arange(0, COLS)
    s = blk_s * S_BLOCK + col // BLOCK_C  # [COLS]
    e = col % BLOCK_C
    col_ok = (s < S) & (e < C)
    col_v = s * stride_vs + h * C + e  # [COLS]: (s, channel) inside a row j of v
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
    out = offs_i[:, None].to(tl.int64) * stride_on + (s * stride_os + h * C + e)[None, :]  # [BLOCK_I, COLS]
    if GATE:
        g = tl.load(g_ptr + b * stride_gb + offs_i[:, None].to(tl.int64) * stride_gn + (s * stride_gs + h * C + e)[None, :],
                    mask=ok, other=0.0)
        acc = acc * tl.sigmoid(g.to(tl.float32))
    tl.store(o_ptr + b * stride_ob + out, acc.to(o_ptr.dtype.element_ty), mask=ok)


@triton.jit
def weight_grad_kernel(
    du_ptr, stride_db, stride_ds, stride_dn,  # the un-gated sums' gradient: (B, S, N, .) laid out as v
    v_ptr, stride_vb, stride_vs, stride_vn,  # values
    dw_ptr, stride_wb, stride_wh, stride_wi, stride_wj,  # out: dw (B, h, N, N) float32
    S, N, H,
    C: tl.constexpr,  # the head width (a constant: the compiler sees a head's channels as one aligned run)
    N_BUCKET,  # autotuning key only
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    COLS: tl.constexpr,  # (s, channel) pairs a step: the product's K
    BLOCK_C: tl.constexpr,
    PRECISION: tl.constexpr,
):
    S_BLOCK: tl.constexpr = COLS // BLOCK_C
    pid = tl.program_id(0).to(tl.int64)
    n_j = tl.cdiv(N, BLOCK_J)
    n_i = tl.cdiv(N, BLOCK_I)
    blk_j = pid % n_j
    blk_i = (pid // n_j) % n_i
    h = (pid // (n_j * n_i)) % H
    b = pid // (n_j * n_i * H)
    offs_i = blk_i * BLOCK_I + tl.arange(0, BLOCK_I)
    offs_j = blk_j * BLOCK_J + tl.arange(0, BLOCK_J)
    col = tl.arange(0, COLS)
    e = col % BLOCK_C
    acc = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
    for s0 in range(0, S, S_BLOCK):
        s = s0 + col // BLOCK_C  # [COLS]
        col_ok = (s < S) & (e < C)
        du = tl.load(du_ptr + b * stride_db + offs_i[:, None].to(tl.int64) * stride_dn
                     + (s * stride_ds + h * C + e)[None, :], mask=(offs_i < N)[:, None] & col_ok[None, :],
                     other=0.0)  # [BLOCK_I, COLS]
        v_t = tl.load(v_ptr + b * stride_vb + offs_j[None, :].to(tl.int64) * stride_vn
                      + (s * stride_vs + h * C + e)[:, None], mask=col_ok[:, None] & (offs_j < N)[None, :],
                      other=0.0)  # [COLS, BLOCK_J]
        acc = tl.dot(du, v_t, acc, input_precision=PRECISION)  # [BLOCK_I, BLOCK_J]
    tl.store(dw_ptr + b * stride_wb + h * stride_wh + offs_i[:, None].to(tl.int64) * stride_wi
             + offs_j[None, :] * stride_wj, acc, mask=(offs_i < N)[:, None] & (offs_j < N)[None, :])

"""The Outer Product Mean's backward kernels (`op.py` says how they compose): the output's gradient times the
normalization's factor with the bias's gradient (`opm_grad_scale_kernel`), the outer products' gradient dX = Gs W in
the layout of the 16-bit route's products (`opm_dx_kernel`), and out_proj's weight gradient Gs^T X in float32
partial sums (`opm_dw_kernel`)."""

from __future__ import annotations

import triton
import triton.language as tl

from .kernels import pair_scale


@triton.jit
def opm_dx_kernel(
    gs_ptr, stride_gb, stride_gi, stride_gj, stride_gr,  # the scaled output gradient Gs: (B, n, N, R)
    w_ptr, stride_wr, stride_wk,  # out_proj weight: (R, C*C)
    dx_ptr, stride_db, stride_dr, stride_dc,  # out: dX (B, n*C, N*C), row (i p), column (j q)
    n, N, R,
    N_BUCKET,  # autotuning key only
    C: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_K: tl.constexpr,  # columns (p q) of out_proj's weight a program
    BLOCK_R: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """The backward's dX[(i p), (j q)] = sum_r Gs[i, j, r] W[r, (p q)] for a tile of (i, j) pairs and a block of
    (p q), stored straight into the layout of the products with a and b that take it (no rearranging copy). A
    tile's blocks of (p q) are consecutive programs, so that all but the first find its rows of Gs in L2."""
    k_blocks = tl.cdiv(C * C, BLOCK_K)
    n_j = tl.cdiv(N, BLOCK_J)
    tiles = tl.cdiv(n, BLOCK_I) * n_j
    pid = tl.program_id(0) // k_blocks
    bb = (pid // tiles).to(tl.int64)
    tile = pid % tiles
    pair = tl.arange(0, BLOCK_I * BLOCK_J)
    i = (tile // n_j) * BLOCK_I + pair // BLOCK_J  # [PAIRS]
    j = (tile % n_j) * BLOCK_J + pair % BLOCK_J
    pair_ok = (i < n) & (j < N)
    offs_k = tl.program_id(0) % k_blocks * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]: (p q)
    g_rows = gs_ptr + bb * stride_gb + i.to(tl.int64) * stride_gi + j.to(tl.int64) * stride_gj  # [PAIRS]
    acc = tl.zeros((BLOCK_I * BLOCK_J, BLOCK_K), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        r_ok = offs_r < R
        g = tl.load(g_rows[:, None] + offs_r[None, :] * stride_gr, mask=pair_ok[:, None] & r_ok[None, :],
                    other=0.0)  # [PAIRS, BLOCK_R]
        w = tl.load(w_ptr + offs_r[:, None] * stride_wr + offs_k[None, :] * stride_wk, mask=r_ok[:, None],
                    other=0.0)  # [BLOCK_R, BLOCK_K]
        acc = tl.dot(g, w, acc, input_precision=PRECISION)  # [PAIRS, BLOCK_K]
    rows = i.to(tl.int64)[:, None] * C + (offs_k // C)[None, :]  # [PAIRS, BLOCK_K]: (i p)
    cols = j.to(tl.int64)[:, None] * C + (offs_k % C)[None, :]  # (j q)
    tl.store(dx_ptr + bb * stride_db + rows * stride_dr + cols * stride_dc, acc.to(dx_ptr.dtype.element_ty),
             mask=pair_ok[:, None])


@triton.jit
def opm_grad_scale_kernel(
    g_ptr, stride_gb, stride_gi, stride_gj, stride_gr,  # the output's gradient: (B, N, N, R)
    cnt_ptr, stride_cb, stride_ci, stride_cj,  # HAS_COUNTS: the normalization's counts (B, N, N) float32
    gs_ptr,  # out: Gs (B, N, N, R) contiguous, in the gradient's dtype
    sum_ptr,  # out: the programs' column sums (programs, R) float32, of Gs (DIVIDE_BIAS) or of the gradient
    N, R, S, PAIRS,  # PAIRS = B*N*N
    DIVIDE_BIAS: tl.constexpr,
    EPS: tl.constexpr,
    HAS_COUNTS: tl.constexpr,
    BLOCK_P: tl.constexpr,  # pairs (b, i, j) a program
    BLOCK_R: tl.constexpr,
):
    """The backward's operand Gs[b, i, j, r] = g[b, i, j, r] * factor[b, i, j] (the normalization's factor, as
    the forward takes it; a float32 product rounded once), for a block of pairs, and the block's column sums in
    float32: the pieces of out_proj's bias gradient, added over the blocks in a fixed order afterwards."""
    t = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)  # [BLOCK_P] pair numbers (B*N*N < 2**31)
    t_ok = t < PAIRS
    bb = (t // (N * N)).to(tl.int64)
    i = (t // N) % N
    j = t % N
    scale = pair_scale(cnt_ptr + bb * stride_cb, stride_ci, stride_cj, i, j, t_ok, S, EPS, HAS_COUNTS)  # [BLOCK_P]
    g_rows = g_ptr + bb * stride_gb + i.to(tl.int64) * stride_gi + j.to(tl.int64) * stride_gj  # [BLOCK_P]
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        ok = t_ok[:, None] & (offs_r < R)[None, :]
        g = tl.load(g_rows[:, None] + offs_r[None, :] * stride_gr, mask=ok, other=0.0).to(tl.float32)  # [BLOCK_P, BLOCK_R]
        gs = g * scale[:, None]
        tl.store(gs_ptr + t.to(tl.int64)[:, None] * R + offs_r[None, :], gs.to(gs_ptr.dtype.element_ty), mask=ok)
        tl.store(sum_ptr + tl.program_id(0) * R + offs_r, tl.sum(gs if DIVIDE_BIAS else g, axis=0), mask=offs_r < R)


@triton.jit
def opm_dw_kernel(
    gs_ptr, stride_gb, stride_gi, stride_gj, stride_gr,  # Gs of a block of rows i: (B, n, N, R)
    x_ptr, stride_xb, stride_xr, stride_xc,  # the block's outer products: (B, n*C, N*C), row (i p), column (j q)
    ws_ptr, stride_ws,  # out: the splits' partial sums (splits, R, C*C) float32, row stride C*C
    n, N, R, PAIRS,  # PAIRS = B*n*N
    N_BUCKET,  # autotuning key only
    C: tl.constexpr,
    ACCUMULATE: tl.constexpr,  # add to the partial sums an earlier block of rows left in ws
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,  # columns (p q) a program
    BLOCK_P: tl.constexpr,  # pairs (b, i, j) a step: the product's K
    PRECISION: tl.constexpr,
):
    """out_proj's weight gradient dW[r, (p q)] = sum over pairs (b, i, j) of Gs[b, i, j, r] X[b, (i p), (j q)],
    for a block of rows r and columns (p q) (program_id(0)), over split number program_id(1) of the pairs
    (equal runs of whole steps): the split's partial sum in its own slot of ws, which the blocks of rows i
    accumulate in their order and the splits are summed over afterwards (deterministic). X is read in the
    layout of the plain product a^T b that made it: each pair's (p q) block is C rows of C columns."""
    n_k: tl.constexpr = C * C // BLOCK_K
    offs_k = (tl.program_id(0) % n_k) * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]: (p q)
    offs_r = (tl.program_id(0) // n_k) * BLOCK_R + tl.arange(0, BLOCK_R)  # [BLOCK_R]
    r_ok = offs_r < R
    x_cols = (offs_k // C) * stride_xr + (offs_k % C) * stride_xc  # [BLOCK_K]: (p q) inside a pair's block
    per = tl.cdiv(tl.cdiv(PAIRS, tl.num_programs(1)), BLOCK_P) * BLOCK_P
    lo = tl.program_id(1) * per
    hi = tl.minimum(lo + per, PAIRS)
    acc = tl.zeros((BLOCK_K, BLOCK_R), dtype=tl.float32)
    for t0 in range(lo, hi, BLOCK_P):
        t = t0 + tl.arange(0, BLOCK_P)  # [BLOCK_P] pair numbers (B*n*N < 2**31)
        t_ok = t < hi
        bb = (t // (n * N)).to(tl.int64)
        i = ((t // N) % n).to(tl.int64)
        j = (t % N).to(tl.int64)
        x = tl.load(x_ptr + (bb * stride_xb + i * C * stride_xr + j * C * stride_xc)[:, None] + x_cols[None, :],
                    mask=t_ok[:, None], other=0.0)  # [BLOCK_P, BLOCK_K]
        g = tl.load(gs_ptr + (bb * stride_gb + i * stride_gi + j * stride_gj)[:, None] + offs_r[None, :] * stride_gr,
                    mask=t_ok[:, None] & r_ok[None, :], other=0.0)  # [BLOCK_P, BLOCK_R]
        acc = tl.dot(tl.trans(x), g, acc, input_precision=PRECISION)  # [BLOCK_K, BLOCK_R]
    ws = ws_ptr + tl.program_id(1) * stride_ws + offs_r[None, :] * (C * C) + offs_k[:, None]  # [BLOCK_K, BLOCK_R]
    if ACCUMULATE:
        acc += tl.load(ws, mask=r_ok[None, :], other=0.0)
    tl.store(ws, acc, mask=r_ok[None, :])


# float32 inputs: the contraction's operands as float16 halves, each of a, b and out_proj's weight with its own
# power-of-two scale (`float16_halves`). Two launches: every program's maxima, then the halves.

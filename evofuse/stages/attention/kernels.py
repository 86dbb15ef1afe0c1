"""MSA row attention with pair bias: the attention core, forward and backward, in Triton.

q, k, v and the gate g are column blocks of one (B, S, N, 4D) tensor (the LayerNorm + projection's output),
head h at channels h*d .. h*d + d - 1 of each. z is the pair bias, (B, h, N, N), shared by every MSA row.

Forward (`attention_forward_kernel`): a program per (MSA row s, block of queries i, head, batch element),
s varying fastest so that programs running together share z's tiles in L2. It streams blocks of keys j with
an online softmax in base 2, replaces the logits of masked keys by -1e9 (a row whose keys are all masked
averages v over all N keys), and writes the gated output o * sigmoid(g) in the merged-heads layout; when
training, also the un-gated output and the rows' log-sum-exp.

Backward, from do (the gradient of the un-gated output), the log-sum-exp and delta = rowsum(do * o): three
kernels, each recomputing the probabilities tile by tile, so that no (S, h, N, N) tensor exists and every
sum has a fixed order: dq over the keys (`attention_dq_kernel`, which also makes delta exact: the rounded
output's is off by the rounding, which a softmax of one key turns into q and k gradients that should be 0), dk and
dv over the queries
(`attention_dkdv_kernel`), and the pair bias's gradient over the MSA rows (`attention_dz_kernel`; where its
tiles are too few to fill the GPU, over parts of the rows, summed afterwards).
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _program_coords(S, N, H, BLOCK: tl.constexpr):
    """(s, block of residues, head, batch element) of this program; s varies fastest."""
    pid = tl.program_id(0).to(tl.int64)
    s = pid % S
    rest = pid // S
    n_blocks = tl.cdiv(N, BLOCK)
    blk = rest % n_blocks
    rest = rest // n_blocks
    return s, blk, rest % H, rest // H


@triton.jit
def _logits(q, k, z, keep, fill, qk_scale, HAS_MASK: tl.constexpr, ADDITIVE_MASK: tl.constexpr,
            PRECISION: tl.constexpr):
    """Logits in base-2 units, (q k^T / sqrt(d) + z) * log2(e), where `keep`, else `fill` (a masked key's MASKED, a
    key past N's -inf, whatever q holds: a NaN in a query does not reach a row whose keys are all masked), plus, with
    ADDITIVE_MASK, 0 times the logit: the models add their -inf, so a NaN or Inf logit of a masked key is NaN there."""
    logit = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + z * LOG2E  # [BLOCK_M, BLOCK_N]
    if HAS_MASK:
        if ADDITIVE_MASK:
            logit = tl.where(keep[None, :], logit, fill[None, :] + logit * 0.0)
        else:
            logit = tl.where(keep[None, :], logit, fill[None, :])
    return logit


@triton.jit
def _key_block(row, j0, N, D, HEAD_DIM, stride_xn, z_rows, stride_zj, i_ok, m_row, stride_mn,
               MASKED: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The keys j0 .. j0 + BLOCK_N of a row: k and v [BLOCK_N, BLOCK_D], the bias tile [queries, BLOCK_N] in
    float32 (without a mask -inf past N, so that those keys get probability 0), which keys the mask keeps (none past
    N) and the logit of those it does not (`_key_fill`: -inf past N)."""
    offs_j = j0 + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_D)
    j_ok = offs_j < N
    kv_off = offs_j[:, None].to(tl.int64) * stride_xn + offs_e[None, :]
    kv_ok = j_ok[:, None] & (offs_e < HEAD_DIM)[None, :]
    k = tl.load(row + D + kv_off, mask=kv_ok, other=0.0)
    v = tl.load(row + 2 * D + kv_off, mask=kv_ok, other=0.0)
    z = tl.load(z_rows + offs_j[None, :] * stride_zj, mask=i_ok[:, None] & j_ok[None, :], other=0.0).to(tl.float32)
    if not HAS_MASK:  # (with a mask, `_key_fill` gives keys past N their -inf)
        z = tl.where(j_ok[None, :], z, float("-inf"))
    if HAS_MASK:
        keep = tl.load(m_row + offs_j * stride_mn, mask=j_ok, other=0) != 0
    else:
        keep = j_ok
    return k, v, z, keep, _key_fill(j_ok, MASKED)


@triton.jit
def _key_fill(j_ok, MASKED: tl.constexpr):
    """The base-2 logit of a key the mask does not keep: MASKED, or -inf past N (probability 0)."""
    return tl.where(j_ok, MASKED * LOG2E, float("-inf"))


@triton.jit
def attention_forward_kernel(
    qkvg_ptr, stride_xb, stride_xs, stride_xn,  # (B, S, N, 4D): q, k, v, g at channel offsets 0, D, 2D, 3D
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,  # pair bias (B, h, N, N)
    m_ptr, stride_mb, stride_ms, stride_mn,  # HAS_MASK: key mask (B, S, N), 0/1 of any dtype
    o_ptr, stride_ob, stride_os, stride_on,  # out: gated output (B, S, N, D)
    lse_ptr, stride_lb, stride_ls, stride_ln, stride_lh, stride_lt,  # TRAIN: (2, B, S, N, h) float32: the rows'
    # largest logit and log2 of their sum of exp2(logit - largest), base 2 (one sum would lose the second
    # against the first when every key is masked)
    S, N, H, D,
    HEAD_DIM: tl.constexpr,  # (a constant: the compiler sees a head's channels as one aligned run)
    qk_scale,
    N_BUCKET,  # autotuning key only
    MASKED: tl.constexpr,
    HAS_MASK: tl.constexpr,
    TRAIN: tl.constexpr,
    ADDITIVE_MASK: tl.constexpr,  # the models' additive -inf mask: a masked key's NaN logit stays NaN
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    GATED: tl.constexpr = True,  # False: the un-gated output o (a key tile of ring attention), g not read
):
    s, blk, h, b = _program_coords(S, N, H, BLOCK_M)
    offs_i = blk * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_D)
    i_ok = offs_i < N
    e_ok = offs_e < HEAD_DIM
    row = qkvg_ptr + b * stride_xb + s * stride_xs + h * HEAD_DIM
    q = tl.load(row + offs_i[:, None].to(tl.int64) * stride_xn + offs_e[None, :],
                mask=i_ok[:, None] & e_ok[None, :], other=0.0)  # [BLOCK_M, BLOCK_D]
    z_rows = z_ptr + b * stride_zb + h * stride_zh + offs_i[:, None].to(tl.int64) * stride_zi
    m_row = m_ptr + b * stride_mb + s * stride_ms

    top = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    total = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for j0 in range(0, N, BLOCK_N):
        k, v, z, keep, fill = _key_block(row, j0, N, D, HEAD_DIM, stride_xn, z_rows, stride_zj, i_ok, m_row,
                                         stride_mn, MASKED, HAS_MASK, BLOCK_N, BLOCK_D)
        logit = _logits(q, k, z, keep, fill, qk_scale, HAS_MASK, ADDITIVE_MASK, PRECISION)  # -inf past N
        new_top = tl.maximum(top, tl.max(logit, axis=1))
        alpha = tl.math.exp2(top - new_top)
        p = tl.math.exp2(logit - new_top[:, None])  # [BLOCK_M, BLOCK_N]
        total = total * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        top = new_top
    out = acc / total[:, None]  # [BLOCK_M, BLOCK_D]

    out_off = b * stride_ob + s * stride_os + offs_i[:, None].to(tl.int64) * stride_on + h * HEAD_DIM + offs_e[None, :]
    out_ok = i_ok[:, None] & e_ok[None, :]
    if TRAIN:
        stat = lse_ptr + b * stride_lb + s * stride_ls + offs_i.to(tl.int64) * stride_ln + h * stride_lh
        tl.store(stat, top, mask=i_ok)
        tl.store(stat + stride_lt, tl.math.log2(total), mask=i_ok)
    if GATED:
        g = tl.load(row + 3 * D + offs_i[:, None].to(tl.int64) * stride_xn + offs_e[None, :], mask=out_ok, other=0.0)
        out = out * tl.sigmoid(g.to(tl.float32))
    tl.store(o_ptr + out_off, out.to(o_ptr.dtype.element_ty), mask=out_ok)


@triton.jit
def _log_sum_exp(stat, stride_lt, ok):
    """(largest logit, log2 of the sum of exp2(logit - largest)) of rows, from the forward's statistics."""
    return tl.load(stat, mask=ok, other=0.0), tl.load(stat + stride_lt, mask=ok, other=0.0)


@triton.jit
def _probabilities_grad(q, k, v, do, z, keep, fill, lse, delta, qk_scale, HAS_MASK: tl.constexpr,
                        PRECISION: tl.constexpr, ADDITIVE_MASK: tl.constexpr):
    """For a (queries, keys) tile: the probabilities p and the logits' gradient ds = p * (do v^T - delta),
    zero where a key's logit was replaced by the mask (a constant has no gradient) unless ADDITIVE_MASK: a logit
    plus -inf passes its gradient on, which in a row of masked keys alone (p = 1/N) is not zero."""
    logit = _logits(q, k, z, keep, fill, qk_scale, HAS_MASK, ADDITIVE_MASK, PRECISION)
    p = tl.math.exp2(logit - lse[0][:, None] - lse[1][:, None])  # [BLOCK_M, BLOCK_N]
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    if HAS_MASK and not ADDITIVE_MASK:
        ds = tl.where(keep[None, :], ds, 0.0)
    return p, ds


@triton.jit
def attention_dq_kernel(
    qkvg_ptr, stride_xb, stride_xs, stride_xn,
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,
    m_ptr, stride_mb, stride_ms, stride_mn,
    do_ptr, stride_ob, stride_os, stride_on,  # the un-gated output's gradient (B, S, N, D)
    lse_ptr, delta_ptr, stride_lb, stride_ls, stride_ln, stride_lh, stride_lt,  # the forward's statistics
    # (2, B, S, N, h) and delta = rowsum(do * o) (B, S, N, h), float32, with the strides of one plane
    dq_ptr, stride_db, stride_ds, stride_dn,  # out: dq (B, S, N, D)
    S, N, H, D,
    HEAD_DIM: tl.constexpr,  # (a constant: the compiler sees a head's channels as one aligned run)
    qk_scale, sm_scale,
    N_BUCKET,
    MASKED: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    ADDITIVE_MASK: tl.constexpr,  # masked keys pass their gradient on (the models' additive -inf mask)
    EXACT_DELTA: tl.constexpr = True,  # False: delta as given (a key tile's: its keys are part of the row)
):
    """dq for a block of queries, summed over the blocks of keys in order, and the rows' delta made exact for the
    kernels after it. delta = rowsum(do * o) comes from the rounded output; sum_j p dp (the exact delta) is summed
    beside dq, and dq corrected by (exact - rounded) * sum_j p k, a term of the rounding's size: with one key (p = 1)
    the correction is the product dq took, so a gradient that is exactly 0 comes out 0. The exact delta is stored
    in delta's place for dk, dv and the bias's gradient."""
    s, blk, h, b = _program_coords(S, N, H, BLOCK_M)
    offs_i = blk * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_D)
    i_ok = offs_i < N
    ie_ok = i_ok[:, None] & (offs_e < HEAD_DIM)[None, :]
    row = qkvg_ptr + b * stride_xb + s * stride_xs + h * HEAD_DIM
    q = tl.load(row + offs_i[:, None].to(tl.int64) * stride_xn + offs_e[None, :], mask=ie_ok, other=0.0)
    do = tl.load(do_ptr + b * stride_ob + s * stride_os + offs_i[:, None].to(tl.int64) * stride_on + h * HEAD_DIM
                 + offs_e[None, :], mask=ie_ok, other=0.0)  # [BLOCK_M, BLOCK_D]
    stat = b * stride_lb + s * stride_ls + offs_i.to(tl.int64) * stride_ln + h * stride_lh
    lse = _log_sum_exp(lse_ptr + stat, stride_lt, i_ok)
    delta = tl.load(delta_ptr + stat, mask=i_ok, other=0.0)
    z_rows = z_ptr + b * stride_zb + h * stride_zh + offs_i[:, None].to(tl.int64) * stride_zi
    m_row = m_ptr + b * stride_mb + s * stride_ms
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    pk = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)  # sum_j p k over the keys whose logits take a gradient
    spent = tl.zeros((BLOCK_M,), dtype=tl.float32)  # sum_j of ds as dq took it, rounded to the operands' dtype
    mass = tl.zeros((BLOCK_M,), dtype=tl.float32)  # sum_j p over the same keys
    for j0 in range(0, N, BLOCK_N):
        k, v, z, keep, fill = _key_block(row, j0, N, D, HEAD_DIM, stride_xn, z_rows, stride_zj, i_ok, m_row,
                                         stride_mn, MASKED, HAS_MASK, BLOCK_N, BLOCK_D)
        p, ds = _probabilities_grad(q, k, v, do, z, keep, fill, lse, delta, qk_scale, HAS_MASK, PRECISION,
                                    ADDITIVE_MASK)
        ij_ok = i_ok[:, None] & (j0 + tl.arange(0, BLOCK_N) < N)[None, :]
        if HAS_MASK and not ADDITIVE_MASK:
            ij_ok = ij_ok & keep[None, :]
        ds = tl.where(ij_ok, ds, 0.0).to(k.dtype)
        p = tl.where(ij_ok, p, 0.0)
        dq = tl.dot(ds, k, dq, input_precision=PRECISION)
        pk = tl.dot(p.to(k.dtype), k, pk, input_precision=PRECISION)
        spent += tl.sum(ds.to(tl.float32), axis=1)
        mass += tl.sum(p, axis=1)
    # exact delta = sum_j p dp = sum_j ds + delta sum_j p; dq less (exact - delta) sum_j p k
    if EXACT_DELTA:
        dq -= spent[:, None] * pk - (delta * (1.0 - mass))[:, None] * pk
        tl.store(delta_ptr + stat, spent + delta * mass, mask=i_ok)
    tl.store(dq_ptr + b * stride_db + s * stride_ds + offs_i[:, None].to(tl.int64) * stride_dn + h * HEAD_DIM
             + offs_e[None, :], (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=ie_ok)


@triton.jit
def attention_dkdv_kernel(
    qkvg_ptr, stride_xb, stride_xs, stride_xn,
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,
    m_ptr, stride_mb, stride_ms, stride_mn,
    do_ptr, stride_ob, stride_os, stride_on,
    lse_ptr, delta_ptr, stride_lb, stride_ls, stride_ln, stride_lh, stride_lt,
    dkv_ptr, stride_db, stride_ds, stride_dn,  # out: dk at channel 0, dv at channel D of (B, S, N, 2D)
    S, N, H, D,
    HEAD_DIM: tl.constexpr,  # (a constant: the compiler sees a head's channels as one aligned run)
    qk_scale, sm_scale,
    N_BUCKET,
    MASKED: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr,  # queries a step
    BLOCK_N: tl.constexpr,  # the program's keys
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    ADDITIVE_MASK: tl.constexpr,  # masked keys pass their gradient on (the models' additive -inf mask)
):
    """dk and dv for a block of keys, summed over the blocks of queries in order (the probabilities
    recomputed transposed, [keys, queries])."""
    s, blk, h, b = _program_coords(S, N, H, BLOCK_N)
    offs_j = blk * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_D)
    j_ok = offs_j < N
    je_ok = j_ok[:, None] & (offs_e < HEAD_DIM)[None, :]
    row = qkvg_ptr + b * stride_xb + s * stride_xs + h * HEAD_DIM
    kv_off = offs_j[:, None].to(tl.int64) * stride_xn + offs_e[None, :]
    k = tl.load(row + D + kv_off, mask=je_ok, other=0.0)  # [BLOCK_N, BLOCK_D]
    v = tl.load(row + 2 * D + kv_off, mask=je_ok, other=0.0)
    if HAS_MASK:
        keep = tl.load(m_ptr + b * stride_mb + s * stride_ms + offs_j * stride_mn, mask=j_ok, other=1) != 0
    else:
        keep = j_ok
    z_cols = z_ptr + b * stride_zb + h * stride_zh + offs_j[:, None].to(tl.int64) * stride_zj
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for i0 in range(0, N, BLOCK_M):
        offs_i = i0 + tl.arange(0, BLOCK_M)
        i_ok = offs_i < N
        ie_ok = i_ok[:, None] & (offs_e < HEAD_DIM)[None, :]
        q = tl.load(row + offs_i[:, None].to(tl.int64) * stride_xn + offs_e[None, :], mask=ie_ok, other=0.0)
        do = tl.load(do_ptr + b * stride_ob + s * stride_os + offs_i[:, None].to(tl.int64) * stride_on
                     + h * HEAD_DIM + offs_e[None, :], mask=ie_ok, other=0.0)  # [BLOCK_M, BLOCK_D]
        stat = b * stride_lb + s * stride_ls + offs_i.to(tl.int64) * stride_ln + h * stride_lh
        lse = _log_sum_exp(lse_ptr + stat, stride_lt, i_ok)
        delta = tl.load(delta_ptr + stat, mask=i_ok, other=0.0)
        z_t = tl.load(z_cols + offs_i[None, :].to(tl.int64) * stride_zi, mask=j_ok[:, None] & i_ok[None, :],
                      other=0.0)  # [BLOCK_N, BLOCK_M]
        z_t = tl.where(j_ok[:, None], z_t.to(tl.float32), float("-inf"))  # keys past N: probability 0
        logit_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale + z_t * LOG2E
        if HAS_MASK:
            if ADDITIVE_MASK:  # (as `_logits`)
                logit_t = tl.where(keep[:, None], logit_t, MASKED * LOG2E + logit_t * 0.0)
            else:
                logit_t = tl.where(keep[:, None], logit_t, MASKED * LOG2E)
        ok = j_ok[:, None] & i_ok[None, :]
        p_t = tl.where(ok, tl.math.exp2(logit_t - lse[0][None, :] - lse[1][None, :]), 0.0)  # [BLOCK_N, BLOCK_M]
        dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        if HAS_MASK and not ADDITIVE_MASK:
            ds_t = tl.where(keep[:, None], ds_t, 0.0)
        dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=PRECISION)
    out = dkv_ptr + b * stride_db + s * stride_ds + h * HEAD_DIM + offs_j[:, None].to(tl.int64) * stride_dn + offs_e[None, :]
    tl.store(out, (dk * sm_scale).to(dkv_ptr.dtype.element_ty), mask=je_ok)
    tl.store(out + D, dv.to(dkv_ptr.dtype.element_ty), mask=je_ok)


@triton.jit
def attention_dz_kernel(
    qkvg_ptr, stride_xb, stride_xs, stride_xn,
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,
    m_ptr, stride_mb, stride_ms, stride_mn,
    do_ptr, stride_ob, stride_os, stride_on,
    lse_ptr, delta_ptr, stride_lb, stride_ls, stride_ln, stride_lh, stride_lt,
    dz_ptr, stride_dz,  # out: the pair bias's gradient over each split of the MSA rows (splits, B, h, N, N) float32,
    # each split's with z's strides, the next split stride_dz further on
    S, N, H, D,
    SPLITS,  # parts of the MSA rows, each summed by programs of its own
    HEAD_DIM: tl.constexpr,  # (a constant: the compiler sees a head's channels as one aligned run)
    qk_scale,
    N_BUCKET,
    MASKED: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    ADDITIVE_MASK: tl.constexpr,  # masked keys pass their gradient on (the models' additive -inf mask)
):
    """The pair bias's gradient for a (queries, keys) tile of one head: the logits' gradient summed over one
    split of the MSA rows (cdiv(S, SPLITS) consecutive rows), in order."""
    pid = tl.program_id(0).to(tl.int64)
    n_blocks_j = tl.cdiv(N, BLOCK_N)
    n_blocks_i = tl.cdiv(N, BLOCK_M)
    blk_j = pid % n_blocks_j
    blk_i = (pid // n_blocks_j) % n_blocks_i
    split = (pid // (n_blocks_j * n_blocks_i)) % SPLITS
    h = (pid // (n_blocks_j * n_blocks_i * SPLITS)) % H
    b = pid // (n_blocks_j * n_blocks_i * SPLITS * H)
    rows = tl.cdiv(S, SPLITS)
    offs_i = blk_i * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_j = blk_j * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_D)
    i_ok = offs_i < N
    j_ok = offs_j < N
    ie_ok = i_ok[:, None] & (offs_e < HEAD_DIM)[None, :]
    je_ok = j_ok[:, None] & (offs_e < HEAD_DIM)[None, :]
    ij_ok = i_ok[:, None] & j_ok[None, :]
    z_off = b * stride_zb + h * stride_zh + offs_i[:, None].to(tl.int64) * stride_zi + offs_j[None, :] * stride_zj
    z = tl.load(z_ptr + z_off, mask=ij_ok, other=0.0).to(tl.float32)  # [BLOCK_M, BLOCK_N]
    if not HAS_MASK:  # keys past N: probability 0 (with a mask, `_key_fill` gives them -inf)
        z = tl.where(j_ok[None, :], z, float("-inf"))
    q_off = offs_i[:, None].to(tl.int64) * stride_xn + h * HEAD_DIM + offs_e[None, :]
    kv_off = offs_j[:, None].to(tl.int64) * stride_xn + h * HEAD_DIM + offs_e[None, :]
    do_off = offs_i[:, None].to(tl.int64) * stride_on + h * HEAD_DIM + offs_e[None, :]
    stat_off = offs_i.to(tl.int64) * stride_ln + h * stride_lh
    fill = _key_fill(j_ok, MASKED)
    dz = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in range(split * rows, tl.minimum(S, split * rows + rows)):
        row = qkvg_ptr + b * stride_xb + s * stride_xs
        q = tl.load(row + q_off, mask=ie_ok, other=0.0)
        k = tl.load(row + D + kv_off, mask=je_ok, other=0.0)
        v = tl.load(row + 2 * D + kv_off, mask=je_ok, other=0.0)
        do = tl.load(do_ptr + b * stride_ob + s * stride_os + do_off, mask=ie_ok, other=0.0)
        stat = b * stride_lb + s * stride_ls + stat_off
        lse = _log_sum_exp(lse_ptr + stat, stride_lt, i_ok)
        delta = tl.load(delta_ptr + stat, mask=i_ok, other=0.0)
        if HAS_MASK:
            keep = tl.load(m_ptr + b * stride_mb + s * stride_ms + offs_j * stride_mn, mask=j_ok, other=0) != 0
        else:
            keep = j_ok
        _, ds = _probabilities_grad(q, k, v, do, z, keep, fill, lse, delta, qk_scale, HAS_MASK, PRECISION,
                                    ADDITIVE_MASK)
        dz += tl.where(ij_ok, ds, 0.0)
    tl.store(dz_ptr + split * stride_dz + z_off, dz, mask=ij_ok)

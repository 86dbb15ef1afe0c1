"""Global column attention's columns' part in one kernel: a program a column (b, r) reads its rows' queries, keys and
values from the joined projection and makes the masked mean of the queries, the h x L logits, their softmax and the
attention result, in float32, in place of ~15 PyTorch calls on tensors of a column's width (the eager call's host
time at the extra-MSA stack's shapes)."""

import triton
import triton.language as tl


@triton.jit
def _row_mask(m_ptr, offs_l, l_ok, stride_ml, HAS_MASK: tl.constexpr):
    """The mask of the rows offs_l [BLOCK_L] of a column in float32: 0 past L, 1 without a mask."""
    if HAS_MASK:
        return tl.load(m_ptr + offs_l * stride_ml, mask=l_ok, other=0).to(tl.float32)
    return tl.where(l_ok, 1.0, 0.0)


@triton.jit
def columns_kernel(
    proj_ptr, stride_pb, stride_pr, stride_pl,  # the rows' [g, q, k, v]: (B, R, L, 2HC + 2d), channel stride 1
    m_ptr, stride_mb, stride_mr, stride_ml,  # HAS_MASK: the rows' mask (B, R, L), 0/1 of any dtype
    qb_ptr,  # HAS_QUERY_BIAS: the query's bias (HC,)
    q_ptr,  # out: the scaled queries (B*R, HC) float32, head major
    o_ptr,  # out: the attention results (B*R, HC) float32, head major
    R, L, HC, D_HEAD, qk_scale, eps, inf,
    HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr,  # the heads, padded to a power of two
    BLOCK_D: tl.constexpr,  # a head's width d, padded
    BLOCK_L: tl.constexpr,  # rows a step
    FILL: tl.constexpr,  # inf >= 1e9: a masked row's logit -1e9 (NaN stays NaN); else inf * (mask - 1) added
    MASK_LOGIT: tl.constexpr,
    HAS_MASK: tl.constexpr,
    HAS_QUERY_BIAS: tl.constexpr,
):
    """Column (b, r): q = (sum_l mask_l q_l / (sum_l mask_l + eps) + b_q) d**-0.5 from the rows' queries (first pass);
    then the logits q . k_l of each head, masked, an online softmax over the rows and o = sum_l p_l v_l (second pass);
    q (for the backward) and o written."""
    pid = tl.program_id(0).to(tl.int64)
    b = pid // R
    r = pid % R
    rows = proj_ptr + b * stride_pb + r * stride_pr
    m_col = m_ptr + b * stride_mb + r * stride_mr
    offs_h = tl.arange(0, BLOCK_H)
    offs_c = tl.arange(0, BLOCK_D)
    c_ok = offs_c < D_HEAD
    hc_ok = (offs_h < HEADS)[:, None] & c_ok[None, :]  # [BLOCK_H, BLOCK_D]
    cols = offs_h[:, None] * D_HEAD + offs_c[None, :]  # [BLOCK_H, BLOCK_D]: (head, channel) of the HC
    q = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    count = tl.sum(tl.zeros((BLOCK_L,), dtype=tl.float32), axis=0)
    for l0 in range(0, L, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)  # [BLOCK_L]
        l_ok = offs_l < L
        w = _row_mask(m_col, offs_l, l_ok, stride_ml, HAS_MASK)
        qs = tl.load(rows + offs_l.to(tl.int64)[:, None, None] * stride_pl + HC + cols[None, :, :],
                     mask=l_ok[:, None, None] & hc_ok[None, :, :], other=0.0).to(tl.float32)  # [BLOCK_L, BLOCK_H, BLOCK_D]
        q += tl.sum(qs * w[:, None, None], axis=0)
        count += tl.sum(w, axis=0)
    q = q / (count + eps)
    if HAS_QUERY_BIAS:
        q += tl.load(qb_ptr + cols, mask=hc_ok, other=0.0).to(tl.float32)
    q = q * qk_scale
    tl.store(q_ptr + pid * HC + cols, q, mask=hc_ok)
    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    for l0 in range(0, L, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        l_ok = offs_l < L
        kv_at = rows + offs_l.to(tl.int64)[:, None] * stride_pl + 2 * HC + offs_c[None, :]  # [BLOCK_L, BLOCK_D]
        kv_ok = l_ok[:, None] & c_ok[None, :]
        k = tl.load(kv_at, mask=kv_ok, other=0.0).to(tl.float32)
        v = tl.load(kv_at + D_HEAD, mask=kv_ok, other=0.0).to(tl.float32)
        s = tl.sum(q[None, :, :] * k[:, None, :], axis=2)  # [BLOCK_L, BLOCK_H]
        w = _row_mask(m_col, offs_l, l_ok, stride_ml, HAS_MASK)[:, None]  # [BLOCK_L, 1]
        if FILL:
            s = tl.where(w == 0, s * 0 + MASK_LOGIT, s)
        else:
            s = s + inf * (w - 1)
        s = tl.where(l_ok[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))  # [BLOCK_H]
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[None, :])  # [BLOCK_L, BLOCK_H]
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[:, None, :], axis=0)
        m_i = m_new
    tl.store(o_ptr + pid * HC + cols, acc / l_i[:, None], mask=hc_ok)

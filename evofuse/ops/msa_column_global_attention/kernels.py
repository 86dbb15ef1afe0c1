"""Global column attention's columns' part in one kernel each way: a program a column (b, r) reads its rows' queries,
keys and values from the joined projection and makes the masked mean of the queries, the h x L logits, their softmax
and the attention result (and in the backward the rows' query, key and value gradients), in float32, in place of ~15
PyTorch calls each way on tensors of a column's width (the eager call's host time at the extra-MSA stack's shapes)."""

import triton
import triton.language as tl


@triton.jit
def _row_mask(m_ptr, offs_l, l_ok, stride_ml, HAS_MASK: tl.constexpr):
    """The mask of the rows offs_l [BLOCK_L] of a column in float32: 0 past L, 1 without a mask."""
    if HAS_MASK:
        return tl.load(m_ptr + offs_l * stride_ml, mask=l_ok, other=0).to(tl.float32)
    return tl.where(l_ok, 1.0, 0.0)


@triton.jit
def _column(pid, R, D_HEAD, HEADS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    """(b, r) of column pid, a head's channels offs_c [BLOCK_D] and c_ok, and the (head, channel) tile's hc_ok and
    columns of the HC, [BLOCK_H, BLOCK_D]."""
    offs_h = tl.arange(0, BLOCK_H)
    offs_c = tl.arange(0, BLOCK_D)
    c_ok = offs_c < D_HEAD
    hc_ok = (offs_h < HEADS)[:, None] & c_ok[None, :]
    return pid // R, pid % R, offs_c, c_ok, hc_ok, offs_h[:, None] * D_HEAD + offs_c[None, :]


@triton.jit
def columns_kernel(
    proj_ptr, stride_pb, stride_pr, stride_pl,  # the rows' [g, q, k, v]: (B, R, L, 2HC + 2d), channel stride 1
    m_ptr, stride_mb, stride_mr, stride_ml,  # HAS_MASK: the rows' mask (B, R, L), 0/1 of any dtype
    qb_ptr,  # HAS_QUERY_BIAS: the query's bias (HC,)
    q_ptr,  # out: the scaled queries (B, R, HC) float32, head major
    o_ptr,  # out: the attention results (B, R, HC) float32, head major
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
    b, r, offs_c, c_ok, hc_ok, cols = _column(pid, R, D_HEAD, HEADS, BLOCK_H, BLOCK_D)
    rows = proj_ptr + b * stride_pb + r * stride_pr
    m_col = m_ptr + b * stride_mb + r * stride_mr
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
    _, _, o = _softmax_pass(rows, m_col, L, stride_pl, stride_ml, q, offs_c, c_ok, HC, D_HEAD, inf, FILL, MASK_LOGIT,
                            HAS_MASK, BLOCK_H, BLOCK_D, BLOCK_L)
    tl.store(o_ptr + pid * HC + cols, o, mask=hc_ok)


@triton.jit
def columns_backward_kernel(
    proj_ptr, stride_pb, stride_pr, stride_pl,  # the rows' [g, q, k, v]: (B, R, L, 2HC + 2d), channel stride 1
    m_ptr, stride_mb, stride_mr, stride_ml,  # HAS_MASK: the rows' mask (B, R, L), 0/1 of any dtype
    q_ptr,  # the scaled queries (B, R, HC) float32, head major (the forward's)
    do_ptr,  # the attention results' gradient (B, R, HC) float32
    o_ptr,  # out: the attention results again (B, R, HC) float32
    dq_ptr,  # out: the unscaled query's gradient (B, R, HC) float32 (its bias's, summed over the columns)
    dp_ptr, stride_db, stride_dr, stride_dl,  # out: the rows' [q, k, v] gradients, channels HC on of (B, R, L, 2HC + 2d)
    # (the gate's, channels 0 .. HC, are the caller's)
    R, L, HC, D_HEAD, qk_scale, eps, inf,
    HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
    FILL: tl.constexpr,
    MASK_LOGIT: tl.constexpr,
    HAS_MASK: tl.constexpr,
):
    """Column (b, r), for the forward's q and the results' gradient do: the softmax's statistics and o again (first
    pass over the rows); p, dp = do . v_l, dz = p (dp - do . o); each row's dk = dz q and dv = p do, and the query's
    gradient dq = sum_l dz k_l (second pass); each row's query gradient mask_l dq d**-0.5 / (count + eps) (third
    pass). In float32, the rows' gradients rounded once to the projection's dtype."""
    pid = tl.program_id(0).to(tl.int64)
    b, r, offs_c, c_ok, hc_ok, cols = _column(pid, R, D_HEAD, HEADS, BLOCK_H, BLOCK_D)
    rows = proj_ptr + b * stride_pb + r * stride_pr
    d_rows = dp_ptr + b * stride_db + r * stride_dr
    m_col = m_ptr + b * stride_mb + r * stride_mr
    q = tl.load(q_ptr + pid * HC + cols, mask=hc_ok, other=0.0)
    do = tl.load(do_ptr + pid * HC + cols, mask=hc_ok, other=0.0)
    m_i, l_i, o = _softmax_pass(rows, m_col, L, stride_pl, stride_ml, q, offs_c, c_ok, HC, D_HEAD, inf, FILL,
                                MASK_LOGIT, HAS_MASK, BLOCK_H, BLOCK_D, BLOCK_L)
    tl.store(o_ptr + pid * HC + cols, o, mask=hc_ok)
    delta = tl.sum(do * o, axis=1)  # [BLOCK_H]
    dq = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    count = tl.sum(tl.zeros((BLOCK_L,), dtype=tl.float32), axis=0)
    dtype = dp_ptr.dtype.element_ty
    for l0 in range(0, L, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        l_ok = offs_l < L
        k, v, s = _keys_values_logits(rows, m_col, offs_l, l_ok, stride_pl, stride_ml, q, offs_c, c_ok, HC, D_HEAD, inf,
                                      FILL, MASK_LOGIT, HAS_MASK)
        p = tl.exp(s - m_i[None, :]) / l_i[None, :]  # [BLOCK_L, BLOCK_H]
        dz = p * (tl.sum(do[None, :, :] * v[:, None, :], axis=2) - delta[None, :])
        dq += tl.sum(dz[:, :, None] * k[:, None, :], axis=0)
        at = d_rows + offs_l.to(tl.int64)[:, None] * stride_dl + 2 * HC + offs_c[None, :]  # [BLOCK_L, BLOCK_D]
        kv_ok = l_ok[:, None] & c_ok[None, :]
        tl.store(at, tl.sum(dz[:, :, None] * q[None, :, :], axis=1).to(dtype), mask=kv_ok)  # dk
        tl.store(at + D_HEAD, tl.sum(p[:, :, None] * do[None, :, :], axis=1).to(dtype), mask=kv_ok)  # dv
        count += tl.sum(_row_mask(m_col, offs_l, l_ok, stride_ml, HAS_MASK), axis=0)
    dq = dq * qk_scale
    tl.store(dq_ptr + pid * HC + cols, dq, mask=hc_ok)
    dq = dq / (count + eps)
    for l0 in range(0, L, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        l_ok = offs_l < L
        w = _row_mask(m_col, offs_l, l_ok, stride_ml, HAS_MASK)
        tl.store(d_rows + offs_l.to(tl.int64)[:, None, None] * stride_dl + HC + cols[None, :, :],
                 (w[:, None, None] * dq[None, :, :]).to(dtype), mask=l_ok[:, None, None] & hc_ok[None, :, :])


@triton.jit
def _keys_values_logits(rows, m_col, offs_l, l_ok, stride_pl, stride_ml, q, offs_c, c_ok, HC, D_HEAD, inf,
                        FILL: tl.constexpr, MASK_LOGIT: tl.constexpr, HAS_MASK: tl.constexpr):
    """(k, v [BLOCK_L, BLOCK_D], the logits [BLOCK_L, BLOCK_H]) of rows offs_l of a column, float32: q . k_l, masked
    as the forward masks them, -inf past L."""
    kv_at = rows + offs_l.to(tl.int64)[:, None] * stride_pl + 2 * HC + offs_c[None, :]
    kv_ok = l_ok[:, None] & c_ok[None, :]
    k = tl.load(kv_at, mask=kv_ok, other=0.0).to(tl.float32)
    v = tl.load(kv_at + D_HEAD, mask=kv_ok, other=0.0).to(tl.float32)
    s = tl.sum(q[None, :, :] * k[:, None, :], axis=2)
    w = _row_mask(m_col, offs_l, l_ok, stride_ml, HAS_MASK)[:, None]
    if FILL:
        s = tl.where(w == 0, s * 0 + MASK_LOGIT, s)
    else:
        s = s + inf * (w - 1)
    return k, v, tl.where(l_ok[:, None], s, float("-inf"))


@triton.jit
def _softmax_pass(rows, m_col, L, stride_pl, stride_ml, q, offs_c, c_ok, HC, D_HEAD, inf, FILL: tl.constexpr,
                  MASK_LOGIT: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
                  BLOCK_L: tl.constexpr):
    """(the logits' running max and sum [BLOCK_H], the attention result o [BLOCK_H, BLOCK_D]) of a column by an online
    softmax over its rows, BLOCK_L a step, in float32."""
    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.float32)
    for l0 in range(0, L, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        l_ok = offs_l < L
        k, v, s = _keys_values_logits(rows, m_col, offs_l, l_ok, stride_pl, stride_ml, q, offs_c, c_ok, HC, D_HEAD, inf,
                                      FILL, MASK_LOGIT, HAS_MASK)  # [BLOCK_L, BLOCK_D] twice, [BLOCK_L, BLOCK_H]
        m_new = tl.maximum(m_i, tl.max(s, axis=0))  # [BLOCK_H]
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[None, :])  # [BLOCK_L, BLOCK_H]
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[:, None, :], axis=0)
        m_i = m_new
    return m_i, l_i, acc / l_i[:, None]

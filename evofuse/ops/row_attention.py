"""Fused MSA row attention with pair bias, forward (SPEC 2), in Triton.

Three stages:
1. LayerNorm and the query/key/value/gate projections as one GEMM over the concatenated weights:
   qkvg (B, S, N, 4D), read in place by the kernel (no head permutes).
2. The pair bias, computed once per batch element (not per MSA row): (B, h, N, N).
3. `_row_attention_kernel`: flash-style, one program per (b, h, block of query rows i, s), streaming
   blocks of keys j with an online softmax; the key mask replaces logits by -1e9 (a fully masked
   row is the mean of v over all keys, never NaN); the sigmoid gate is applied in the epilogue and
   the merged-heads layout (B, S, N, D) is written over the queries, so out_proj is one GEMM on a
   strided view. No S*h*N*N tensor, and no buffer beyond qkvg, the pair bias and the output.
4. out_proj, one GEMM reading the strided (rows, D) view of qkvg in place.

Small problems (N <= 32, msa_dim <= 128, contiguous weights) take one launch instead:
`_row_attention_small_kernel`, a program per MSA row doing all of the above on chip.
The backward (`attention_core_backward`) recomputes the probabilities tile by tile in two or three kernels; see there.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..reference import LAYER_NORM_EPS, MASK_LOGIT
from . import split_linear
from ._common import (
    bucket,
    cached_launch,
    cdiv,
    dot_precision,
    empty,
    ieee_fp32_matmul,
    interpreting,
    launch,
    multiprocessors,
    next_pow2,
    single_launch_output,
)
from .layer_norm_linear import layer_norm, layer_norm_fits, ln_project, ln_project_ready, normalize_rows, row_coords

MAX_HEAD_DIM = 128
_LOG2E = 1.4426950408889634


@triton.jit
def _key_mask(m_row, offs_j, j_ok, stride_mj, HAS_MASK: tl.constexpr):
    """Which keys of a block are masked ([BLOCK_N]; keys past N count as unmasked: their bias is -inf; all
    False without a mask)."""
    if HAS_MASK:
        return tl.load(m_row + offs_j * stride_mj, mask=j_ok, other=1) == 0
    return offs_j < 0


@triton.jit
def _scores(q, k, z, masked, qk_scale,
            HAS_MASK: tl.constexpr, LOG2E: tl.constexpr, MASKED_LOGIT: tl.constexpr, PRECISION: tl.constexpr):
    """Logits of a (query block, key block) tile in log2 units, q k^T / sqrt(d) + z, with z the bias tile
    in float32 loaded as -inf past N (p is then 0 there with no select), the logits of masked keys
    (`_key_mask`) replaced by -1e9 (a replaced logit has no gradient)."""
    logit = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + z * LOG2E  # [BLOCK_M, BLOCK_N]
    if HAS_MASK:
        logit = tl.where(masked[None, :], MASKED_LOGIT, logit)  # replaced, not added
    return logit


@triton.jit
def _row_block(S, N, H, BLOCK: tl.constexpr):
    """This program's (MSA row s, block of residues, head, batch element), s varying fastest so that
    programs running together share the (b, h) pair-bias tiles in L2."""
    pid = tl.program_id(0).to(tl.int64)
    s = pid % S
    rest = pid // S
    n_blk = tl.cdiv(N, BLOCK)
    blk = rest % n_blk
    rest = rest // n_blk
    return s, blk, rest % H, rest // H


@triton.jit
def _row_attention_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi,  # qkvg: (B, S, N, 4D); channel 0*D + h*d + e is q, 1*D.. k, 2*D.. v, 3*D.. gate
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,  # pair bias: (B, h, N, N)
    m_ptr, stride_mb, stride_ms, stride_mj,  # key mask: (B, S, N), any real dtype, 0 = masked (HAS_MASK)
    o_ptr, stride_ob, stride_os, stride_oi,  # un-gated output: (B, S, N, D), channel h*d + e (STORE_STATS)
    st_ptr, stride_st, stride_lb, stride_ls, stride_lh,  # softmax statistics: (2, B, S, h, N) float32 (STORE_STATS)
    S, N, H, D, HEAD_DIM, qk_scale,  # qk_scale = log2(e) / sqrt(d)
    N_BUCKET,  # autotuning key only
    HAS_MASK: tl.constexpr,
    LOG2E: tl.constexpr,
    MASKED_LOGIT: tl.constexpr,  # -1e9 in log2 units
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    GATE: tl.constexpr,  # the output times sigmoid(gate), written over the queries (the forward)
    STORE_STATS: tl.constexpr,  # each row's running max (log2 units) and sum of exponentials, kept apart:
    # for a fully masked row max + log2(sum) would lose log2(N) against -1e9 * log2(e) in float32
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    s, blk_i, h, b = _row_block(S, N, H, BLOCK_M)

    offs_i = blk_i * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_e = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    i_ok = offs_i < N
    e_ok = offs_e < HEAD_DIM
    row_base = x_ptr + b * stride_xb + s * stride_xs
    q_ptrs = row_base + offs_i.to(tl.int64)[:, None] * stride_xi + (h * HEAD_DIM + offs_e)[None, :]
    q = tl.load(q_ptrs, mask=i_ok[:, None] & e_ok[None, :], other=0.0)  # [BLOCK_M, BLOCK_D]
    # rows past N read row N - 1 (never stored; -inf there would make NaN), keys past N -inf
    z_base = z_ptr + b * stride_zb + h * stride_zh + tl.minimum(offs_i, N - 1).to(tl.int64)[:, None] * stride_zi
    m_row = m_ptr + b * stride_mb + s * stride_ms

    m_run = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_run = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for j0 in range(0, N, BLOCK_N):
        offs_j = j0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
        j_ok = offs_j < N
        kv_ptrs = row_base + offs_j.to(tl.int64)[:, None] * stride_xi + (h * HEAD_DIM + offs_e)[None, :]
        kv_mask = j_ok[:, None] & e_ok[None, :]
        k = tl.load(kv_ptrs + D, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        v = tl.load(kv_ptrs + 2 * D, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        z = tl.load(z_base + offs_j[None, :] * stride_zj, mask=j_ok[None, :], other=float("-inf"))
        logit = _scores(q, k, z.to(tl.float32), _key_mask(m_row, offs_j, j_ok, stride_mj, HAS_MASK), qk_scale,
                        HAS_MASK, LOG2E, MASKED_LOGIT, PRECISION)  # [BLOCK_M, BLOCK_N]
        m_new = tl.maximum(m_run, tl.max(logit, axis=1))
        p = tl.math.exp2(logit - m_new[:, None])
        alpha = tl.math.exp2(m_run - m_new)
        l_run = l_run * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_run = m_new

    out = acc / l_run[:, None]  # [BLOCK_M, BLOCK_D]
    ie_ok = i_ok[:, None] & e_ok[None, :]
    if STORE_STATS:  # the un-gated output and the statistics, for the backward
        stat = st_ptr + b * stride_lb + s * stride_ls + h * stride_lh + offs_i
        tl.store(stat, m_run, mask=i_ok)
        tl.store(stat + stride_st, l_run, mask=i_ok)
        o_ptrs = o_ptr + b * stride_ob + s * stride_os + offs_i.to(tl.int64)[:, None] * stride_oi \
            + (h * HEAD_DIM + offs_e)[None, :]
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=ie_ok)
    if GATE:
        # the gated output overwrites this program's own queries (read above, by no other program):
        # no race, and the merged-heads output needs no buffer of its own
        out = out * tl.sigmoid(tl.load(q_ptrs + 3 * D, mask=ie_ok, other=0.0).to(tl.float32))
        tl.store(q_ptrs, out.to(x_ptr.dtype.element_ty), mask=ie_ok)


@triton.jit
def _row_attention_bwd_dq_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi,  # qkvg: (B, S, N, 4D)
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,  # pair bias: (B, h, N, N)
    m_ptr, stride_mb, stride_ms, stride_mj,  # key mask: (B, S, N), any real dtype (HAS_MASK)
    do_ptr, stride_db, stride_ds, stride_di,  # gradient of the un-gated attention output: (B, S, N, D)
    st_ptr, stride_st, dl_ptr, stride_lb, stride_ls, stride_lh,  # statistics (2, B, S, h, N), rowsum(do * o) (B, S, h, N)
    dx_ptr,  # gradient of qkvg, same strides as qkvg: dq goes to channels [0, D)
    S, N, H, D, HEAD_DIM, qk_scale, sm_scale,
    N_BUCKET,  # autotuning key only
    HAS_MASK: tl.constexpr, LOG2E: tl.constexpr, MASKED_LOGIT: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, OPERAND_BYTES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """dq for one (b, s, h, block of query rows): dL = P (dP - rowsum(do o)), dq = dL k / sqrt(d),
    summed over key blocks inside the program (no atomics)."""
    s, blk_i, h, b = _row_block(S, N, H, BLOCK_M)

    offs_i = blk_i * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_e = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    i_ok = offs_i < N
    ie_ok = i_ok[:, None] & (offs_e < HEAD_DIM)[None, :]
    row_base = x_ptr + b * stride_xb + s * stride_xs
    q_off = offs_i.to(tl.int64)[:, None] * stride_xi + (h * HEAD_DIM + offs_e)[None, :]
    q = tl.load(row_base + q_off, mask=ie_ok, other=0.0)  # [BLOCK_M, BLOCK_D]
    do = tl.load(do_ptr + b * stride_db + s * stride_ds + offs_i.to(tl.int64)[:, None] * stride_di
                 + (h * HEAD_DIM + offs_e)[None, :], mask=ie_ok, other=0.0)  # [BLOCK_M, BLOCK_D]
    stat = b * stride_lb + s * stride_ls + h * stride_lh + offs_i
    row_max = tl.load(st_ptr + stat, mask=i_ok, other=0.0)  # [BLOCK_M]
    row_inv = 1.0 / tl.load(st_ptr + stride_st + stat, mask=i_ok, other=1.0)  # [BLOCK_M]
    dl = tl.load(dl_ptr + stat, mask=i_ok, other=0.0)  # [BLOCK_M]
    z_base = z_ptr + b * stride_zb + h * stride_zh + offs_i.to(tl.int64)[:, None] * stride_zi
    m_row = m_ptr + b * stride_mb + s * stride_ms

    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for j0 in range(0, N, BLOCK_N):
        offs_j = j0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
        j_ok = offs_j < N
        kv_ptrs = row_base + offs_j.to(tl.int64)[:, None] * stride_xi + (h * HEAD_DIM + offs_e)[None, :]
        kv_mask = j_ok[:, None] & (offs_e < HEAD_DIM)[None, :]
        k = tl.load(kv_ptrs + D, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        v = tl.load(kv_ptrs + 2 * D, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        # -inf past N (rows or keys): p = 0 there (the statistics of rows past N read as 0 and 1)
        z = tl.load(z_base + offs_j[None, :] * stride_zj, mask=i_ok[:, None] & j_ok[None, :], other=float("-inf"))
        masked = _key_mask(m_row, offs_j, j_ok, stride_mj, HAS_MASK)  # [BLOCK_N]
        logit = _scores(q, k, z.to(tl.float32), masked, qk_scale, HAS_MASK, LOG2E, MASKED_LOGIT,
                        PRECISION)  # [BLOCK_M, BLOCK_N]
        p = tl.math.exp2(logit - row_max[:, None]) * row_inv[:, None]  # [BLOCK_M, BLOCK_N]
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # [BLOCK_M, BLOCK_N]
        ds = p * (dp - dl[:, None])  # [BLOCK_M, BLOCK_N]
        if HAS_MASK:
            ds = tl.where(masked[None, :], 0.0, ds)
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)  # [BLOCK_M, BLOCK_D]
    tl.store(dx_ptr + b * stride_xb + s * stride_xs + q_off, (dq * sm_scale).to(dx_ptr.dtype.element_ty), mask=ie_ok)


@triton.jit
def _row_attention_bwd_keys_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi,  # qkvg: (B, S, N, 4D)
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,  # pair bias: (B, h, N, N)
    m_ptr, stride_mb, stride_ms, stride_mj,  # key mask: (B, S, N), any real dtype (HAS_MASK)
    do_ptr, stride_db, stride_ds, stride_di,  # gradient of the un-gated attention output: (B, S, N, D)
    st_ptr, stride_st, dl_ptr, stride_lb, stride_ls, stride_lh,  # as in the dq kernel
    dx_ptr,  # gradient of qkvg: dk to channels [D, 2D), dv to [2D, 3D), with DQ dq to [0, D)
    ws_ptr, stride_wsp,  # DQ: per-program float32 workspace (programs, N rounded up to BLOCK_M, BLOCK_D)
    B, S, N, H, D, HEAD_DIM, qk_scale, sm_scale,
    N_BUCKET,  # autotuning key only
    HAS_MASK: tl.constexpr, LOG2E: tl.constexpr, MASKED_LOGIT: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, OPERAND_BYTES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DQ: tl.constexpr,
):
    """dk and dv (with DQ also dq) of one (b, s, h) row: dv = P^T do, dk = dL^T q / sqrt(d), each key
    block summing over the query blocks. Without DQ a work item is one key block; with DQ it is the whole
    row, key blocks outer, and each query block's dq = sum_j dL k / sqrt(d) is carried from one key block
    to the next in this program's float32 workspace (read and written by this program only, a barrier
    between key blocks), the last key block writing it to dx: no atomics. Programs loop over the work
    items (persistent with DQ)."""
    n_blk_j = tl.cdiv(N, BLOCK_N)
    items = B * S * H * (1 if DQ else n_blk_j)
    offs_e = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    e_ok = offs_e < HEAD_DIM
    ws = ws_ptr + tl.program_id(0).to(tl.int64) * stride_wsp
    for item in range(tl.program_id(0), items, tl.num_programs(0)):
        s = (item % S).to(tl.int64)  # MSA rows fastest: programs running together share the (b, h) bias tiles in L2
        rest = (item // S).to(tl.int64)
        if DQ:
            j_lo, j_hi = 0, N
        else:
            j_lo = (rest % n_blk_j).to(tl.int32) * BLOCK_N
            j_hi = tl.minimum(N, j_lo + BLOCK_N)
            rest = rest // n_blk_j
        h = rest % H
        b = rest // H
        # 64-bit scalar bases (with the head's channels), 32-bit offsets within a tile: fewer registers
        row_base = x_ptr + b * stride_xb + s * stride_xs + h * HEAD_DIM
        do_base = do_ptr + b * stride_db + s * stride_ds + h * HEAD_DIM
        dx_base = dx_ptr + b * stride_xb + s * stride_xs + h * HEAD_DIM
        z_base = z_ptr + b * stride_zb + h * stride_zh
        m_row = m_ptr + b * stride_mb + s * stride_ms
        stat_base = b * stride_lb + s * stride_ls + h * stride_lh
        tile_i = tl.arange(0, BLOCK_M)  # [BLOCK_M]
        q_tile = tile_i[:, None] * stride_xi + offs_e[None, :]  # [BLOCK_M, BLOCK_D]
        do_tile = tile_i[:, None] * stride_di + offs_e[None, :]  # [BLOCK_M, BLOCK_D]
        ws_tile = ws + tile_i[:, None] * BLOCK_D + offs_e[None, :]  # [BLOCK_M, BLOCK_D]
        for j0 in range(j_lo, j_hi, BLOCK_N):
            offs_j = j0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
            j_ok = offs_j < N
            kv_off = offs_j[:, None] * stride_xi + offs_e[None, :]  # [BLOCK_N, BLOCK_D]
            kv_mask = j_ok[:, None] & e_ok[None, :]
            k = tl.load(row_base + kv_off + D, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
            v = tl.load(row_base + kv_off + 2 * D, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
            masked = _key_mask(m_row, offs_j, j_ok, stride_mj, HAS_MASK)  # [BLOCK_N]
            z_tile = tile_i[:, None] * stride_zi + offs_j[None, :] * stride_zj  # [BLOCK_M, BLOCK_N]
            dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
            dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
            # DQ: the workspace is read an i-block ahead by hand (Triton's pipeliner does not prefetch a dot's
            # accumulator); no branches: the first key block reads zeros, the last writes dx, not the workspace
            j_row = tl.zeros((1, BLOCK_D), dtype=tl.int32) + j0  # [1, BLOCK_D]: this key block, as masks
            dq_next = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
            if DQ:
                dq_next = tl.load(ws_tile, mask=j_row > 0, other=0.0)  # [BLOCK_M, BLOCK_D]
            for i0 in range(0, N, BLOCK_M):
                dq = dq_next
                if DQ:
                    dq_next = tl.load(ws_tile + (i0 + BLOCK_M) * BLOCK_D,
                                      mask=(j_row > 0) & (j_row * 0 + i0 + BLOCK_M < N), other=0.0)
                i_ok = i0 + tile_i < N
                ie_ok = i_ok[:, None] & e_ok[None, :]
                q = tl.load(row_base + i0 * stride_xi + q_tile, mask=ie_ok, other=0.0)  # [BLOCK_M, BLOCK_D]
                do = tl.load(do_base + i0 * stride_di + do_tile, mask=ie_ok, other=0.0)  # [BLOCK_M, BLOCK_D]
                stat = stat_base + i0 + tile_i
                row_max = tl.load(st_ptr + stat, mask=i_ok, other=0.0)  # [BLOCK_M]
                row_inv = 1.0 / tl.load(st_ptr + stride_st + stat, mask=i_ok, other=1.0)  # [BLOCK_M]
                dl = tl.load(dl_ptr + stat, mask=i_ok, other=0.0)  # [BLOCK_M]
                # -inf past N (rows or keys): p = 0 there (the statistics of rows past N read as 0 and 1)
                z = tl.load(z_base + i0 * stride_zi + z_tile, mask=i_ok[:, None] & j_ok[None, :],
                            other=float("-inf"))  # [BLOCK_M, BLOCK_N]
                logit = _scores(q, k, z.to(tl.float32), masked, qk_scale, HAS_MASK, LOG2E, MASKED_LOGIT,
                                PRECISION)  # [BLOCK_M, BLOCK_N]
                p = tl.math.exp2(logit - row_max[:, None]) * row_inv[:, None]  # [BLOCK_M, BLOCK_N]
                dv = tl.dot(tl.trans(p).to(do.dtype), do, dv, input_precision=PRECISION)  # [BLOCK_N, BLOCK_D]
                dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # [BLOCK_M, BLOCK_N]
                ds = p * (dp - dl[:, None])  # [BLOCK_M, BLOCK_N]
                if HAS_MASK:
                    ds = tl.where(masked[None, :], 0.0, ds)
                dk = tl.dot(tl.trans(ds).to(q.dtype), q, dk, input_precision=PRECISION)  # [BLOCK_N, BLOCK_D]
                if DQ:
                    dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)  # [BLOCK_M, BLOCK_D]
                    tl.store(ws_tile + i0 * BLOCK_D, dq, mask=j_row + BLOCK_N < N)
                    tl.store(dx_base + i0 * stride_xi + q_tile, (dq * sm_scale).to(dx_ptr.dtype.element_ty),
                             mask=ie_ok & (j_row + BLOCK_N >= N))
            tl.store(dx_base + kv_off + D, (dk * sm_scale).to(dx_ptr.dtype.element_ty), mask=kv_mask)
            tl.store(dx_base + kv_off + 2 * D, dv.to(dx_ptr.dtype.element_ty), mask=kv_mask)
            if DQ:
                tl.debug_barrier()  # this key block's dq partial sums, stored by all threads, before the next's loads


@triton.jit
def _row_attention_bwd_dz_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi,  # qkvg: (B, S, N, 4D)
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,  # pair bias: (B, h, N, N)
    m_ptr, stride_mb, stride_ms, stride_mj,  # key mask: (B, S, N), any real dtype (HAS_MASK)
    do_ptr, stride_db, stride_ds, stride_di,  # gradient of the un-gated attention output: (B, S, N, D)
    st_ptr, stride_st, dl_ptr, stride_lb, stride_ls, stride_lh,  # as in the dq kernel
    dz_ptr, stride_dzc,  # partial pair-bias gradients: (chunks, B, h, N, N) float32, z's strides within a chunk
    S, N, H, D, HEAD_DIM, qk_scale,
    S_PER_CHUNK,  # MSA rows per program: a chunk's rows are summed here, the chunks by the caller
    N_BUCKET,  # autotuning key only
    HAS_MASK: tl.constexpr, LOG2E: tl.constexpr, MASKED_LOGIT: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, OPERAND_BYTES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """The pair-bias gradient of one (b, h, block i, block j) tile over one chunk of MSA rows,
    dz = sum_s dL_s, summed in order inside the program (chunks, then summed in a fixed order by the
    caller, give more programs than tiles alone): deterministic, no atomics."""
    pid = tl.program_id(0).to(tl.int64)
    n_chunks = tl.cdiv(S, S_PER_CHUNK)
    chunk = pid % n_chunks  # chunks of one tile run side by side and share its bias tile in L2
    pid = pid // n_chunks
    n_blk_j = tl.cdiv(N, BLOCK_N)
    n_blk_i = tl.cdiv(N, BLOCK_M)
    blk_j = pid % n_blk_j
    rest = pid // n_blk_j
    blk_i = rest % n_blk_i
    rest = rest // n_blk_i
    h = rest % H
    b = rest // H

    # 64-bit scalar bases, 32-bit offsets within a tile (a tile spans BLOCK rows of a (b, s) slice): fewer
    # registers than 64-bit offsets per element
    i0 = blk_i * BLOCK_M
    j0 = blk_j * BLOCK_N
    tile_i = tl.arange(0, BLOCK_M)  # [BLOCK_M]
    tile_j = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    offs_j = j0 + tile_j
    offs_e = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    i_ok = i0 + tile_i < N
    j_ok = offs_j < N
    e_ok = offs_e < HEAD_DIM
    ie_ok = i_ok[:, None] & e_ok[None, :]
    kv_mask = j_ok[:, None] & e_ok[None, :]
    q_off = tile_i[:, None] * stride_xi + offs_e[None, :]  # [BLOCK_M, BLOCK_D]
    kv_off = tile_j[:, None] * stride_xi + offs_e[None, :]  # [BLOCK_N, BLOCK_D]
    do_off = tile_i[:, None] * stride_di + offs_e[None, :]  # [BLOCK_M, BLOCK_D]
    ij_ok = i_ok[:, None] & j_ok[None, :]
    z_off = tile_i[:, None] * stride_zi + tile_j[None, :] * stride_zj  # [BLOCK_M, BLOCK_N]
    z_tile = b * stride_zb + h * stride_zh + i0 * stride_zi + j0 * stride_zj

    # the bias tile, shared by every row s; elements past N are computed but never stored, and columns do
    # not mix here, so 0 there, not -inf
    z = tl.load(z_ptr + z_tile + z_off, mask=ij_ok, other=0.0).to(tl.float32)  # [BLOCK_M, BLOCK_N]
    dz = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    s_lo = chunk * S_PER_CHUNK
    s_hi = tl.minimum(S, s_lo + S_PER_CHUNK)
    # each row's statistics and key mask are loaded an iteration ahead by hand (Triton's pipeliner prefetches
    # only loads that feed a dot), as loaded: what is computed from them waits until they are used
    stat = b * stride_lb + h * stride_lh + i0 + tile_i  # [BLOCK_M], without the row's s * stride_ls
    m_row = m_ptr + b * stride_mb + offs_j * stride_mj  # [BLOCK_N], without the row's s * stride_ms
    row_max = tl.load(st_ptr + stat + s_lo * stride_ls, mask=i_ok, other=0.0)  # [BLOCK_M]
    row_sum = tl.load(st_ptr + stride_st + stat + s_lo * stride_ls, mask=i_ok, other=1.0)  # [BLOCK_M]
    dl = tl.load(dl_ptr + stat + s_lo * stride_ls, mask=i_ok, other=0.0)  # [BLOCK_M]
    key = tl.load(m_row + s_lo * stride_ms, mask=j_ok & HAS_MASK, other=1)  # [BLOCK_N]
    for s in range(s_lo, s_hi):
        s_next = tl.minimum(s + 1, s_hi - 1)
        next_max = tl.load(st_ptr + stat + s_next * stride_ls, mask=i_ok, other=0.0)
        next_sum = tl.load(st_ptr + stride_st + stat + s_next * stride_ls, mask=i_ok, other=1.0)
        next_dl = tl.load(dl_ptr + stat + s_next * stride_ls, mask=i_ok, other=0.0)
        next_key = tl.load(m_row + s_next * stride_ms, mask=j_ok & HAS_MASK, other=1)
        row_base = x_ptr + b * stride_xb + s * stride_xs + h * HEAD_DIM
        q = tl.load(row_base + i0 * stride_xi + q_off, mask=ie_ok, other=0.0)  # [BLOCK_M, BLOCK_D]
        k = tl.load(row_base + j0 * stride_xi + D + kv_off, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        v = tl.load(row_base + j0 * stride_xi + 2 * D + kv_off, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        do = tl.load(do_ptr + b * stride_db + s * stride_ds + i0 * stride_di + h * HEAD_DIM + do_off, mask=ie_ok,
                     other=0.0)  # [BLOCK_M, BLOCK_D]
        logit = _scores(q, k, z, key == 0, qk_scale, HAS_MASK, LOG2E, MASKED_LOGIT, PRECISION)  # [BLOCK_M, BLOCK_N]
        # p = exp2(logit - lse) with lse = max + log2(sum): one subtraction an element, no product
        row_lse = row_max + tl.math.log2(row_sum)  # [BLOCK_M]
        if HAS_MASK:  # a masked key's p is 0 unless every key of the row is masked (its max is then the masked
            # logit), and such a row's logits carry no gradient: p = 0 for it, no select an element
            row_lse = tl.where(row_max == MASKED_LOGIT, float("inf"), row_lse)
        p = tl.math.exp2(logit - row_lse[:, None])  # [BLOCK_M, BLOCK_N]
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # [BLOCK_M, BLOCK_N]
        dz += p * (dp - dl[:, None])
        row_max, row_sum, dl, key = next_max, next_sum, next_dl, next_key
    tl.store(dz_ptr + chunk * stride_dzc + z_tile + z_off, dz, mask=ij_ok)


@triton.jit
def _gate_backward_kernel(
    x_ptr, stride_xr,  # qkvg as (ROWS, 4D): the gate is channel 3D + h*d + e
    o_ptr,  # un-gated attention output (ROWS, D) contiguous
    do_ptr,  # out: the gradient of o (ROWS, D) contiguous, in o's dtype; may be o itself
    dgt_ptr,  # gradient of the gated output (ROWS, D) contiguous
    gated_ptr,  # out: the gated output (ROWS, D) contiguous (out_proj's weight gradient needs it)
    dx_ptr,  # gradient of qkvg, x's strides: the gate's gradient goes to channels [3D, 4D)
    delta_ptr, stride_db, stride_ds, stride_dh,  # out: rowsum(do * o) per head, (B, S, h, N) float32
    ROWS, S, N, H, D, HEAD_DIM,
    BLOCK_ROWS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_E: tl.constexpr,
):
    """The sigmoid gate's backward and the softmax backward's row sums in one pass, in float32."""
    rows, b, s, i = row_coords(tl.program_id(0).to(tl.int64) * BLOCK_ROWS, BLOCK_ROWS, S, N)  # [BLOCK_ROWS]
    hh = tl.arange(0, BLOCK_H)
    e = tl.arange(0, BLOCK_E)
    chan = hh[None, :, None] * HEAD_DIM + e[None, None, :]  # [1, BLOCK_H, BLOCK_E]
    ok = (rows < ROWS)[:, None, None] & (hh < H)[None, :, None] & (e < HEAD_DIM)[None, None, :]
    x_rows = rows[:, None, None] * stride_xr
    d_rows = rows[:, None, None] * D + chan  # [BLOCK_ROWS, BLOCK_H, BLOCK_E]
    g = tl.sigmoid(tl.load(x_ptr + x_rows + 3 * D + chan, mask=ok, other=0.0).to(tl.float32))
    o = tl.load(o_ptr + d_rows, mask=ok, other=0.0).to(tl.float32)
    dgt = tl.load(dgt_ptr + d_rows, mask=ok, other=0.0).to(tl.float32)
    do = dgt * g
    tl.store(dx_ptr + x_rows + 3 * D + chan, (dgt * o * g * (1.0 - g)).to(dx_ptr.dtype.element_ty), mask=ok)
    tl.store(gated_ptr + d_rows, (o * g).to(gated_ptr.dtype.element_ty), mask=ok)
    do = do.to(do_ptr.dtype.element_ty)
    tl.store(do_ptr + d_rows, do, mask=ok)
    # the row sums from do as the kernels will read it (rounded to the input dtype): dP - delta then
    # cancels consistently
    delta = tl.sum(do.to(tl.float32) * o, axis=2)  # [BLOCK_ROWS, BLOCK_H]
    tl.store(delta_ptr + (b * stride_db + s * stride_ds + i)[:, None] + hh[None, :] * stride_dh, delta,
             mask=(rows < ROWS)[:, None] & (hh < H)[None, :])


@triton.jit
def _head_projection(xn, w_ptr, b_ptr, hh, D, HEAD_DIM, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr,
                     PRECISION: tl.constexpr):
    """xn [BLOCK_N, BLOCK_D] times the rows hh*d.. (hh+1)*d of a (D, D) contiguous weight, plus bias:
    [BLOCK_N, BLOCK_E] float32."""
    offs_e = tl.arange(0, BLOCK_E)
    offs_d = tl.arange(0, BLOCK_D)
    e_ok = offs_e < HEAD_DIM
    rows = hh * HEAD_DIM + offs_e
    w_t = tl.load(w_ptr + rows[None, :] * D + offs_d[:, None], mask=e_ok[None, :] & (offs_d < D)[:, None],
                  other=0.0).to(xn.dtype)  # [BLOCK_D, BLOCK_E]
    bias = tl.load(b_ptr + rows, mask=e_ok, other=0.0).to(tl.float32)
    return tl.dot(xn, w_t, input_precision=PRECISION) + bias[None, :]


@triton.jit
def _row_attention_small_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi, stride_xd,  # msa_repr: (B, S, N, D), any strides
    pair_ptr, stride_pb, stride_pi, stride_pj, stride_pp,  # pair_repr: (B, N, N, P), any strides
    m_ptr, stride_mb, stride_ms, stride_mj,  # key mask: (B, S, N), any real dtype (HAS_MASK only)
    lnw_ptr, lnb_ptr, wq_ptr, bq_ptr, wk_ptr, bk_ptr, wv_ptr, bv_ptr, wg_ptr, bg_ptr, wo_ptr, bo_ptr,  # contiguous
    wz_ptr, bz_ptr,  # pair_bias: (h, P), (h,) contiguous
    o_ptr,  # out: (B, S, N, D) contiguous
    S, N, D, P, HEAD_DIM, eps, sm_scale,
    H: tl.constexpr, HAS_MASK: tl.constexpr, MASKED_LOGIT: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_H: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """The whole row attention of one MSA row (b, s) in one program, for small problems: LayerNorm,
    the pair bias of every head (recomputed from pair_repr), each head's projections, softmax with
    the key mask replacing logits, the gate, and out_proj summed over heads."""
    pid = tl.program_id(0).to(tl.int64)
    b = pid // S
    s = pid % S
    offs_i = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    i_ok = offs_i < N
    d_ok = offs_d < D
    x = tl.load(x_ptr + b * stride_xb + s * stride_xs + offs_i[:, None] * stride_xi + offs_d[None, :] * stride_xd,
                mask=i_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)  # [BLOCK_N, BLOCK_D]
    xn = normalize_rows(x, offs_d, D, lnw_ptr, lnb_ptr, eps).to(x_ptr.dtype.element_ty)

    # the pair bias of every head at once, [(i j), P] x [P, h], over chunks of P
    ij = tl.arange(0, BLOCK_N * BLOCK_N)
    pi = ij // BLOCK_N
    pj = ij % BLOCK_N
    ij_ok = (pi < N) & (pj < N)
    offs_h = tl.arange(0, BLOCK_H)
    z_all = tl.zeros((BLOCK_N * BLOCK_N, BLOCK_H), dtype=tl.float32)
    for p0 in range(0, P, BLOCK_P):
        offs_p = p0 + tl.arange(0, BLOCK_P)
        pair = tl.load(pair_ptr + b * stride_pb + (pi * stride_pi + pj * stride_pj)[:, None] + offs_p[None, :] * stride_pp,
                       mask=ij_ok[:, None] & (offs_p < P)[None, :],
                       other=0.0).to(xn.dtype)  # [(i j), BLOCK_P], in msa_repr's dtype as the reference casts it
        wz_t = tl.load(wz_ptr + offs_h[None, :] * P + offs_p[:, None],
                       mask=(offs_h < H)[None, :] & (offs_p < P)[:, None], other=0.0).to(xn.dtype)  # [BLOCK_P, BLOCK_H]
        z_all = tl.dot(pair, wz_t, z_all, input_precision=PRECISION)  # [(i j), BLOCK_H]
    z_all += tl.load(bz_ptr + offs_h, mask=offs_h < H, other=0.0).to(tl.float32)[None, :]

    j_ok = offs_i < N
    key_on = j_ok
    if HAS_MASK:
        key_on = j_ok & (tl.load(m_ptr + b * stride_mb + s * stride_ms + offs_i * stride_mj, mask=j_ok, other=0) != 0)
    out = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    offs_e = tl.arange(0, BLOCK_E)
    for hh in tl.static_range(H):
        q = _head_projection(xn, wq_ptr, bq_ptr, hh, D, HEAD_DIM, BLOCK_D, BLOCK_E, PRECISION).to(xn.dtype)
        k = _head_projection(xn, wk_ptr, bk_ptr, hh, D, HEAD_DIM, BLOCK_D, BLOCK_E, PRECISION).to(xn.dtype)
        v = _head_projection(xn, wv_ptr, bv_ptr, hh, D, HEAD_DIM, BLOCK_D, BLOCK_E, PRECISION).to(xn.dtype)
        g = _head_projection(xn, wg_ptr, bg_ptr, hh, D, HEAD_DIM, BLOCK_D, BLOCK_E, PRECISION)
        z = tl.reshape(tl.sum(tl.where((offs_h == hh)[None, :], z_all, 0.0), axis=1), (BLOCK_N, BLOCK_N))
        logit = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale + z  # [BLOCK_N, BLOCK_N]
        logit = tl.where(key_on[None, :], logit, MASKED_LOGIT)  # replaced, not added
        logit = tl.where(j_ok[None, :], logit, float("-inf"))
        p = tl.exp(logit - tl.max(logit, axis=1)[:, None])
        p = p / tl.sum(p, axis=1)[:, None]
        o = tl.dot(p.to(xn.dtype), v, input_precision=PRECISION) * tl.sigmoid(g)  # [BLOCK_N, BLOCK_E]
        cols = hh * HEAD_DIM + offs_e
        wo_t = tl.load(wo_ptr + offs_d[None, :] * D + cols[:, None],
                       mask=(offs_e < HEAD_DIM)[:, None] & d_ok[None, :], other=0.0).to(xn.dtype)  # [BLOCK_E, BLOCK_D]
        out = tl.dot(o.to(xn.dtype), wo_t, out, input_precision=PRECISION)
    out += tl.load(bo_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(o_ptr + ((b * S + s) * N + offs_i)[:, None] * D + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=i_ok[:, None] & d_ok[None, :])


def _configs() -> list[triton.Config]:
    """Candidate tiles; the first that survives pruning is the default (EVOFUSE_AUTOTUNE=0)."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st)
            for bm, bn, w, st in ((64, 64, 4, 2), (64, 32, 4, 2), (32, 32, 4, 2), (64, 64, 4, 3),
                                  (64, 128, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 2),
                                  (64, 128, 8, 2), (128, 32, 4, 3), (32, 64, 4, 3), (128, 32, 8, 3),
                                  (128, 64, 8, 2), (64, 32, 8, 3))]


def _prune(configs, named_args, **kwargs):
    """Drops tiles far larger than the sequence and register-heavy tiles for wide heads."""
    n = kwargs["N_BUCKET"]
    block_d = kwargs["BLOCK_D"]
    kept = [c for c in configs
            if c.kwargs["BLOCK_M"] <= max(n, 32) and c.kwargs["BLOCK_N"] <= max(n, 32)
            and not (block_d >= 128 and c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] > 64 * 128)]
    return kept or configs[:1]


@functools.lru_cache(maxsize=None)
def _tuned_kernel():
    """Autotuned on the head width, the precision and a power-of-two bucket of N (GPU only). The kernel
    writes over its queries, so the tuner restores qkvg after each trial run."""
    return triton.autotune(configs=_configs(), key=["N_BUCKET", "HEAD_DIM", "BLOCK_D", "PRECISION", "HAS_MASK", "GATE",
                                                    "STORE_STATS"],
                           prune_configs_by={"early_config_prune": _prune}, restore_value=["x_ptr"])(_row_attention_kernel)


# In Triton's interpreter (CI): small tiles, so that the awkward test shapes cross tile edges.
_INTERPRET_META = {"BLOCK_M": 16, "BLOCK_N": 16}


def project(msa_repr, layer_norm_weight, layer_norm_bias, weights, biases, split=False):
    """LayerNorm, then the q, k, v, gate projections as one product: (B, S, N, 4D).

    `split` (the forward, not the backward's differentiable recompute): float32 takes `split_linear`
    (float16 hi/lo halves on tensor cores, the LayerNorm applied on the way), 16-bit inputs evofuse's
    LayerNorm kernel and one cuBLAS product. Otherwise PyTorch's LayerNorm and one cuBLAS product, IEEE
    for float32 whatever the global TF32 setting. (A fused LayerNorm-linear Triton kernel ran the bf16
    case in 0.61 ms against LayerNorm + cuBLAS's 0.44 ms on att-af2-main on the H200.)"""
    B, S, N, D = msa_repr.shape
    dtype = msa_repr.dtype
    w, bias = torch.cat(weights).to(dtype), torch.cat(biases).to(dtype)
    if split and split_linear.available(msa_repr):
        y = split_linear.split_linear(msa_repr.reshape(-1, D), w, bias,
                                      ln=(layer_norm_weight, layer_norm_bias, LAYER_NORM_EPS))
        return y.view(B, S, N, 4 * D)
    if not split or not layer_norm_fits(D):  # the backward's recompute: differentiable
        x = F.layer_norm(msa_repr, (D,), layer_norm_weight.to(dtype), layer_norm_bias.to(dtype), LAYER_NORM_EPS)
    else:
        x = layer_norm(msa_repr, layer_norm_weight.to(dtype), layer_norm_bias.to(dtype), LAYER_NORM_EPS)
    with ieee_fp32_matmul():
        return F.linear(x, w, bias)


def out_projection(qkvg, weight, bias, split=False):
    """out_proj on the gated attention output, which sits in the first D channels of qkvg: one product
    on the strided (rows, D) view, row stride 4D (F.linear on the 4-D view copied it first: 0.14 ms on
    att-af2-main bf16); float32 with `split` takes `split_linear`."""
    B, S, N, D4 = qkvg.shape
    D = D4 // 4
    x = qkvg.view(B * S * N, D4)[:, :D]
    if split and split_linear.available(qkvg):
        return split_linear.split_linear(x, weight, bias).view(B, S, N, D)
    with ieee_fp32_matmul():
        return torch.addmm(bias.to(qkvg.dtype), x, weight.to(qkvg.dtype).t()).view(B, S, N, D)


def _common_args(qkvg, z, msa_mask):
    """qkvg, the pair bias and the key mask with their strides; the kernels read the mask as it is
    (any dtype, nonzero = attend) and not at all without one (HAS_MASK)."""
    m, m_strides = (qkvg, (0, 0, 0)) if msa_mask is None else (msa_mask, msa_mask.stride())
    return (qkvg, *qkvg.stride()[:3], z, *z.stride(), m, *m_strides)


def pair_bias(pair_repr, weight, bias, dtype):
    """The pair bias (B, h, N, N), contiguous, computed once per batch element."""
    return F.linear(pair_repr.to(dtype), weight.to(dtype), bias.to(dtype)).permute(0, 3, 1, 2).contiguous()


def _core_consts(d, dtype, has_mask, precision):
    return {"HAS_MASK": has_mask, "LOG2E": _LOG2E, "MASKED_LOGIT": MASK_LOGIT * _LOG2E,
            "BLOCK_D": max(16, next_pow2(d)), "PRECISION": dot_precision(dtype, precision)}


def _attention_core(qkvg, z, msa_mask, num_heads, precision, out=None, stats=None, gate=True):
    """The forward kernel. `gate`: the gated output, written over the queries in qkvg. With `out`
    (B, S, N, D) and `stats` (2, B, S, h, N) float32: also the un-gated output and each row's softmax
    max (log2 units) and sum of exponentials (for the backward)."""
    B, S, N, D4 = qkvg.shape
    D = D4 // 4
    d = D // num_heads
    o, o_strides = (qkvg, (0, 0, 0)) if out is None else (out, out.stride()[:3])
    st_arg, st_strides = (qkvg, (0, 0, 0, 0)) if stats is None else (stats, stats.stride()[:4])
    args = (*_common_args(qkvg, z, msa_mask), o, *o_strides, st_arg, *st_strides, S, N, num_heads, D, d,
            _LOG2E / math.sqrt(d))
    consts = _core_consts(d, qkvg.dtype, msa_mask is not None, precision) | {"GATE": gate, "STORE_STATS": stats is not None,
                                                                 "N_BUCKET": bucket(N)}
    launch(_row_attention_kernel, _tuned_kernel, _configs, _prune,
           lambda meta: (B * num_heads * cdiv(N, meta["BLOCK_M"]) * S,), args, consts, _INTERPRET_META)


# The single-launch path takes problems whose row (N x D) and pair tile (N x N, in chunks of 16
# channels) stay small on chip; shared memory measured by benchmarks/compile_sm90.py.
SMALL_MAX_N = 32
SMALL_MAX_D = 128


def single_launch(msa_repr, num_heads, params) -> bool:
    """Whether the forward on msa_repr (B, S, N, D) with these 14 parameters takes the single launch."""
    B, S, N, D = msa_repr.shape
    return msa_repr.numel() > 0 and _small_meta(N, D, num_heads, msa_repr.dtype, params) is not None


def _small_meta(N, D, h, dtype, params):
    """Constexprs of the single-launch path, or None (too large, or non-contiguous weights)."""
    if N > SMALL_MAX_N or not all(map(torch.Tensor.is_contiguous, params)):
        return None
    return _small_blocks(N, D, h, dtype)


@functools.lru_cache(maxsize=256)
def _small_blocks(N, D, h, dtype):
    block_d = max(16, next_pow2(D))
    if block_d > SMALL_MAX_D // (2 if dtype == torch.float32 else 1):  # float32 (IEEE products) spills beyond
        return None
    return {"H": h, "BLOCK_N": max(16, next_pow2(N)), "BLOCK_D": block_d, "BLOCK_E": max(16, next_pow2(D // h)),
            "BLOCK_P": 16, "BLOCK_H": max(16, next_pow2(h)), "PRECISION": "ieee" if dtype == torch.float32 else "tf32"}


def msa_row_attention_triton(msa_repr, pair_repr, msa_mask, layer_norm_weight, layer_norm_bias,
                             query_weight, query_bias, key_weight, key_bias, value_weight, value_bias,
                             gate_weight, gate_bias, out_proj_weight, out_proj_bias, pair_bias_weight,
                             pair_bias_bias, num_heads, precision="default", save=False):
    """Fused forward; arguments as `evofuse.functional.msa_row_attention` (already validated).

    With `save` (training) returns (out, o, stats): also the un-gated attention output (B, S, N, D) and
    the softmax statistics (2, B, S, h, N) float32 that the backward takes instead of running the
    attention core again; on the single-launch path (small problems: one launch against the tiled
    path's ~10 launches and PyTorch calls of host time) both are empty and the backward runs the core."""
    B, S, N, D = msa_repr.shape
    dtype = msa_repr.dtype
    if msa_repr.numel() == 0:
        return torch.empty(B, S, N, D, dtype=dtype, device=msa_repr.device)
    params = (layer_norm_weight, layer_norm_bias, query_weight, query_bias, key_weight, key_bias, value_weight,
              value_bias, gate_weight, gate_bias, out_proj_weight, out_proj_bias, pair_bias_weight, pair_bias_bias)
    small = _small_meta(N, D, num_heads, dtype, params)
    if small is not None:  # one launch from msa_repr to the output; float32 takes IEEE products
        out = empty(B, S, N, D, dtype=dtype, device=msa_repr.device)
        m, m_strides = (msa_repr, (0, 0, 0)) if msa_mask is None else (msa_mask, msa_mask.stride())
        cached_launch(_row_attention_small_kernel)(
            (B * S,), msa_repr, *msa_repr.stride(), pair_repr, *pair_repr.stride(), m, *m_strides, *params, out,
            S, N, D, pair_repr.shape[-1], D // num_heads, LAYER_NORM_EPS, 1 / math.sqrt(D // num_heads),
            HAS_MASK=msa_mask is not None, MASKED_LOGIT=MASK_LOGIT, num_warps=8, num_stages=1, **small)
        if save:
            return out, out.new_empty((0,)), torch.empty(0, dtype=torch.float32, device=out.device)
        single_launch_output(out)
        return out
    # training: the projection the backward recomputes (`ln_project` for 16-bit, else PyTorch's under
    # autograd, except float32's split products), so that q, k, v there are bit for bit those that
    # made o and the statistics (otherwise the softmax's row sums, and the pair-bias bias gradient,
    # exactly 0, pick up 16-bit rounding)
    weights = (query_weight, key_weight, value_weight, gate_weight)
    biases = (query_bias, key_bias, value_bias, gate_bias)
    if save and ln_project_ready(dtype, D):
        qkvg = ln_project(msa_repr, layer_norm_weight, layer_norm_bias, weights, biases, LAYER_NORM_EPS)[0]
    else:
        qkvg = project(msa_repr, layer_norm_weight, layer_norm_bias, weights, biases,
                       split=not save or dtype == torch.float32)
    z = pair_bias(pair_repr, pair_bias_weight, pair_bias_bias, dtype)
    if not save:
        _attention_core(qkvg, z, msa_mask, num_heads, precision)
        return out_projection(qkvg, out_proj_weight, out_proj_bias, split=True)
    o = torch.empty(B, S, N, D, dtype=dtype, device=msa_repr.device)
    stats = torch.empty(2, B, S, num_heads, N, dtype=torch.float32, device=msa_repr.device)
    _attention_core(qkvg, z, msa_mask, num_heads, precision, out=o, stats=stats)
    return out_projection(qkvg, out_proj_weight, out_proj_bias, split=True), o, stats


@functools.lru_cache(maxsize=None)
def _bwd_configs() -> list[triton.Config]:
    """Candidate tiles of the three backward kernels; the first that survives pruning is the default. (Built
    once: the workspace's size reads them on every backward call. Tests replace this function, so nothing
    derived from it is cached.)"""
    # 64 x 64 on 4 warps first: measured on the H200 (session 10, att-af2-main training, ms) bf16 dz / fused
    # keys kernel at 2, 3, 4 stages 0.675 / 1.718, 0.573 / 1.562, 0.544 / 1.709, on 8 warps 0.912 / 3.371;
    # float32 dq / dz / keys on 4 warps 2.870 / 1.650 / 5.102, on 8 warps 6.089 / 3.527 / 10.913
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st)
            for bm, bn, w, st in ((64, 64, 4, 2), (64, 64, 4, 3), (64, 64, 4, 4), (64, 64, 8, 2), (128, 64, 8, 2),
                                  (64, 128, 8, 2), (128, 128, 8, 2), (64, 32, 4, 2), (32, 64, 4, 2), (64, 64, 8, 3),
                                  (128, 64, 4, 2), (32, 32, 4, 2))]


def _bwd_prune(configs, named_args, **kwargs):
    """Keeps tiles whose shared memory fits: (BLOCK_M + BLOCK_N) * BLOCK_D * e * 2 + BLOCK_M * BLOCK_N * e
    bytes with e the operand bytes (8 for float32 at 3xTF32, whose splits double it), which matched
    sm_90 compilations of these kernels within ~10% (benchmarks/compile_sm90.py), under 200 KiB."""
    block_d, e = kwargs["BLOCK_D"], kwargs["OPERAND_BYTES"]
    kept = [c for c in configs if (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) * block_d * e * 2
            + c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] * e <= 200 * 1024]
    return kept or configs[-1:]


@functools.lru_cache(maxsize=None)
def _tuned_bwd(kernel_name: str):
    """One backward kernel autotuned on the head width, precision, mask and a power-of-two bucket of N.
    Each writes only its own outputs, so the tuner's repeated runs are harmless."""
    return triton.autotune(configs=_bwd_configs(), key=["N_BUCKET", "HEAD_DIM", "BLOCK_D", "PRECISION", "HAS_MASK"],
                           prune_configs_by={"early_config_prune": _bwd_prune})(globals()[kernel_name])


# The pair-bias kernel has a program per (b, h, i-tile, j-tile) and MSA-row chunk: at least this many
# rows a chunk, at most this many chunks (partial sums in float32, then summed in order).
DZ_ROWS_PER_PROGRAM = 64
DZ_MAX_CHUNKS = 8


# 16-bit: dq, dk and dv in one persistent kernel. Measured on the H200 (session 9, att-af2-main training):
# bf16 the dq and keys kernels 0.841 + 1.315 -> 1.919 ms fused; float32 (3xTF32) 2.762 + 4.744 -> 9.09 ms
# (its larger tiles spill ~1.4 KB a thread fused), so float32 keeps the two kernels
FUSED_DQ = True
KEYS_PROGRAMS_PER_SM = 2  # measured: 1.919 ms at 2, 2.012 at 1 (bf16, att-af2-main)
INTERPRET_KEYS_PROGRAMS = 3


def _keys_programs(device: torch.device) -> int:
    """Persistent programs of the fused backward kernel: KEYS_PROGRAMS_PER_SM per multiprocessor."""
    if interpreting():
        return INTERPRET_KEYS_PROGRAMS
    return KEYS_PROGRAMS_PER_SM * multiprocessors(device)


def _keys_workspace_size(N: int, block_d: int) -> int:
    """float32 elements of a program's dq workspace: N rounded up to the largest BLOCK_M of the candidate
    configs and the interpreter's, times BLOCK_D. (Not cached: a size kept from other candidates, which the
    tests swap in, would be too small; the OPM's workspace was, session 17.)"""
    block_m = max([cfg.kwargs["BLOCK_M"] for cfg in _bwd_configs()] + [_INTERPRET_META["BLOCK_M"]])
    return cdiv(N, block_m) * block_m * block_d


def attention_core_backward(qkvg, z, msa_mask, d_gated, num_heads, precision="default", need_dz=True, o=None,
                            stats=None):
    """The kernels' part of the backward, from the gradient of the gated attention output d_gated
    (B, S, N, D): returns the gradient of qkvg (B, S, N, 4D) in its dtype, of the pair bias z
    (B, h, N, N) in float32 (an empty tensor without need_dz), and the gated output (B, S, N, D),
    which out_proj's weight gradient needs.

    The un-gated output o (B, S, N, D) and the softmax statistics `stats` (2, B, S, h, N) come from the
    forward (`msa_row_attention_triton(save=True)`); without them (None, or empty after the forward's
    single launch) the attention core runs once more to get them. Then the gate's backward and the
    softmax's row sums in one pass, then for 16-bit tensors dq, dk and dv in one persistent kernel
    (`_row_attention_bwd_keys_kernel` with DQ: a (b, s, h) row a work item, dq carried between key blocks
    in a per-program float32 workspace of N x d), for float32 dq (a program per query block, summing over
    keys) and dk, dv (a program per key block, summing over queries) apart; and the pair-bias gradient (a
    program per (i, j) tile and chunk of MSA rows, summing over them in order). Nothing of size S*h*N*N
    exists and no atomics are used: the gradients are bit-reproducible.
    """
    qkvg = qkvg.contiguous()  # the gate kernel reads it as (rows, 4D)
    B, S, N, D4 = qkvg.shape
    D = D4 // 4
    h = num_heads
    d = D // h
    dtype = qkvg.dtype
    if o is None or o.numel() == 0:  # not kept by the forward
        o = torch.empty(B, S, N, D, dtype=dtype, device=qkvg.device)
        stats = torch.empty(2, B, S, h, N, dtype=torch.float32, device=qkvg.device)
        _attention_core(qkvg, z, msa_mask, h, precision, out=o, stats=stats, gate=False)
        do = o  # recomputed here: do may overwrite it
    else:  # the forward's: kept intact (a second backward may read it)
        o = o.contiguous()
        do = torch.empty_like(o)

    rows = B * S * N
    dx = empty(*qkvg.shape, dtype=dtype, device=qkvg.device)  # every element is written (poisoned in tests)
    gated = torch.empty(B, S, N, D, dtype=dtype, device=qkvg.device)
    delta = torch.empty(B, S, h, N, dtype=torch.float32, device=qkvg.device)
    block_h, block_e = next_pow2(h), next_pow2(d)
    block_rows = max(1, 4096 // (block_h * block_e))
    d_gated = d_gated.contiguous()
    cached_launch(_gate_backward_kernel)(
        (cdiv(rows, block_rows),), qkvg, qkvg.stride(2), o, do, d_gated, gated, dx, delta, *delta.stride()[:3], rows,
        S, N, h, D, d,
        BLOCK_ROWS=block_rows, BLOCK_H=block_h, BLOCK_E=block_e, num_warps=8)  # 4 warps spill (sm_90, cuobjdump)

    consts = _core_consts(d, dtype, msa_mask is not None, precision)
    consts["N_BUCKET"] = bucket(N)
    consts["OPERAND_BYTES"] = 2 if dtype != torch.float32 else (8 if consts["PRECISION"] == "tf32x3" else 4)
    tail = (S, N, h, D, d, _LOG2E / math.sqrt(d))
    # the statistics and delta are indexed with the same (b, s, h) strides
    common = (*_common_args(qkvg, z, msa_mask), do, *do.stride()[:3], stats, stats.stride(0), delta,
              *delta.stride()[:3])

    def run(kernel, grid, *args, extra=None):
        launch(kernel, lambda: _tuned_bwd(kernel.__name__), _bwd_configs, _bwd_prune, grid, args,
               consts | (extra or {}), _INTERPRET_META)

    def blocks(meta, name):
        return cdiv(N, meta[name])

    if FUSED_DQ and dtype != torch.float32:
        programs = min(_keys_programs(qkvg.device), B * S * h)  # a workspace per program that runs
        ws = torch.empty(programs, _keys_workspace_size(N, consts["BLOCK_D"]), dtype=torch.float32,
                         device=qkvg.device)
        run(_row_attention_bwd_keys_kernel, lambda m: (programs,), *common, dx, ws, ws.stride(0), B,
            *tail, 1 / math.sqrt(d), extra={"DQ": True})
    else:
        run(_row_attention_bwd_dq_kernel, lambda m: (B * h * blocks(m, "BLOCK_M") * S,), *common, dx, *tail,
            1 / math.sqrt(d))
        run(_row_attention_bwd_keys_kernel, lambda m: (B * h * blocks(m, "BLOCK_N") * S,), *common, dx, dx, 0, B,
            *tail, 1 / math.sqrt(d), extra={"DQ": False})
    if not need_dz:
        return dx, torch.empty(0, dtype=torch.float32, device=qkvg.device), gated
    per_chunk = max(DZ_ROWS_PER_PROGRAM, cdiv(S, DZ_MAX_CHUNKS))
    chunks = cdiv(S, per_chunk)
    dz = torch.empty(chunks, B, h, N, N, dtype=torch.float32, device=qkvg.device)
    run(_row_attention_bwd_dz_kernel, lambda m: (B * h * blocks(m, "BLOCK_M") * blocks(m, "BLOCK_N") * chunks,),
        *common, dz, dz.stride(0), *tail, per_chunk)
    return dx, (dz[0] if chunks == 1 else dz.sum(0)), gated

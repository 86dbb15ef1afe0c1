"""Fused Outer Product Mean forward (SPEC 1) in Triton.

Two stages:
1. LayerNorm, the two projections and the mask in one pass (`layer_norm_linear`; float32 through
   `split_linear`'s float16 hi/lo products): a, b (B, S, N, c).
2. `_opm_kernel`: per batch element and tile of residues (i, j), the outer products contracted over
   the MSA rows, X[(i p), (j q)] = sum_s a[s, i, p] b[s, j, q], accumulate in fp32 on chip; the tile is
   rearranged to X[(i j), (p q)], scaled by the normalization and contracted with out_proj's weight
   in the epilogue, and only the (B, N, N, pair_dim) output is written. No N*N*c*c tensor exists.
   The normalization's per-pair scale comes from one small kernel before (`pair_scale`): counting the
   mask inside the MSA-row loop, a load Triton's pipeliner does not prefetch, cost the multi-pass kernel
   below 0.07 ms of its 0.58 on opm-af2-main.
   Its operands are 16-bit: bfloat16/float16 inputs as they are; float32 inputs scaled by a power of
   two into float16's range, at the "fast" precision as one float16 each (11-bit mantissas), at the
   default precision as float16 hi + lo pairs with three products per pair of operands (hi*hi +
   hi*lo + lo*hi, ~2**-22 relative: the float32 contract on float16 tensor cores, which run ~2x
   TF32's rate; 3xTF32 in Triton measured 59.7 ms on opm-af2-main, IEEE cuBLAS blocks 8.6 ms).
At hidden_dim 32 (and the 32-wide parts of 64) stage 2 is `_opm_multipass_kernel` instead: more (i, j)
pairs a tile in passes over the channels p, out_proj's product with its rows as the wgmma's M and a
per-program float32 workspace between the passes. One-float16 operands (bfloat16/float16 inputs, float32
at "fast") take two passes of 64 pairs (opm-af2-main bf16: kernel 0.713 -> 0.578 ms on the H200); float32
at the default precision four of 128 pairs, the hi/lo products of the MSA rows as one loop over the rows
taken three times (opm-af2-main: kernel 1.62 ms on the H200; `_opm_kernel` in four 16-wide parts took 1.91).
On Hopper (sm_90), bfloat16/float16 inputs at hidden_dim 32 run stage 2 as the Gluon kernel of
`outer_product_mean_wgmma` instead (its epilogue overlapped with the next pass's main loop; opm-af2-main bf16: kernel
0.50 -> 0.39 ms), its a written pass-major by the projections (`ln_linear(..., a_passes=2)`; when training, as a
copy beside a as it is, which the backward reads: `a_copy`).
hidden_dim 64 runs stage 2 as four 32-wide parts summed in float32; without the multi-pass kernel (hidden_dim
8 and 16, or switched off) float32 at the default precision runs it in parts of SPLIT_PART channels. float32 at
the default precision multiplies chunks of at most SPLIT_CHUNK_S MSA rows, summed likewise. Small problems (N <= 128, a short
MSA) take one launch instead: `_opm_small_kernel` projects its residues' rows itself.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..reference import AF2_EPS, LAYER_NORM_EPS, NORMALIZATIONS, outer_product_mean_projections
from . import split_linear
from ._common import (
    as_dtype,
    bucket,
    cached_launch,
    cdiv,
    eager,
    empty,
    ieee_fp32_matmul,
    interpreting,
    launch,
    multiprocessors,
    next_pow2,
    single_launch_output,
)
from .layer_norm_linear import fits, ln_linear, ln_linear_backward_fits, normalize_rows

try:
    from . import outer_product_mean_wgmma
except ImportError:  # a Triton without Gluon: the multi-pass kernel runs where the Gluon kernel would
    outer_product_mean_wgmma = None

FAST_HIDDEN_DIMS = (8, 16, 32, 64)
PARTIAL_BYTES = 32 << 20  # hidden_dim 64 with 16-bit outputs: float32 partial sums of this size at most
# float32, default precision: hidden_dim in parts of at most this many channels (hidden_dim 32 as four
# 16-wide parts). The split epilogue holds x_hi and x_lo: at 32 channels it spills ~1.3-1.5 KB a thread
# (sm_90, any tile), at 16 none
SPLIT_PART = 16
SPLIT_CHUNK_S = 2048  # float32, default precision: MSA rows multiplied per launch (see the launcher)
SPLIT_PASSES = 4  # the multi-pass kernel's passes for float32's hi/lo halves (the launcher orders w's columns by them)
_NORM_CODE = {name: k for k, name in enumerate(NORMALIZATIONS)}  # seed 0, af2 1, boltz 2


@triton.jit
def _opm_kernel(
    a_ptr, stride_ab, stride_as, stride_ai,  # a: (B, S, N, C), masked; channel stride 1
    b_ptr, stride_bb, stride_bs, stride_bj,  # b: (B, S, N, C), masked; channel stride 1
    sc_ptr, stride_scb, stride_sci, stride_scj,  # the normalization's per-pair scale (B, NI, N) float32
    w_ptr, stride_wr, stride_wk,  # out_proj weight: (R, C*C)
    wb_ptr,  # out_proj bias: (R,)
    a_lo_ptr, b_lo_ptr, w_lo_ptr,  # SPLIT only: the low float16 halves, with a's, b's and w's strides
    inv_scale_ptr,  # SCALED only: one float32, 1 / (the power-of-two scales of a, b and w)
    o_ptr, stride_ob, stride_oi, stride_oj, stride_or,  # out: (B, NI, N, R), rows i of this launch; STORE_X:
    # X (B, NI*C, N*C), stride_oi its rows' and stride_oj its columns' (stride_or unused)
    p_ptr, stride_pb, stride_pi, stride_pj, stride_pr,  # ACCUMULATE: float32 partial sums (B, NI, N, R) to add
    NI, N, R,  # NI: rows i in this launch (a, sc and out start at its first row), N: columns j
    S,  # the MSA rows this launch multiplies (a and b start at its first)
    S_BUCKET, N_BUCKET,  # autotuning keys only
    C: tl.constexpr,
    NORM: tl.constexpr,  # 0 seed, 1 af2 (which divides the bias too), 2 boltz
    TILE_ROWS: tl.constexpr,  # BLOCK_I * C, rows of the first product
    COLS_FACTOR: tl.constexpr,  # BLOCK_J = COLS_FACTOR * BLOCK_I
    BLOCK_S: tl.constexpr,
    BLOCK_R: tl.constexpr,
    GROUP_I: tl.constexpr,
    SPLIT: tl.constexpr,  # float32 contract: operands as float16 hi + lo pairs, three products each
    SCALED: tl.constexpr,  # float32 inputs: a, b, w arrive scaled by powers of two (float16 range)
    ACCUMULATE: tl.constexpr,  # add the partial sums at p_ptr (hidden_dim 64 runs as four 32-wide parts)
    ADD_BIAS: tl.constexpr,  # add out_proj's bias (the last part only)
    STORE_X: tl.constexpr,  # the backward's: store the scaled outer products X (B, NI*C, N*C) at o_ptr, no epilogue
):
    BLOCK_I: tl.constexpr = TILE_ROWS // C
    BLOCK_J: tl.constexpr = BLOCK_I * COLS_FACTOR
    pid_b = tl.program_id(1).to(tl.int64)
    blk_i, blk_j = _grouped(tl.program_id(0), tl.cdiv(NI, BLOCK_I), tl.cdiv(N, BLOCK_J), GROUP_I)

    # rows of the first product are (i, p), columns (j, q)
    rows = tl.arange(0, BLOCK_I * C)
    cols = tl.arange(0, BLOCK_J * C)
    row_i = blk_i * BLOCK_I + rows // C  # [BLOCK_I*C]
    col_j = blk_j * BLOCK_J + cols // C  # [BLOCK_J*C]
    row_off = row_i.to(tl.int64) * stride_ai + rows % C
    col_off = col_j.to(tl.int64) * stride_bj + cols % C
    acc = tl.zeros((BLOCK_I * C, BLOCK_J * C), dtype=tl.float32)
    acc = _products(acc, a_ptr + pid_b * stride_ab, a_lo_ptr + pid_b * stride_ab, stride_as, row_off, row_i < NI,
                    b_ptr + pid_b * stride_bb, b_lo_ptr + pid_b * stride_bb, stride_bs, col_off, col_j < N, S,
                    SPLIT, BLOCK_S)
    sc_b = sc_ptr + pid_b * stride_scb

    if STORE_X:  # scale[i, j] X[(i p), (j q)]: acc as it is, in the layout of a plain product of a and b
        # 64-bit tile origins, 32-bit offsets inside the tile (a 64-bit offset tile costs 128 registers)
        x_ok = (row_i < NI)[:, None] & (col_j < N)[None, :]
        tile_i = (blk_i * BLOCK_I).to(tl.int64)
        tile_j = (blk_j * BLOCK_J).to(tl.int64)
        li = rows // C  # [BLOCK_I*C] residue i within the tile
        lj = cols // C  # [BLOCK_J*C]
        sc = tl.load(sc_b + tile_i * stride_sci + tile_j * stride_scj + (li * stride_sci)[:, None]
                     + (lj * stride_scj)[None, :], mask=x_ok, other=0.0)  # [BLOCK_I*C, BLOCK_J*C]
        tl.store(o_ptr + pid_b * stride_ob + tile_i * C * stride_oi + tile_j * C * stride_oj
                 + (rows * stride_oi)[:, None] + (cols * stride_oj)[None, :],
                 (acc * sc).to(o_ptr.dtype.element_ty), mask=x_ok)  # [BLOCK_I*C, BLOCK_J*C]
    else:
        pair = tl.arange(0, BLOCK_I * BLOCK_J)
        out_i = (blk_i * BLOCK_I + pair // BLOCK_J).to(tl.int64)  # [(i j)]
        out_j = (blk_j * BLOCK_J + pair % BLOCK_J).to(tl.int64)
        pair_ok = (out_i < NI) & (out_j < N)
        scale = tl.load(sc_b + out_i * stride_sci + out_j * stride_scj, mask=pair_ok, other=0.0)  # [(i j)]
        _epilogue(acc, scale, out_i, out_j, pair_ok, w_ptr, stride_wr, stride_wk, w_lo_ptr, wb_ptr, inv_scale_ptr,
                  o_ptr + pid_b * stride_ob, stride_oi, stride_oj, stride_or,
                  p_ptr + pid_b * stride_pb, stride_pi, stride_pj, stride_pr, R,
                  C, NORM, BLOCK_I, BLOCK_J, BLOCK_R, SPLIT, SCALED, ACCUMULATE, ADD_BIAS, "tf32")


@triton.jit
def _products(acc, a_b, a_lo_b, stride_as, row_off, row_ok, b_b, b_lo_b, stride_bs, col_off, col_ok, S,
              SPLIT: tl.constexpr, BLOCK_S: tl.constexpr):
    """acc [rows, cols] += sum over the MSA rows s < S of a[s, rows]^T b[s, cols] (a_b, b_b: this
    batch element's a and b; row_off, col_off: the rows' and columns' offsets in them)."""
    for s0 in range(0, S, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        s_ok = s < S
        s64 = s.to(tl.int64)
        a_off = row_off[:, None] + s64[None, :] * stride_as  # [rows, BLOCK_S]
        a_ok = row_ok[:, None] & s_ok[None, :]
        b_off = s64[:, None] * stride_bs + col_off[None, :]  # [BLOCK_S, cols]
        b_ok = s_ok[:, None] & col_ok[None, :]
        a_t = tl.load(a_b + a_off, mask=a_ok, other=0.0)
        b_t = tl.load(b_b + b_off, mask=b_ok, other=0.0)
        if SPLIT:  # a b = a_hi b_hi + a_hi b_lo + a_lo b_hi, to ~2**-22; small terms first
            acc = tl.dot(a_t, tl.load(b_lo_b + b_off, mask=b_ok, other=0.0), acc)
            acc = tl.dot(tl.load(a_lo_b + a_off, mask=a_ok, other=0.0), b_t, acc)
        acc = tl.dot(a_t, b_t, acc)  # 16-bit operands, fp32 accumulator
    return acc


@triton.jit
def _epilogue(acc, scale, out_i, out_j, pair_ok,
              w_ptr, stride_wr, stride_wk, w_lo_ptr, wb_ptr, inv_scale_ptr,
              o_ptr, stride_oi, stride_oj, stride_or, p_ptr, stride_pi, stride_pj, stride_pr, R,
              C: tl.constexpr, NORM: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr,
              BLOCK_R: tl.constexpr, SPLIT: tl.constexpr, SCALED: tl.constexpr, ACCUMULATE: tl.constexpr,
              ADD_BIAS: tl.constexpr, PRECISION: tl.constexpr):
    """From the tile's outer products acc [(i p), (j q)] (float32) and its pairs' scale [(i j)] to the output:
    the rearrangement to [(i j), (p q)], the normalization's scale, out_proj's product streamed over blocks
    of its rows r, `_finish`. o_ptr and p_ptr point at this batch element."""
    x = _by_pairs(acc, BLOCK_I, C, BLOCK_J, C) * scale[:, None]  # [(i j), (p q)]
    x_hi = x.to(w_ptr.dtype.element_ty)
    if SPLIT:
        x_lo = (x - x_hi.to(tl.float32)).to(w_ptr.dtype.element_ty)
    inv_scale = tl.load(inv_scale_ptr) if SCALED else 1.0
    o_base = o_ptr + out_i * stride_oi + out_j * stride_oj  # [(i j)]
    p_base = p_ptr + out_i * stride_pi + out_j * stride_pj
    offs_k = tl.arange(0, C * C)
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        r_ok = offs_r < R
        w_offs = offs_k[:, None] * stride_wk + offs_r[None, :] * stride_wr
        w_t = tl.load(w_ptr + w_offs, mask=r_ok[None, :], other=0.0)  # [C*C, BLOCK_R]
        out = tl.zeros((BLOCK_I * BLOCK_J, BLOCK_R), dtype=tl.float32)
        if SPLIT:
            w_lo = tl.load(w_lo_ptr + w_offs, mask=r_ok[None, :], other=0.0)  # [C*C, BLOCK_R]
            out = tl.dot(x_hi, w_lo, out)
            out = tl.dot(x_lo, w_t, out)
        out = tl.dot(x_hi, w_t, out, input_precision=PRECISION)  # [(i j), BLOCK_R]
        _finish(out, scale, inv_scale, o_base, p_base, pair_ok, offs_r, r_ok, wb_ptr, stride_or, stride_pr, NORM,
                SCALED, ACCUMULATE, ADD_BIAS)


@triton.jit
def _grouped(tile, n_i, n_j, GROUP_I: tl.constexpr):
    """(block i, block j) of tile number `tile` in grouped ordering: tiles that run together share a's
    rows and b's columns in L2."""
    group = tile // (GROUP_I * n_j)
    first_i = group * GROUP_I
    group_size = tl.minimum(n_i - first_i, GROUP_I)
    return first_i + (tile % (GROUP_I * n_j)) % group_size, (tile % (GROUP_I * n_j)) // group_size


@triton.jit
def _pair_scale(count_i, norm, NORM: tl.constexpr, EPS: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr):
    """The normalization's factor of each (i, j) pair's outer products, [(i j)] float32 (af2 divides the
    bias too, after the linear)."""
    if NORM == 0:
        scale = tl.broadcast_to((1.0 / tl.maximum(count_i, 1.0))[:, None], (BLOCK_I, BLOCK_J))
    elif NORM == 1:
        scale = 1.0 / (EPS + norm)
    else:
        scale = 1.0 / tl.maximum(norm, 1.0)
    return tl.reshape(scale, (BLOCK_I * BLOCK_J,))


@triton.jit
def _by_pairs(acc, BLOCK_I: tl.constexpr, CP: tl.constexpr, BLOCK_J: tl.constexpr, C: tl.constexpr):
    """acc [(i p), (j q)] (CP channels p, C channels q) rearranged to [(i j), (p q)]."""
    return tl.reshape(tl.permute(tl.reshape(acc, (BLOCK_I, CP, BLOCK_J, C)), (0, 2, 1, 3)), (BLOCK_I * BLOCK_J, CP * C))


@triton.jit
def _finish(out, scale, inv_scale, o_base, p_base, pair_ok, offs_r, r_ok, wb_ptr, stride_or, stride_pr,
            NORM: tl.constexpr, SCALED: tl.constexpr, ACCUMULATE: tl.constexpr, ADD_BIAS: tl.constexpr):
    """out [(i j), r] float32 (output channels offs_r) to the output: times inv_scale (SCALED: the operands'
    power-of-two scales undone), earlier parts' partial sums (at p_base [(i j)] + r) and the bias added,
    stored at o_base [(i j)] + r."""
    if SCALED:
        out = out * inv_scale
    if ACCUMULATE:
        out += tl.load(p_base[:, None] + offs_r[None, :] * stride_pr, mask=pair_ok[:, None] & r_ok[None, :], other=0.0)
    if ADD_BIAS:
        wb = tl.load(wb_ptr + offs_r, mask=r_ok, other=0.0).to(tl.float32)
        if NORM == 1:
            out += scale[:, None] * wb[None, :]
        else:
            out += wb[None, :]
    tl.store(o_base[:, None] + offs_r[None, :] * stride_or, out.to(o_base.dtype.element_ty),
             mask=pair_ok[:, None] & r_ok[None, :])


@triton.jit
def _pair_scale_kernel(
    m_ptr, stride_mb, stride_ms, stride_mi,  # mask: (B, S, N) float32 (HAS_MASK only)
    sc_ptr, stride_scb, stride_sci, stride_scj,  # out: the per-pair scale (B, N, N) float32
    S, N,
    NORM: tl.constexpr,  # 0 seed, 1 af2, 2 boltz
    HAS_MASK: tl.constexpr,  # without a mask every count is S
    EPS: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """The normalization's factor of each (i, j) pair of a tile from the mask's counts over every MSA row:
    seed's sum_s mask[s, i], af2's and boltz's sum_s mask[s, i] mask[s, j] as an IEEE float32 product
    (exact for 0/1 masks; its operands prefetched by the pipeliner)."""
    n_j = tl.cdiv(N, BLOCK_J)
    blk_i = tl.program_id(0) // n_j
    blk_j = tl.program_id(0) % n_j
    pid_b = tl.program_id(1).to(tl.int64)
    offs_i = blk_i * BLOCK_I + tl.arange(0, BLOCK_I)  # [BLOCK_I]
    offs_j = blk_j * BLOCK_J + tl.arange(0, BLOCK_J)  # [BLOCK_J]
    count_i = tl.zeros((BLOCK_I,), dtype=tl.float32)
    norm = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
    m_b = m_ptr + pid_b * stride_mb
    if HAS_MASK:
        for s0 in range(0, S, BLOCK_S):
            s = s0 + tl.arange(0, BLOCK_S)
            s_ok = s < S
            m_i = tl.load(m_b + s[:, None] * stride_ms + offs_i[None, :] * stride_mi,
                          mask=s_ok[:, None] & (offs_i < N)[None, :], other=0.0)  # [BLOCK_S, BLOCK_I]
            if NORM == 0:
                count_i += tl.sum(m_i, axis=0)
            else:
                m_j = tl.load(m_b + s[:, None] * stride_ms + offs_j[None, :] * stride_mi,
                              mask=s_ok[:, None] & (offs_j < N)[None, :], other=0.0)  # [BLOCK_S, BLOCK_J]
                norm = tl.dot(tl.trans(m_i), m_j, norm, input_precision="ieee")  # [BLOCK_I, BLOCK_J]
    else:
        count_i += S
        norm += S
    pair = tl.arange(0, BLOCK_I * BLOCK_J)
    i = (blk_i * BLOCK_I + pair // BLOCK_J).to(tl.int64)  # [(i j)]
    j = (blk_j * BLOCK_J + pair % BLOCK_J).to(tl.int64)
    tl.store(sc_ptr + pid_b * stride_scb + i * stride_sci + j * stride_scj,
             _pair_scale(count_i, norm, NORM, EPS, BLOCK_I, BLOCK_J), mask=(i < N) & (j < N))


@triton.jit
def _stacked_products(acc, a_b, stride_ah, stride_as, row_off, row_ok, b_b, stride_bh, stride_bs, col_off, col_ok, S,
                      SPLIT: tl.constexpr, BLOCK_S: tl.constexpr):
    """acc [rows, cols] += sum over the MSA rows s < S of a[s, rows]^T b[s, cols] (a_b, b_b: this batch element's
    a and b; row_off, col_off: the rows' and columns' offsets in them). SPLIT: a and b are float16 hi halves with
    their lo halves stride_ah / stride_bh further on, and the three products a_hi b_lo + a_lo b_hi + a_hi b_hi
    (small terms first) are one loop over the MSA rows taken three times, each time in whole steps of BLOCK_S
    rows (a step's halves are one term's: its base is a scalar), so that one pipelined loop runs them."""
    if SPLIT:
        s_steps = tl.cdiv(S, BLOCK_S) * BLOCK_S  # the rows a term takes, S rounded up to whole steps
        for t0 in range(0, 3 * s_steps, BLOCK_S):
            term = t0 // s_steps  # 0 (a_hi, b_lo), 1 (a_lo, b_hi), 2 (a_hi, b_hi)
            s = t0 - term * s_steps + tl.arange(0, BLOCK_S)  # [BLOCK_S]
            s_ok = s < S
            s64 = s.to(tl.int64)
            a_t = tl.load(a_b + (term == 1).to(tl.int64) * stride_ah + row_off[:, None] + s64[None, :] * stride_as,
                          mask=row_ok[:, None] & s_ok[None, :], other=0.0)  # [rows, BLOCK_S]
            b_t = tl.load(b_b + (term == 0).to(tl.int64) * stride_bh + s64[:, None] * stride_bs + col_off[None, :],
                          mask=s_ok[:, None] & col_ok[None, :], other=0.0)  # [BLOCK_S, cols]
            acc = tl.dot(a_t, b_t, acc)  # 16-bit operands, fp32 accumulator
    else:
        acc = _products(acc, a_b, a_b, stride_as, row_off, row_ok, b_b, b_b, stride_bs, col_off, col_ok, S, False,
                        BLOCK_S)
    return acc


@triton.jit
def _split_pass(acc, ws, pair, part, w_ptr, stride_wh, stride_wr, stride_wk, R, scale, inv_scale, o_base, p_base,
                stride_pr, pair_ok, wb_ptr, stride_or, NORM: tl.constexpr, FIRST: tl.constexpr, LAST: tl.constexpr,
                ACCUMULATE: tl.constexpr, ADD_BIAS: tl.constexpr, PAIRS: tl.constexpr, BLOCK_R: tl.constexpr,
                W_STAGES: tl.constexpr, BLOCK_I: tl.constexpr, CP: tl.constexpr, BLOCK_J: tl.constexpr,
                C: tl.constexpr):
    """One pass of `_opm_multipass_kernel`'s epilogue for SPLIT, from the pass's accumulator acc [(i p'), (j q)]
    float32: x = acc rearranged to [(i j), (p' q)] and scaled, as float16 hi + lo halves, against out_proj's
    columns of the pass (hi at w_ptr, lo stride_wh on), three products x_hi w_lo + x_lo w_hi + x_hi w_hi with
    w's 64-row blocks [(p' q), r]. x is made in two halves, even and odd q (a split of the accumulator's column
    pairs, which each thread holds together), so that half as much of it is live (spills at opm-af2-main, sm_90
    compile: ~770 -> ~400 bytes a thread; kernel 1.76 -> 1.62 ms on the H200); the launcher orders each pass's
    columns of w to match, even q then odd q, so that its blocks load whole (read at stride 2: 1.95 ms). Each
    block's products start from zero and are added to the workspace's sums (the earlier passes') and the
    earlier parts' (p_base, ACCUMULATE) in IEEE float32: the tensor cores' float32 sums drop low bits of what
    they add to a large accumulator (carried across the passes and parts they read 1.1-1.5e-5 relative error
    at hidden_dim 64 on the H200; the contract is 1e-5)."""
    acc_e, acc_o = tl.split(tl.reshape(acc, (BLOCK_I * CP, BLOCK_J * C // 2, 2)))  # columns (j, q) of even / odd q
    x_e = _by_pairs(acc_e, BLOCK_I, CP, BLOCK_J, C // 2) * scale[:, None]  # [(i j), (p' q')], q = 2 q'
    x_e_hi = x_e.to(w_ptr.dtype.element_ty)
    x_e_lo = (x_e - x_e_hi.to(tl.float32)).to(w_ptr.dtype.element_ty)
    x_o = _by_pairs(acc_o, BLOCK_I, CP, BLOCK_J, C // 2) * scale[:, None]  # q = 2 q' + 1
    x_o_hi = x_o.to(w_ptr.dtype.element_ty)
    x_o_lo = (x_o - x_o_hi.to(tl.float32)).to(w_ptr.dtype.element_ty)
    offs_k = part * CP * C + tl.arange(0, CP * C // 2)  # the pass's columns of w: even q, then odd q
    odd = CP * C // 2 * stride_wk
    for r0 in tl.range(0, R, BLOCK_R, num_stages=W_STAGES):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        r_ok = offs_r < R
        w_offs = offs_k[:, None] * stride_wk + offs_r[None, :] * stride_wr
        w_e_hi = tl.load(w_ptr + w_offs, mask=r_ok[None, :], other=0.0)  # [(p' q'), BLOCK_R]
        w_e_lo = tl.load(w_ptr + stride_wh + w_offs, mask=r_ok[None, :], other=0.0)
        w_o_hi = tl.load(w_ptr + odd + w_offs, mask=r_ok[None, :], other=0.0)
        w_o_lo = tl.load(w_ptr + stride_wh + odd + w_offs, mask=r_ok[None, :], other=0.0)
        prod = tl.dot(x_e_hi, w_e_lo)  # [(i j), BLOCK_R], small terms first
        prod = tl.dot(x_o_hi, w_o_lo, prod)
        prod = tl.dot(x_e_lo, w_e_hi, prod)
        prod = tl.dot(x_o_lo, w_o_hi, prod)
        prod = tl.dot(x_e_hi, w_e_hi, prod)
        prod = tl.dot(x_o_hi, w_o_hi, prod)
        ws_r = ws + offs_r[None, :] * PAIRS + pair[:, None]  # [(i j), BLOCK_R]
        if not FIRST:
            prod += tl.load(ws_r)
        if LAST:
            _finish(prod, scale, inv_scale, o_base, p_base, pair_ok, offs_r, r_ok, wb_ptr, stride_or, stride_pr, NORM,
                    True, ACCUMULATE, ADD_BIAS)
        else:
            tl.store(ws_r, prod)


@triton.jit
def _opm_multipass_kernel(
    a_ptr, stride_ab, stride_ah, stride_as, stride_ai,  # a: (B, S, N, C), masked, 16-bit; channel stride 1
    b_ptr, stride_bb, stride_bh, stride_bs, stride_bj,  # b: (B, S, N, C), masked, 16-bit; channel stride 1
    sc_ptr, stride_scb, stride_sci, stride_scj,  # the normalization's per-pair scale (B, NI, N) float32
    w_ptr, stride_wh, stride_wr, stride_wk,  # out_proj weight: (R, C*C), a's dtype
    wb_ptr,  # out_proj bias: (R,)
    inv_scale_ptr,  # SCALED only: one float32, 1 / (the power-of-two scales of a, b and w)
    ws_ptr, stride_wsp,  # workspace: (programs, R rounded up to BLOCK_R, BLOCK_I*BLOCK_J) float32
    o_ptr, stride_ob, stride_oi, stride_oj, stride_or,  # out: (B, NI, N, R), rows i of this launch
    p_ptr, stride_pb, stride_pi, stride_pj, stride_pr,  # ACCUMULATE: float32 partial sums (B, NI, N, R) to add
    B, S, NI, N, R,  # NI: rows i in this launch (a, mi and out start at its first row), N: columns j
    S_BUCKET, N_BUCKET,  # autotuning keys only
    C: tl.constexpr,
    NORM: tl.constexpr,  # 0 seed, 1 af2 (which divides the bias too), 2 boltz
    PASSES: tl.constexpr,  # passes over the channels p, C // PASSES of them a pass
    TILE_ROWS: tl.constexpr,  # BLOCK_I * C / PASSES, rows of the first product (a pass's channels p)
    TILE_COLS: tl.constexpr,  # BLOCK_J * C, its columns
    BLOCK_S: tl.constexpr,
    BLOCK_R: tl.constexpr,  # out_proj's rows a step of the epilogue: the M of its product (Hopper's wgmma: 64)
    W_STAGES: tl.constexpr,  # the epilogue's pipeline depth over out_proj's row blocks
    GROUP_I: tl.constexpr,
    SPLIT: tl.constexpr,  # float32 contract: a, b, w as float16 hi halves, the lo halves stride_ah / _bh / _wh on
    SCALED: tl.constexpr,  # float32 inputs: a, b, w scaled by powers of two (float16)
    ACCUMULATE: tl.constexpr,  # add the partial sums at p_ptr (hidden_dim 64 runs as four 32-wide parts)
    ADD_BIAS: tl.constexpr,  # add out_proj's bias (the last part only)
):
    """`_opm_kernel` for 16-bit operands at hidden_dim 32 with more (i, j) pairs a tile (64 for one-float16
    operands, 128 for SPLIT's halves), in PASSES passes over the channels p: each pass accumulates
    X_part [(i p'), (j q)] over the MSA rows, then adds W[:, part] @ X_part^T [r, (i j)] to this program's
    float32 workspace (the last pass reads it back and finishes). The epilogue's product so has out_proj's
    rows as its M (a wgmma, both operands in shared memory) instead of 32 pairs (chains of mma.sync: 0.31 of
    the one-pass kernel's 0.71 ms on opm-af2-main, 125 TFLOP/s), and reads out_proj's weight once per tile.
    SPLIT (the float32 contract) runs the three hi/lo products of the MSA rows as one loop over 3S stacked
    rows and its epilogue in `_split_pass` (x @ w^T with the 128 pairs as M, three products per half of x);
    its four passes keep x's and w's halves within shared memory. Persistent: each program takes tiles
    program_id, + programs, ... of every batch element, so that its workspace is its own."""
    CP: tl.constexpr = C // PASSES
    BLOCK_I: tl.constexpr = TILE_ROWS // CP
    BLOCK_J: tl.constexpr = TILE_COLS // C
    PAIRS: tl.constexpr = BLOCK_I * BLOCK_J
    n_i = tl.cdiv(NI, BLOCK_I)
    n_j = tl.cdiv(N, BLOCK_J)
    tiles = n_i * n_j
    rows = tl.arange(0, BLOCK_I * CP)
    cols = tl.arange(0, BLOCK_J * C)
    pair = tl.arange(0, PAIRS)
    ws = ws_ptr + tl.program_id(0).to(tl.int64) * stride_wsp
    for tile in range(tl.program_id(0), tiles * B, tl.num_programs(0)):
        pid_b = (tile // tiles).to(tl.int64)
        blk_i, blk_j = _grouped(tile % tiles, n_i, n_j, GROUP_I)
        row_i = blk_i * BLOCK_I + rows // CP  # [BLOCK_I*CP]: rows (i, p') of the first product
        col_j = blk_j * BLOCK_J + cols // C  # [BLOCK_J*C]: columns (j, q)
        row_off = row_i.to(tl.int64) * stride_ai + rows % CP
        col_off = col_j.to(tl.int64) * stride_bj + cols % C
        out_i = (blk_i * BLOCK_I + pair // BLOCK_J).to(tl.int64)  # [(i j)]
        out_j = (blk_j * BLOCK_J + pair % BLOCK_J).to(tl.int64)
        pair_ok = (out_i < NI) & (out_j < N)
        a_b = a_ptr + pid_b * stride_ab
        b_b = b_ptr + pid_b * stride_bb
        scale = tl.load(sc_ptr + pid_b * stride_scb + out_i * stride_sci + out_j * stride_scj, mask=pair_ok,
                        other=0.0)  # [(i j)]
        for part in tl.static_range(PASSES):
            acc = tl.zeros((BLOCK_I * CP, BLOCK_J * C), dtype=tl.float32)
            acc = _stacked_products(acc, a_b, stride_ah, stride_as, row_off + part * CP, row_i < NI, b_b, stride_bh,
                                    stride_bs, col_off, col_j < N, S, SPLIT, BLOCK_S)
            if part == 0:
                o_base = o_ptr + pid_b * stride_ob + out_i * stride_oi + out_j * stride_oj  # [(i j)]
                inv_scale = tl.load(inv_scale_ptr) if SCALED else 1.0
            tl.debug_barrier()  # the workspace: every thread's reads of the last tile / writes of the last pass done
            if SPLIT:
                _split_pass(acc, ws, pair, part, w_ptr, stride_wh, stride_wr, stride_wk, R, scale, inv_scale, o_base,
                            p_ptr + pid_b * stride_pb + out_i * stride_pi + out_j * stride_pj, stride_pr, pair_ok,
                            wb_ptr, stride_or, NORM, part == 0, part == PASSES - 1, ACCUMULATE, ADD_BIAS, PAIRS,
                            BLOCK_R, W_STAGES, BLOCK_I, CP, BLOCK_J, C)
            else:
                x = _by_pairs(acc, BLOCK_I, CP, BLOCK_J, C) * scale[:, None]  # [(i j), (p' q)] float32
                offs_k = part * CP * C + tl.arange(0, CP * C)  # out_proj's columns (p q) of this pass
                x_t = tl.trans(x.to(w_ptr.dtype.element_ty))  # [(p' q), (i j)]
                for r0 in tl.range(0, R, BLOCK_R, num_stages=W_STAGES):
                    offs_r = r0 + tl.arange(0, BLOCK_R)
                    r_ok = offs_r < R
                    w_r = tl.load(w_ptr + offs_r[:, None] * stride_wr + offs_k[None, :] * stride_wk,
                                  mask=r_ok[:, None], other=0.0)  # [BLOCK_R, CP*C]
                    ws_r = ws + offs_r[:, None] * PAIRS + pair[None, :]  # [BLOCK_R, (i j)]
                    if part == 0:
                        sums = tl.zeros((BLOCK_R, PAIRS), dtype=tl.float32)
                        if ACCUMULATE:  # earlier parts' sums start the accumulator, scaled as it is
                            sums = tl.load(p_ptr + pid_b * stride_pb + out_i[None, :] * stride_pi
                                           + out_j[None, :] * stride_pj + offs_r[:, None] * stride_pr,
                                           mask=r_ok[:, None] & pair_ok[None, :], other=0.0)
                            if SCALED:
                                sums = sums / inv_scale
                    else:
                        sums = tl.load(ws_r)
                    sums = tl.dot(w_r, x_t, sums)  # [BLOCK_R, (i j)]
                    if part < PASSES - 1:
                        tl.store(ws_r, sums)
                    else:
                        _finish(tl.trans(sums), scale, inv_scale, o_base, o_base, pair_ok, offs_r, r_ok, wb_ptr,
                                stride_or, 0, NORM, SCALED, False, ADD_BIAS)


@triton.jit
def _opm_dx_kernel(
    g_ptr, stride_gb, stride_gi, stride_gj, stride_gr,  # the normalized output gradient Gs: (B, NI, N, R) 16-bit
    w_ptr, stride_wr, stride_wk,  # out_proj weight: (R, C*C), same dtype
    dx_ptr, stride_db, stride_dr, stride_dc,  # out: dX (B, NI*C, N*C), row (i p), column (j q)
    B, NI, N, R,
    C: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_K: tl.constexpr,  # columns (p q) of out_proj's weight a program
    BLOCK_R: tl.constexpr,  # R rounded up to a power of two: the product's whole K
    PROGRAMS_PER_SM: tl.constexpr,  # the launch's (its grid's) programs per multiprocessor; not read here
):
    """The backward's dX[(i p), (j q)] = sum_r Gs[i, j, r] W[r, (p q)], stored straight into the layout the
    products with a and b take (cuBLAS then needs no rearranging copy). Persistent: program k of every
    C*C // BLOCK_K keeps one block of W's columns (all R rows) in shared memory and takes the tiles of
    (i, j) pairs number program_id // (C*C // BLOCK_K), + lanes, ... (b, then blocks i, then blocks j);
    each tile is one product of Gs's rows [pairs, R] (prefetched by Triton's pipeliner) with it. (A
    program per tile and column block, W's block read from L2 each time: 0.092 against 0.070 ms at
    opm-af2-main's blocks of 192 rows on the H200.)"""
    n_k: tl.constexpr = C * C // BLOCK_K
    pid = tl.program_id(0)
    lanes = tl.num_programs(0) // n_k
    offs_k = (pid % n_k) * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]
    offs_r = tl.arange(0, BLOCK_R)
    r_ok = offs_r < R
    w = tl.load(w_ptr + offs_r[:, None] * stride_wr + offs_k[None, :] * stride_wk, mask=r_ok[:, None],
                other=0.0)  # [BLOCK_R, BLOCK_K]
    d_col = (offs_k // C) * stride_dr + (offs_k % C) * stride_dc  # [BLOCK_K]: (p q) inside a pair's block
    n_i = tl.cdiv(NI, BLOCK_I)
    n_j = tl.cdiv(N, BLOCK_J)
    pair = tl.arange(0, BLOCK_I * BLOCK_J)
    for t in range(pid // n_k, B * n_i * n_j, lanes):
        pid_b = (t // (n_i * n_j)).to(tl.int64)
        i = (t // n_j) % n_i * BLOCK_I + pair // BLOCK_J  # [BLOCK_I*BLOCK_J]
        j = t % n_j * BLOCK_J + pair % BLOCK_J
        pair_ok = (i < NI) & (j < N)
        i64, j64 = i.to(tl.int64), j.to(tl.int64)
        g = tl.load(g_ptr + (pid_b * stride_gb + i64 * stride_gi + j64 * stride_gj)[:, None] + offs_r[None, :] * stride_gr,
                    mask=pair_ok[:, None] & r_ok[None, :], other=0.0)  # [BLOCK_I*BLOCK_J, BLOCK_R]
        acc = tl.dot(g, w)  # [BLOCK_I*BLOCK_J, BLOCK_K]
        d_off = (pid_b * stride_db + i64 * C * stride_dr + j64 * C * stride_dc)[:, None] + d_col[None, :]
        tl.store(dx_ptr + d_off, acc.to(dx_ptr.dtype.element_ty), mask=pair_ok[:, None])


@triton.jit
def _opm_gs_kernel(
    g_ptr, stride_gb, stride_gi, stride_gj, stride_gr,  # the output gradient: (B, NI, N, R)
    sc_ptr, stride_scb, stride_sci, stride_scj,  # the normalization's per-pair scale: (B, NI, N) float32
    gs_ptr,  # out: Gs = g * scale, (B, NI, N, R) contiguous, g's dtype
    sum_ptr, stride_sp,  # out: partial column sums (programs, R) float32, of Gs (SCALED_SUM) or of g
    NI, N, R, PAIRS,  # PAIRS = B*NI*N
    SCALED_SUM: tl.constexpr,  # af2 divides out_proj's bias too: its gradient sums Gs; the others' sum g
    BLOCK_P: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    """The normalized output gradient Gs[b, i, j, r] = 16-bit(g[b, i, j, r] scale[b, i, j]) (float32
    products), the operand of the dX and dW kernels, for a block of pairs (b, i, j); and the block's
    column sums in float32 (out_proj's bias gradient, summed over the blocks in a fixed order)."""
    t = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)  # [BLOCK_P], 32-bit (B*NI*N < 2**31)
    t_ok = t < PAIRS
    t64 = t.to(tl.int64)
    b = (t // (NI * N)).to(tl.int64)
    i = ((t // N) % NI).to(tl.int64)
    j = (t % N).to(tl.int64)
    sc = tl.load(sc_ptr + b * stride_scb + i * stride_sci + j * stride_scj, mask=t_ok, other=0.0)  # [BLOCK_P]
    g_rows = g_ptr + b * stride_gb + i * stride_gi + j * stride_gj  # [BLOCK_P]
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        ok = t_ok[:, None] & (offs_r < R)[None, :]
        g = tl.load(g_rows[:, None] + (offs_r * stride_gr)[None, :], mask=ok, other=0.0).to(tl.float32)  # [BLOCK_P, BLOCK_R]
        gs = g * sc[:, None]
        tl.store(gs_ptr + t64[:, None] * R + offs_r[None, :], gs.to(gs_ptr.dtype.element_ty), mask=ok)
        tl.store(sum_ptr + tl.program_id(0) * stride_sp + offs_r, tl.sum(gs if SCALED_SUM else g, axis=0),
                 mask=offs_r < R)


@triton.jit
def _opm_dw_kernel(
    g_ptr, stride_gb, stride_gi, stride_gj, stride_gr,  # the output gradient's side: (B, NI, N, R) 16-bit
    x_ptr, stride_xb, stride_xr, stride_xc,  # the outer products' side: (B, NI*C, N*C), row (i p), column (j q)
    ws_ptr, stride_wss, stride_wsr,  # out: partial sums (splits, R, C*C) float32, column stride 1
    NI, N, R, PAIRS,  # PAIRS = B*NI*N
    C: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,  # columns (p q) of the weight gradient a program
    BLOCK_P: tl.constexpr,  # (b, i, j) pairs a step: the product's K
    ACCUMULATE: tl.constexpr,  # add the partial sums already in ws (an earlier block of rows i's)
):
    """out_proj's weight gradient dW[r, (p q)] = sum over pairs (b, i, j) of g[b, i, j, r] x[b, (i p), (j q)]
    (the normalization's scale on one side: Gs and the plain outer products, or g and the normalized ones)
    for a block of rows r and columns (p q), over this program's split of the pairs (program_id(1) of
    num_programs(1) equal runs of whole steps, in order): its partial sum, stored, or with ACCUMULATE added to
    the earlier blocks' one in that slot (an atomic add of which this program is the only writer: one
    rounding of earlier + this block's, whatever the timing), summed over the splits in a fixed order
    afterwards (bit-reproducible). x is read in the layout of a plain product
    a^T b, each pair's (p q) block gathered from C rows of C columns; both operands are plain loads into
    the product, which Triton's pipeliner prefetches."""
    n_k: tl.constexpr = C * C // BLOCK_K
    blk_k = tl.program_id(0) % n_k
    blk_r = tl.program_id(0) // n_k
    split = tl.program_id(1)
    per = tl.cdiv(tl.cdiv(PAIRS, tl.num_programs(1)), BLOCK_P) * BLOCK_P
    lo = split * per
    hi = tl.minimum(lo + per, PAIRS)
    offs_r = blk_r * BLOCK_R + tl.arange(0, BLOCK_R)  # [BLOCK_R]
    r_ok = offs_r < R
    offs_k = blk_k * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]
    x_cols = (offs_k // C) * stride_xr + (offs_k % C) * stride_xc  # [BLOCK_K]: (p q) inside a pair's block
    acc = tl.zeros((BLOCK_K, BLOCK_R), dtype=tl.float32)
    for t0 in range(lo, hi, BLOCK_P):
        t = t0 + tl.arange(0, BLOCK_P)  # [BLOCK_P]
        t_ok = t < hi
        # pair numbers in 32 bits (B*NI*N < 2**31: the output alone would be ~2**39 bytes otherwise), so that
        # the divisions are not 64-bit ones (a subroutine call each in sm_90 code), widened for the offsets
        b = (t // (NI * N)).to(tl.int64)
        i = ((t // N) % NI).to(tl.int64)
        j = (t % N).to(tl.int64)
        x_t = tl.load(x_ptr + (b * stride_xb + i * C * stride_xr + j * C * stride_xc)[:, None] + x_cols[None, :],
                      mask=t_ok[:, None], other=0.0)  # [BLOCK_P, BLOCK_K]
        g = tl.load(g_ptr + (b * stride_gb + i * stride_gi + j * stride_gj)[:, None] + (offs_r * stride_gr)[None, :],
                    mask=t_ok[:, None] & r_ok[None, :], other=0.0)  # [BLOCK_P, BLOCK_R]
        acc = tl.dot(tl.trans(x_t), g, acc)  # [BLOCK_K, BLOCK_R]
    ws_tile = ws_ptr + split * stride_wss + offs_r[None, :] * stride_wsr + offs_k[:, None]  # [BLOCK_K, BLOCK_R]
    if ACCUMULATE:  # this program is the slot's only writer: the earlier blocks' sum + this one's, in that order
        tl.atomic_add(ws_tile, acc, mask=r_ok[None, :], sem="relaxed")
    else:
        tl.store(ws_tile, acc, mask=r_ok[None, :])


@triton.jit
def _project_rows(x_ptr, stride_xs, stride_xi, stride_xd, lnw_ptr, lnb_ptr, w_ptr, stride_wc, stride_wd, bias_ptr,
                  m_ptr, stride_ms, stride_mi, first, S, N, D, eps,
                  C: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_RES: tl.constexpr,
                  BLOCK_D: tl.constexpr, PRECISION: tl.constexpr):
    """LayerNorm, one projection and the mask for residues first.. first+BLOCK_RES of every MSA row of
    one batch element (pointers at it): y [(s, res), C] float32 (0 outside S x N) and the mask values
    [BLOCK_S, BLOCK_RES] float32."""
    r = tl.arange(0, BLOCK_S * BLOCK_RES)
    s = r // BLOCK_RES
    res = first + r % BLOCK_RES
    ok = (s < S) & (res < N)  # [BLOCK_S*BLOCK_RES]
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    x = tl.load(x_ptr + (s.to(tl.int64) * stride_xs + res * stride_xi)[:, None] + offs_d[None, :] * stride_xd,
                mask=ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)  # [BLOCK_S*BLOCK_RES, BLOCK_D]
    xn = normalize_rows(x, offs_d, D, lnw_ptr, lnb_ptr, eps).to(x_ptr.dtype.element_ty)
    offs_c = tl.arange(0, C)
    w_t = tl.load(w_ptr + offs_c[None, :] * stride_wc + offs_d[:, None] * stride_wd, mask=d_ok[:, None],
                  other=0.0).to(x_ptr.dtype.element_ty)  # [BLOCK_D, C]
    y = tl.dot(xn, w_t, input_precision=PRECISION) + tl.load(bias_ptr + offs_c).to(tl.float32)[None, :]
    if HAS_MASK:
        m = tl.load(m_ptr + s.to(tl.int64) * stride_ms + res * stride_mi, mask=ok, other=0.0).to(tl.float32)
    else:
        m = ok.to(tl.float32)
    y = tl.where(ok[:, None], y * m[:, None], 0.0)  # [BLOCK_S*BLOCK_RES, C]
    return y, tl.reshape(m, (BLOCK_S, BLOCK_RES))


@triton.jit
def _opm_small_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi, stride_xd,  # msa_repr: (B, S, N, D), any strides
    lnw_ptr, lnb_ptr,  # LayerNorm weight, bias: (D,)
    wa_ptr, stride_wac, stride_wad, ba_ptr,  # proj_a: (C, D), (C,)
    wb_ptr, stride_wbc, stride_wbd, bb_ptr,  # proj_b: (C, D), (C,)
    m_ptr, stride_mb, stride_ms, stride_mi,  # mask: (B, S, N), any real dtype (HAS_MASK only)
    w_ptr, stride_wr, stride_wk, wbias_ptr,  # out_proj: (R, C*C), (R,)
    o_ptr, stride_ob, stride_oi, stride_oj, stride_or,  # out: (B, N, N, R)
    S, N, D, R, eps,
    C: tl.constexpr, NORM: tl.constexpr, HAS_MASK: tl.constexpr, EPS: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_R: tl.constexpr, PRECISION: tl.constexpr,
):
    """The whole Outer Product Mean for small problems in one launch: each program normalizes and
    projects the MSA rows of its residues i and j itself (all S rows in one step), then the tile's
    outer products and the epilogue as in `_opm_kernel`."""
    pid = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    n_j = tl.cdiv(N, BLOCK_I)
    blk_i = pid // n_j
    blk_j = pid % n_j
    x_b = x_ptr + pid_b * stride_xb
    m_b = m_ptr + pid_b * stride_mb
    a, m_i = _project_rows(x_b, stride_xs, stride_xi, stride_xd, lnw_ptr, lnb_ptr, wa_ptr, stride_wac, stride_wad,
                           ba_ptr, m_b, stride_ms, stride_mi, blk_i * BLOCK_I, S, N, D, eps, C, HAS_MASK, BLOCK_S,
                           BLOCK_I, BLOCK_D, PRECISION)  # [(s i), p]
    b, m_j = _project_rows(x_b, stride_xs, stride_xi, stride_xd, lnw_ptr, lnb_ptr, wb_ptr, stride_wbc, stride_wbd,
                           bb_ptr, m_b, stride_ms, stride_mi, blk_j * BLOCK_I, S, N, D, eps, C, HAS_MASK, BLOCK_S,
                           BLOCK_I, BLOCK_D, PRECISION)  # [(s j), q]
    a_t = tl.reshape(tl.permute(tl.reshape(a, (BLOCK_S, BLOCK_I, C)), (1, 2, 0)), (BLOCK_I * C, BLOCK_S))
    b_t = tl.reshape(b, (BLOCK_S, BLOCK_I * C))
    acc = tl.dot(a_t.to(x_ptr.dtype.element_ty), b_t.to(x_ptr.dtype.element_ty),
                 input_precision=PRECISION)  # [(i p), (j q)]
    count_i = tl.sum(m_i, axis=0)  # [BLOCK_I]
    norm = tl.sum(m_i[:, :, None] * m_j[:, None, :], axis=0)  # [BLOCK_I, BLOCK_J]
    pair = tl.arange(0, BLOCK_I * BLOCK_I)
    out_i = blk_i * BLOCK_I + pair // BLOCK_I
    out_j = blk_j * BLOCK_I + pair % BLOCK_I
    _epilogue(acc, _pair_scale(count_i, norm, NORM, EPS, BLOCK_I, BLOCK_I), out_i.to(tl.int64), out_j.to(tl.int64),
              (out_i < N) & (out_j < N), w_ptr, stride_wr, stride_wk, w_ptr, wbias_ptr, w_ptr,
              o_ptr + pid_b * stride_ob, stride_oi, stride_oj, stride_or, o_ptr, 0, 0, 0, R, C, NORM, BLOCK_I, BLOCK_I,
              BLOCK_R, False, False, False, True, PRECISION)


# The single-launch path takes problems whose row tile (all S rows of a block of residues, the whole
# msa_dim) stays small on chip; each program re-projects its residues, so N is bounded too.
SMALL_MAX_TILE = 16384  # BLOCK_S * BLOCK_I * BLOCK_D elements (a quarter for float32: beyond, it spills)
SMALL_MAX_N = 128


def _small_meta(S: int, N: int, D: int, c: int, dtype: torch.dtype) -> dict | None:
    """Constexprs of the single-launch path, or None when the problem is not small."""
    if c not in (16, 32) or N > SMALL_MAX_N:
        return None
    return _small_blocks(S, D, c, dtype)


@functools.lru_cache(maxsize=256)
def _small_blocks(S: int, D: int, c: int, dtype: torch.dtype) -> dict | None:
    block_s, block_d, block_i = max(16, next_pow2(S)), max(16, next_pow2(D)), 128 // c
    if block_s * block_i * block_d > SMALL_MAX_TILE // (4 if dtype == torch.float32 else 1):
        return None
    return {"BLOCK_S": block_s, "BLOCK_D": block_d, "BLOCK_I": block_i, "BLOCK_R": 16,
            "PRECISION": "ieee" if dtype == torch.float32 else "tf32"}


def _outer_product_mean_small(msa_repr, msa_mask, lnw, lnb, wa, ba, wb, bb, w, wbias, normalization, meta):
    """One launch from msa_repr to the output; float32 takes IEEE products (exact to the contract)."""
    B, S, N, D = msa_repr.shape
    c = wa.shape[0]
    R = w.shape[0]
    out = empty(B, N, N, R, dtype=msa_repr.dtype, device=msa_repr.device)
    m, m_strides = (msa_repr, (0, 0, 0)) if msa_mask is None else (msa_mask, msa_mask.stride())
    cached_launch(_opm_small_kernel)(
        (cdiv(N, meta["BLOCK_I"]) ** 2, B), msa_repr, *msa_repr.stride(), lnw, lnb, wa, *wa.stride(), ba, wb,
        *wb.stride(), bb, m, *m_strides, w, *w.stride(), wbias, out, *out.stride(), S, N, D, R, LAYER_NORM_EPS, C=c,
        NORM=_NORM_CODE[normalization], HAS_MASK=msa_mask is not None, EPS=AF2_EPS, num_warps=8, num_stages=1, **meta)
    single_launch_output(out)
    return out


def _configs() -> list[triton.Config]:
    """Candidate tiles; the first that survives pruning is the default (EVOFUSE_AUTOTUNE=0)."""
    out = []
    for tile_rows, cols_factor, block_s, block_r, warps, stages in (
        (128, 1, 32, 16, 8, 2), (128, 1, 64, 32, 8, 3), (128, 1, 32, 32, 8, 3), (128, 1, 64, 16, 8, 3),
        (128, 2, 32, 16, 8, 2), (128, 2, 64, 32, 8, 3), (128, 1, 64, 64, 8, 3), (128, 1, 32, 32, 4, 3),
        (64, 1, 64, 32, 4, 3), (64, 2, 64, 32, 8, 3), (64, 1, 32, 16, 4, 2),
        # 16 warps: 128 registers a thread and no spills for bf16 (the 8-warp 128 x 256 tile spills 72
        # bytes a thread; compiled for sm_90, read with cuobjdump)
        (128, 2, 32, 16, 16, 2), (128, 1, 64, 16, 16, 3), (128, 2, 64, 16, 16, 3),
    ):
        out.append(triton.Config({"TILE_ROWS": tile_rows, "COLS_FACTOR": cols_factor, "BLOCK_S": block_s,
                                  "BLOCK_R": block_r, "GROUP_I": 8}, num_warps=warps, num_stages=stages))
    return out


def _prune(configs, named_args, **kwargs):
    """Keeps tiles with at least 16 (i, j) pairs (tl.dot's smallest M) and at most 128 x 256 outer
    products (the fp32 accumulator lives in registers); one epilogue variant of each tile for STORE_X."""
    C = kwargs["C"]
    kept = []
    for cfg in configs:
        bi = cfg.kwargs["TILE_ROWS"] // C
        bj = bi * cfg.kwargs["COLS_FACTOR"]
        if kwargs.get("STORE_X") and cfg.kwargs["BLOCK_R"] != 16:
            continue  # no epilogue: these differ only in it
        if bi >= 1 and bi * bj >= 16 and bi * C * bj * C <= 128 * 256:
            kept.append(cfg)
    return kept


@functools.lru_cache(maxsize=None)
def _tuned_kernel():
    """The kernel autotuned on c, the output width, the normalization, the operand form and power-of-two
    buckets of S and N (GPU only; built on first use so that importing needs no device). Candidates
    that run out of shared memory (the split float32 form needs twice the operand tiles) are skipped
    by the tuner. A part of a 64-wide hidden_dim may add to its own output, so the tuner restores the
    output after each trial."""
    return triton.autotune(configs=_configs(), key=["C", "R", "S_BUCKET", "N_BUCKET", "NORM", "SPLIT", "SCALED",
                                                    "ACCUMULATE", "STORE_X"],
                           prune_configs_by={"early_config_prune": _prune}, restore_value=["o_ptr"])(_opm_kernel)


def _interpret_meta(C: int) -> dict:
    """In Triton's interpreter (CI): one small config (16 (i, j) pairs a tile, 16 rows of S a step),
    so that the awkward test shapes cross tile edges."""
    return {"TILE_ROWS": 4 * C, "COLS_FACTOR": 1, "BLOCK_S": 16, "BLOCK_R": 16, "GROUP_I": 2}


WGMMA = True  # on sm_90, 16-bit operands at hidden_dim 32 take `outer_product_mean_wgmma` (tests switch it off)
MULTIPASS = True  # hidden_dim 32 (and 64's 32-wide parts) take `_opm_multipass_kernel` (tests switch it off)


@functools.lru_cache(maxsize=None)
def _multipass_configs() -> list[triton.Config]:
    """Candidates of `_opm_multipass_kernel` at hidden_dim 32: one-float16 operands in two passes (a 128 x 256
    accumulator, 64 (i, j) pairs, 64 of out_proj's rows an epilogue step); SPLIT's halves in four (x's halves in
    shared memory, out_proj's 64-row blocks unpipelined: 32-row blocks in two stages read wrong outputs on the
    H200 at N = 97, session 16), 128 pairs or 64 (fewer registers; slower at opm-af2-main, kept for other sizes;
    16 warps, 2.39 against 1.75 ms there, dropped). The first of each form is its default. (Built once: the
    workspace's size reads them on every call; tests replace this function, so nothing derived from it is
    cached.)"""
    one = [triton.Config({"PASSES": 2, "TILE_ROWS": 128, "TILE_COLS": 256, "BLOCK_S": block_s, "BLOCK_R": 64,
                          "W_STAGES": 2, "GROUP_I": 8}, num_warps=8, num_stages=stages)
           for block_s, stages in ((64, 3), (64, 2), (32, 3))]
    split = [triton.Config({"PASSES": SPLIT_PASSES, "TILE_ROWS": tile_rows, "TILE_COLS": tile_cols, "BLOCK_S": block_s,
                            "BLOCK_R": 64, "W_STAGES": 1, "GROUP_I": 8}, num_warps=warps, num_stages=stages)
             for tile_rows, tile_cols, block_s, warps, stages in (
                 (128, 256, 64, 8, 3), (128, 256, 32, 8, 4), (128, 128, 64, 8, 3), (64, 256, 64, 8, 3))]
    return one + split


def _multipass_prune(configs, named_args, **kwargs):
    """The candidates of the operands' form: SPLIT_PASSES passes for SPLIT's halves, two otherwise."""
    return [cfg for cfg in configs if (cfg.kwargs["PASSES"] == SPLIT_PASSES) == bool(kwargs["SPLIT"])]


@functools.lru_cache(maxsize=None)
def _tuned_multipass():
    """`_opm_multipass_kernel` autotuned as `_tuned_kernel` (GPU only, built on first use)."""
    return triton.autotune(configs=_multipass_configs(), key=["C", "R", "S_BUCKET", "N_BUCKET", "NORM", "SPLIT",
                                                             "SCALED", "ACCUMULATE"],
                           prune_configs_by={"early_config_prune": _multipass_prune},
                           restore_value=["o_ptr"])(_opm_multipass_kernel)


def _multipass_interpret_meta(C: int, split: bool) -> dict:
    """In Triton's interpreter: 16 (i, j) pairs a tile, 16 MSA rows a step, 16 of out_proj's rows an
    epilogue step (tile and workspace edges crossed at the tests' shapes)."""
    passes = SPLIT_PASSES if split else 2
    return {"PASSES": passes, "TILE_ROWS": 4 * C // passes, "TILE_COLS": 4 * C, "BLOCK_S": 16, "BLOCK_R": 16,
            "W_STAGES": 1, "GROUP_I": 2}


def _pairs(meta: dict, C: int) -> int:
    """(i, j) pairs of a tile of `_opm_multipass_kernel` at `meta`."""
    return (meta["PASSES"] * meta["TILE_ROWS"] // C) * (meta["TILE_COLS"] // C)


def _workspace_size(R: int, C: int) -> int:
    """float32 elements of a program's workspace in `_opm_multipass_kernel`: R rounded up to BLOCK_R times
    the (i, j) pairs of a tile, the most over the candidate configs and the interpreter's. (Not cached: the
    tests replace the candidates, and a size kept from other candidates let programs overwrite each other's
    workspace, session 17.)"""
    metas = [cfg.kwargs for cfg in _multipass_configs()] + [_multipass_interpret_meta(C, s) for s in (False, True)]
    return max(cdiv(R, m["BLOCK_R"]) * m["BLOCK_R"] * _pairs(m, C) for m in metas)


INTERPRET_PROGRAMS = 3  # the multi-pass kernel's persistent programs in the interpreter


def _programs(device: torch.device) -> int:
    """Persistent programs of the multi-pass kernel: one per multiprocessor (queried on first use)."""
    if interpreting():
        return INTERPRET_PROGRAMS
    return multiprocessors(device)


def project(msa_repr, mask, layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias, proj_b_weight,
            proj_b_bias, maxima=False, a_passes=1, a_copy=False):
    """LayerNorm, both projections and the mask (float32 (B, S, N) or None): a and b as one contiguous
    (2, B, S, N, c) tensor; with `maxima`, also a's and b's max |value| as float32 bits, (2,) int32. a_passes > 1
    (16-bit rows with `fits(D, 2c)` only): a's memory holds (B, S, a_passes, N, c // a_passes) (`ln_linear`); with
    a_copy too, a stays as it is and (ab, that pass-major copy of a) is returned.

    One fused pass for inputs of width up to 512 (no normalized copy of the MSA in memory): 16-bit rows
    in their dtype, float32 rows split into float16 hi/lo halves on chip (`split_linear.split_ln_linear`,
    three products on tensor cores, ~2**-22, its operands from one launch of `split_ln_weights`, and the
    maxima from the same pass); wider float32 rows through `split_linear` (blocks of rows split into a float16
    copy, one cuBLAS product each), then the mask; anything else (wider 16-bit rows, a PyTorch without
    float32-output products) through the reference's first half, a block of MSA rows at a time.
    """
    B, S, N, D = msa_repr.shape
    c = proj_a_weight.shape[0]
    dtype = msa_repr.dtype
    if dtype == torch.float32 and split_linear.available(msa_repr) and split_linear.fused_rows(D):
        weights = split_linear.split_ln_weights(layer_norm_weight, layer_norm_bias, [proj_a_weight, proj_b_weight],
                                                [proj_a_bias, proj_b_bias], slots=2)
        with_maxima = maxima and not c & (c - 1)  # (the kernel's maxima take slots of a power of two)
        ab = split_linear.split_ln_linear(msa_repr, weights, mask, slot=c, eps=LAYER_NORM_EPS, amax=with_maxima)
        return (ab, weights.maxima if with_maxima else _abs_maxima(ab).view(torch.int32)) if maxima else ab
    if a_passes > 1 and not fits(D, 2 * c, dtype):
        raise ValueError("pass-major projections need 16-bit rows of a width ln_linear takes")
    if fits(D, 2 * c, dtype):  # (both projections' weights read where they are)
        ab = ln_linear(msa_repr, [as_dtype(proj_a_weight, dtype), as_dtype(proj_b_weight, dtype)],
                       [as_dtype(proj_a_bias, dtype), as_dtype(proj_b_bias, dtype)], layer_norm_weight,
                       layer_norm_bias, mask, slot=c, eps=LAYER_NORM_EPS, a_passes=a_passes, a_copy=a_copy)
        return (ab, _abs_maxima(ab).view(torch.int32)) if maxima else ab
    w = as_dtype(torch.cat([proj_a_weight, proj_b_weight]), dtype)
    bias = as_dtype(torch.cat([proj_a_bias, proj_b_bias]), dtype)
    if split_linear.available(msa_repr):
        # as split_ln_weights: the LayerNorm's and the projections' weights brought to magnitude ~1 by powers of
        # two (exact), undone in the output's scale (tiny weights would leave the float16 halves subnormal)
        s_ln, s_w = _pow2_normalizer(layer_norm_weight, layer_norm_bias), _pow2_normalizer(w)
        ln = (layer_norm_weight * s_ln, layer_norm_bias * s_ln, LAYER_NORM_EPS)
        undo = 1 / (s_ln * s_w)
        ab = torch.empty(2, B, S, N, c, dtype=dtype, device=msa_repr.device)
        y = split_linear.split_linear(msa_repr.reshape(-1, D), w * s_w, bias * (s_ln * s_w), ln=ln)
        torch.mul(y.view(B, S, N, 2, c), undo if mask is None else mask[..., None, None] * undo,
                  out=ab.permute(1, 2, 3, 0, 4))
    else:
        ab = torch.empty(2, B, S, N, c, dtype=dtype, device=msa_repr.device)
        params = [p.to(dtype) for p in (layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias,
                                        proj_b_weight, proj_b_bias)]
        rows = max(1, (32 << 20) // max(1, B * N * D * msa_repr.element_size()))  # ~32 MiB of normalized MSA a time
        with ieee_fp32_matmul():
            for s0 in range(0, S, rows):
                block_mask = None if mask is None else mask[:, s0:s0 + rows]
                ab[0, :, s0:s0 + rows], ab[1, :, s0:s0 + rows], _ = outer_product_mean_projections(
                    msa_repr[:, s0:s0 + rows], block_mask, *params)
    return (ab, _abs_maxima(ab).view(torch.int32)) if maxima else ab


def _abs_maxima(tensors) -> torch.Tensor:
    """Each tensor's max |value| in float32, a (len(tensors),) device tensor (no host synchronization)."""
    return torch.stack([torch.linalg.vector_norm(t.float(), float("inf")) for t in tensors])


def _pow2_normalizer(*tensors: torch.Tensor) -> torch.Tensor:
    """2**-ceil(log2(max |t|)) over the tensors, a one-element float32 device tensor (1 for all zeros,
    Inf or NaN): multiplying by it is exact and brings the largest magnitude into (1/2, 1]."""
    e = torch.ceil(torch.log2(_abs_maxima(tensors).max()))
    return torch.exp2(-torch.where(torch.isfinite(e), e, 0.0).clamp(-split_linear.EXP_CLAMP,
                                                                     split_linear.EXP_CLAMP)).reshape(1)


# float32 operands are scaled by 2**(SCALE_TOP - ceil(log2(max |x|))) before the float16 split: the
# largest magnitude lands at <= 2**7, so the tile sums |sum_s a b| / count <= 2**14 stay in float16's
# range in the epilogue, while small values keep ~2**-24 absolute precision (subnormal low halves)
SCALE_TOP = 7


@triton.jit
def _out_weight_offsets(d, R, C: tl.constexpr, HALVES: tl.constexpr, REORDER: tl.constexpr,
                        PASSES: tl.constexpr):
    """Where out_proj's weight (R, (p q)) holds element d of the kernels' (parts, R, C * C) layout, in units
    of its row and column strides: part k = (p half, q half); REORDER: each pass's C / PASSES rows p as the
    multi-pass kernel's float32 epilogue reads them, even q then odd q."""
    k = d // (R * C * C)
    r = (d // (C * C)) % R
    t = d % (C * C)
    if REORDER:  # t = ((pass * 2 + parity) * (C / PASSES) + p_local) * (C / 2) + q_half
        u = t % (C * C // PASSES)
        p = (t // (C * C // PASSES)) * (C // PASSES) + (u % (C * C // 2 // PASSES)) // (C // 2)
        q = 2 * (u % (C // 2)) + u // (C * C // 2 // PASSES)
    else:
        p = t // C
        q = t % C
    return r, ((k // HALVES) * C + p) * (HALVES * C) + (k % HALVES) * C + q


@triton.jit
def _out_weight_kernel(
    w_ptr, stride_wr, stride_wc,  # out_proj's weight: (R, c * c), any float dtype
    max_ptr,  # its max |w|, float32
    halves_ptr, stride_hh,  # out: (1 | 2, parts, R, C * C) float16, hi (and lo) of the weight times its scale
    e_ptr,  # out: one float32, e of the scale 2**(SCALE_TOP - e)
    R,
    C: tl.constexpr, HALVES: tl.constexpr, REORDER: tl.constexpr, PASSES: tl.constexpr, LO: tl.constexpr,
    SCALE_TOP: tl.constexpr, EXP_CLAMP: tl.constexpr, BLOCK: tl.constexpr,
):
    """BLOCK elements of the weight's halves a program, in the kernels' layout (`_out_weight_offsets`), scaled
    by 2**(SCALE_TOP - ceil(log2(max |w|))) (1 where the weight holds Inf or NaN)."""
    e = split_linear.ceil_log2(tl.load(max_ptr).to(tl.int32, bitcast=True), SCALE_TOP, EXP_CLAMP)
    d = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    ok = d < R * C * C * HALVES * HALVES
    r, col = _out_weight_offsets(d, R, C, HALVES, REORDER, PASSES)
    w = tl.load(w_ptr + r * stride_wr + col * stride_wc, mask=ok, other=0.0).to(tl.float32) * tl.math.exp2(SCALE_TOP - e)
    hi = w.to(tl.float16)
    tl.store(halves_ptr + d, hi, mask=ok)
    if LO:
        tl.store(halves_ptr + stride_hh + d, (w - hi.to(tl.float32)).to(tl.float16), mask=ok)
    if tl.program_id(0) == 0:
        tl.store(e_ptr, e)


@triton.jit
def _float16_split_kernel(
    x_ptr, stride_xt,  # a and b: (2, n) float32
    maxima_ptr,  # (2,) int32: their max |x| as float32 bits
    e_ptr,  # [e of out_proj's weight's scale, out: 1 / the product of the three scales], float32
    halves_ptr, stride_ht, stride_hh,  # out: (2, 1 | 2, n) float16, hi (and lo) of x times its scale
    n,
    LO: tl.constexpr, SCALE_TOP: tl.constexpr, EXP_CLAMP: tl.constexpr, BLOCK: tl.constexpr,
):
    """x's scale is 2**(SCALE_TOP - ceil(log2(max |x|))), 1 for a tensor holding Inf or NaN; hi = float16(x *
    scale) and, with LO, lo = float16(x * scale - hi): x to ~2**-22 as hi + lo."""
    t = tl.program_id(1)
    e = split_linear.ceil_log2(tl.load(maxima_ptr + t), SCALE_TOP, EXP_CLAMP)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    ok = offs < n
    x = tl.load(x_ptr + t * stride_xt + offs, mask=ok, other=0.0) * tl.math.exp2(SCALE_TOP - e)
    hi = x.to(tl.float16)
    tl.store(halves_ptr + t * stride_ht + offs, hi, mask=ok)
    if LO:
        tl.store(halves_ptr + t * stride_ht + stride_hh + offs, (x - hi.to(tl.float32)).to(tl.float16), mask=ok)
    if (tl.program_id(0) == 0) & (t == 0):
        e_b = split_linear.ceil_log2(tl.load(maxima_ptr + 1), SCALE_TOP, EXP_CLAMP)
        tl.store(e_ptr + 1, tl.math.exp2(e + e_b + tl.load(e_ptr) - 3 * SCALE_TOP))


def _float16_operands(ab: torch.Tensor, maxima: torch.Tensor, out_proj_weight: torch.Tensor, cs: int,
                      reorder: bool, split: bool):
    """The multiplying kernels' float16 operands from float32 ones, with no host synchronization: out_proj's
    max |w| (PyTorch), then `_out_weight_kernel` and `_float16_split_kernel`.

    ab (2, B, S, N, c) float32, contiguous: a and b, their max |value| as float32 bits in maxima (2,) int32;
    out_proj_weight (R, c * c). Each tensor x is scaled by 2**(SCALE_TOP - ceil(log2(max |x|))) (1 where it
    holds Inf or NaN) and split into float16 hi and (split) lo. Returns a's and b's halves, (1 | 2, B, S, N,
    c) each; the weight's, (1 | 2, parts, R, cs * cs) in parts of cs channels (`_out_weight_offsets`;
    `reorder`: the multi-pass float32 epilogue's column order); and inv_scale, a one-element float32 tensor,
    1 / (the product of the three scales)."""
    R = out_proj_weight.shape[0]
    halves = ab.shape[-1] // cs
    n_w = R * cs * cs * halves * halves
    h = 2 if split else 1
    w_h = empty(h, halves * halves, R, cs * cs, dtype=torch.float16, device=ab.device)
    e = empty(2, dtype=torch.float32, device=ab.device)
    w_max = torch.linalg.vector_norm(out_proj_weight, float("inf"), dtype=torch.float32)
    cached_launch(_out_weight_kernel)(
        (cdiv(n_w, 1024),), out_proj_weight, *out_proj_weight.stride(), w_max, w_h, w_h.stride(0), e, R, C=cs,
        HALVES=halves, REORDER=reorder, PASSES=SPLIT_PASSES, LO=split, SCALE_TOP=SCALE_TOP,
        EXP_CLAMP=split_linear.EXP_CLAMP, BLOCK=1024, num_warps=4)
    ab_h = empty(2, h, *ab.shape[1:], dtype=torch.float16, device=ab.device)
    n = ab[0].numel()
    cached_launch(_float16_split_kernel)(
        (cdiv(n, 1024), 2), ab, ab.stride(0), maxima, e, ab_h, ab_h.stride(0), ab_h.stride(1), n, LO=split,
        SCALE_TOP=SCALE_TOP, EXP_CLAMP=split_linear.EXP_CLAMP, BLOCK=1024)
    return ab_h[0], ab_h[1], w_h, e[1:]


def pair_scale(mask: torch.Tensor | None, B: int, S: int, N: int, normalization: str,
               like: torch.Tensor) -> torch.Tensor:
    """The normalization's per-(i, j) factor (B, N, N) float32 (any strides) from the mask (B, S, N) or
    None: seed 1 / max(count_i, 1), af2 1 / (eps + count_ij), boltz 1 / max(count_ij, 1). On `like`'s
    device: one launch of `_pair_scale_kernel` on real tensors (the forward's and the backward's kernels
    read it instead of counting), PyTorch's ops while torch.compile traces."""
    if mask is not None and mask.dtype != torch.float32:
        mask = mask.float()
    if not eager(like):
        counts = torch.ones(B, S, N, device=like.device) if mask is None else mask
        if normalization == "seed":
            return (1 / counts.sum(1).clamp(min=1))[:, :, None].expand(-1, -1, N)
        with ieee_fp32_matmul():
            pairs = torch.einsum("bsi,bsj->bij", counts, counts)
        return 1 / (AF2_EPS + pairs) if normalization == "af2" else 1 / pairs.clamp(min=1)
    sc = empty(B, N, N, dtype=torch.float32, device=like.device)
    m, m_strides = (sc, (0, 0, 0)) if mask is None else (mask, mask.stride())
    block = 16 if interpreting() else 32
    cached_launch(_pair_scale_kernel)((cdiv(N, block) ** 2, B), m, *m_strides, sc, *sc.stride(), S, N,
                                      NORM=_NORM_CODE[normalization], HAS_MASK=mask is not None, EPS=AF2_EPS,
                                      BLOCK_I=block, BLOCK_J=block, BLOCK_S=32)
    return sc


def outer_product_mean_triton(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, proj_a_weight,
                              proj_a_bias, proj_b_weight, proj_b_bias, out_proj_weight, out_proj_bias,
                              normalization="seed", precision="default", save=False):
    """Fused forward; arguments as `evofuse.functional.outer_product_mean` (already validated). With
    `save` (training) returns (out, ab, scale): ab (2, B, S, N, c) in msa_repr's dtype, the masked
    projections, where the backward's `ops.layer_norm_linear.ln_linear_backward` takes them
    (`ln_linear_backward_fits`), else empty; scale (B, N, N) float32, the normalization's per-pair factor."""
    B, S, N, D = msa_repr.shape
    c = proj_a_weight.shape[0]
    R = out_proj_weight.shape[0]
    dtype = msa_repr.dtype
    device = msa_repr.device
    keep = save and ln_linear_backward_fits(dtype, D, c)
    if B * N * N * R == 0:
        out = empty(B, N, N, R, dtype=dtype, device=device)
        return (out, out.new_empty(0), out.new_empty(0, dtype=torch.float32)) if save else out
    small = _small_meta(S, N, D, c, dtype)
    if small is not None:
        out = _outer_product_mean_small(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, proj_a_weight,
                                        proj_a_bias, proj_b_weight, proj_b_bias, out_proj_weight, out_proj_bias,
                                        normalization, small)
        if not save:
            return out
        mask = None if msa_mask is None else msa_mask.to(torch.float32)
        ab = (project(msa_repr, mask, layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias, proj_b_weight,
                      proj_b_bias) if keep else out.new_empty(0))
        return out, ab, pair_scale(mask, B, S, N, normalization, out)
    mask = None if msa_mask is None else as_dtype(msa_mask, torch.float32)
    scaled = dtype == torch.float32
    split = scaled and precision == "default"
    # hidden_dim 64 runs as four 32-wide parts (p and q halves), each with its block of out_proj's weight,
    # summed in float32 (the kernels' tiles hold (i p) x (j q) outer products: 64-wide ones do not fit); the
    # one-pass kernel takes float32 at the default precision in parts of at most SPLIT_PART channels
    cs = min(c, 32 if MULTIPASS or not split else SPLIT_PART)
    multipass = MULTIPASS and cs == 32
    halves = c // cs
    parts = halves * halves
    # Hopper's Gluon kernel: 16-bit forwards at hidden_dim 32, a written pass-major by the projections (training:
    # a pass-major copy beside a as it is, which the backward reads)
    wgmma = (not scaled and MULTIPASS and WGMMA and fits(D, 2 * c, dtype)
             and outer_product_mean_wgmma is not None and outer_product_mean_wgmma.supported(msa_repr, c, R))
    if scaled:  # float16 operands; "default" keeps a low half too (three products per pair of operands)
        ab, maxima = project(msa_repr, mask, layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias,
                             proj_b_weight, proj_b_bias, maxima=True)
        kept = ab if keep else None
        # (multi-pass, split: each pass's columns (p q) of w as the kernel's epilogue reads them, even q then odd q)
        a_h, b_h, w_h, inv_scale = _float16_operands(ab, maxima, out_proj_weight, cs, multipass and split, split)
        del ab  # the float32 projections are freed before the output is allocated
    else:
        ab = project(msa_repr, mask, layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias,
                     proj_b_weight, proj_b_bias, a_passes=2 if wgmma else 1, a_copy=wgmma and keep)
        a_major = None  # the Gluon kernel's pass-major a
        if wgmma:
            ab, a_major = ab if keep else (ab, ab[0])
        kept = ab if keep else None
        a_h, b_h = ab[:1], ab[1:]
        w_parts = out_proj_weight[None] if parts == 1 else out_proj_weight.reshape(R, halves, cs, halves, cs).permute(
            1, 3, 0, 2, 4).reshape(parts, R, cs * cs)
        w_h = as_dtype(w_parts, dtype).contiguous()[None]
        inv_scale = a_h  # unused
    # the halves' strides (hi to lo; 0 where there is one)
    (a, a_lo), (b, b_lo), (w, w_lo) = ((h[0], h[-1]) for h in (a_h, b_h, w_h))
    stride_ah, stride_bh, stride_wh = (h.stride(0) if h.shape[0] == 2 else 0 for h in (a_h, b_h, w_h))
    out = empty(B, N, N, R, dtype=dtype, device=device)
    wb = out_proj_bias  # (any float dtype: the kernels read it in float32)
    scale = pair_scale(mask, B, S, N, normalization, a)  # (B, N, N): the kernels count no mask in their loops
    consts = {"C": cs, "NORM": _NORM_CODE[normalization], "SPLIT": split, "SCALED": scaled}
    if parts == 1 or dtype == torch.float32:
        rows, partial = N, None  # float32 sums the parts in the output itself
    else:  # 16-bit outputs: float32 partial sums for a block of rows i at a time
        rows = max(1, PARTIAL_BYTES // (B * N * R * 4))
        partial = torch.empty(B, min(rows, N), N, R, dtype=torch.float32, device=device)
    # float32 at the default precision multiplies at most SPLIT_CHUNK_S MSA rows a launch: the tensor
    # cores' float32 accumulation over ~16k rows measured 1.7e-5 relative error (contract: 1e-5); each
    # chunk adds its normalized product to the output, as the parts of hidden_dim 64 do
    chunk = SPLIT_CHUNK_S if split else S
    steps = [(k, s0) for k in range(parts) for s0 in range(0, S, chunk)]
    if multipass and not wgmma:  # a persistent program's workspace each
        ws = torch.empty(_programs(device), _workspace_size(R, cs), dtype=torch.float32, device=device)
    whole = parts == 1  # one part of every channel: the operands as they are, not sliced
    for i0 in range(0, N, rows):
        n = min(rows, N - i0)
        out_rows = out if n == N else out[:, i0:i0 + n]
        acc = out_rows if partial is None else partial[:, :n]
        sc = scale[:, i0:] if i0 else scale
        for step, (k, s0) in enumerate(steps):
            ph, qh = divmod(k, halves)
            p_cols, q_cols = slice(ph * cs, (ph + 1) * cs), slice(qh * cs, (qh + 1) * cs)
            s1 = min(S, s0 + chunk)
            rows_s = slice(None) if s1 - s0 == S else slice(s0, s1)
            a_k = a if whole and n == N and s1 - s0 == S else a[:, rows_s, i0:i0 + n, p_cols]
            b_k = b if whole and s1 - s0 == S else b[:, rows_s, :, q_cols]
            w_k = w[k]
            last = step == len(steps) - 1
            dst = out_rows if last else acc
            flags = {"ACCUMULATE": step > 0, "ADD_BIAS": last}
            if wgmma:
                outer_product_mean_wgmma.outer_products_wgmma(a_major.view(a.shape), b, sc, w_k, wb, out,
                                                              consts["NORM"])
                continue
            if multipass:
                args = (a_k, a_k.stride(0), stride_ah, *a_k.stride()[1:3], b_k, b_k.stride(0), stride_bh,
                        *b_k.stride()[1:3], sc, *sc.stride(), w_k, stride_wh, *w_k.stride(), wb, inv_scale, ws,
                        ws.stride(0), dst, *dst.stride(), acc, *acc.stride(), B, s1 - s0, n, N, R, bucket(s1 - s0),
                        bucket(N))

                def grid(meta, n=n):
                    tiles = cdiv(n, meta["PASSES"] * meta["TILE_ROWS"] // cs) * cdiv(N, meta["TILE_COLS"] // cs) * B
                    return (min(tiles, ws.shape[0]),)

                launch(_opm_multipass_kernel, _tuned_multipass, _multipass_configs, _multipass_prune, grid, args,
                       consts | flags, _multipass_interpret_meta(cs, split))
                continue
            a_lo_k = a_lo[:, rows_s, i0:i0 + n, p_cols] if split else a_k  # (unused without SPLIT)
            b_lo_k = b_lo[:, rows_s, :, q_cols] if split else b_k
            args = (a_k, *a_k.stride()[:3], b_k, *b_k.stride()[:3], sc, *sc.stride(), w_k, *w_k.stride(), wb, a_lo_k,
                    b_lo_k, w_lo[k], inv_scale, dst, *dst.stride(), acc, *acc.stride(), n, N, R, s1 - s0,
                    bucket(s1 - s0), bucket(N))

            def grid(meta, n=n):
                bi = meta["TILE_ROWS"] // cs
                return (cdiv(n, bi) * cdiv(N, bi * meta["COLS_FACTOR"]), B)

            launch(_opm_kernel, _tuned_kernel, _configs, _prune, grid, args, consts | flags | {"STORE_X": False},
                   _interpret_meta(cs))
    if save:
        return out, out.new_empty(0) if kept is None else kept, scale
    return out


# ---------------------------------------------------------------- the backward's kernels (16-bit)


def backward_fused(dtype: torch.dtype, c: int) -> bool:
    """Whether the backward's outer products and dX take the kernels below (16-bit, hidden_dim <= 32)."""
    return dtype in (torch.float16, torch.bfloat16) and c in FAST_HIDDEN_DIMS and c <= 32


def outer_products(a_rows: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """X[b, (i p), (j q)] = scale[b, i, j] sum_s a_rows[b, s, i, p] b[b, s, j, q] (16-bit, float32 sums):
    (B, n*c, N*c), the normalized outer products of a block of rows i in the layout of a plain product
    a_rows^T b. a_rows and b are the masked projections (channel stride 1), scale (B, n, N) float32 (any
    strides) the normalization's per-pair factor. For float16, whose range the unnormalized sums can
    pass; bfloat16 takes cuBLAS's product and the scale on the gradient's side (`outer_product_weight_grad`)."""
    B, S, n, c = a_rows.shape
    N = b.shape[2]
    x = empty(B, n * c, N * c, dtype=a_rows.dtype, device=a_rows.device)
    args = (a_rows, *a_rows.stride()[:3], b, *b.stride()[:3], scale, *scale.stride(), a_rows, 0, 0, b, a_rows, b, b,
            b, x, *x.stride(), 0, x, 0, 0, 0, 0, n, N, 1, S, bucket(S), bucket(N))
    consts = {"C": c, "NORM": 0, "SPLIT": False, "SCALED": False, "ACCUMULATE": False, "ADD_BIAS": False,
              "STORE_X": True}

    def grid(meta):
        bi = meta["TILE_ROWS"] // c
        return (cdiv(n, bi) * cdiv(N, bi * meta["COLS_FACTOR"]), B)

    launch(_opm_kernel, _tuned_kernel, _configs, _prune, grid, args, consts, _interpret_meta(c))
    return x


def _dx_configs() -> list[triton.Config]:
    """Tiles of (i, j) pairs x (p q) columns and programs a multiprocessor for `_opm_dx_kernel` (BLOCK_R is
    the launch's); the first that survives is the default (opm-af2-main on the H200, run 1 of session 13:
    0.070 ms, the others 0.080-0.105)."""
    return [triton.Config({"BLOCK_I": bi, "BLOCK_J": bj, "BLOCK_K": bk, "PROGRAMS_PER_SM": per_sm}, num_warps=w,
                          num_stages=st)
            for bi, bj, bk, per_sm, w, st in ((4, 16, 256, 2, 4, 3), (4, 16, 128, 3, 4, 3), (4, 32, 128, 2, 8, 3),
                                              (2, 32, 256, 2, 4, 3), (4, 16, 256, 2, 4, 2), (4, 32, 64, 4, 4, 3))]


# shared memory `_opm_dx_kernel` may take: W's column block, its pipelined Gs tiles and the tile's store
DX_SHARED_BYTES = 200 * 1024


def _dx_shared(cfg: triton.Config, c: int, R: int) -> int:
    """The shared memory of `_opm_dx_kernel` at `cfg` (16-bit operands), as Triton lays it out: the
    resident W block, num_stages Gs tiles and one output tile for the store."""
    k = cfg.kwargs
    pairs, block_k, block_r = k["BLOCK_I"] * k["BLOCK_J"], min(k["BLOCK_K"], c * c), max(16, next_pow2(R))
    return 2 * (block_r * block_k + cfg.num_stages * pairs * block_r + pairs * block_k)


def _dx_prune(configs, named_args, **kwargs):
    """Column blocks no wider than c*c (c = 8 has 64 columns) whose shared memory fits at this R (the
    defaults' fit for R <= 256; a narrower column block and 2 stages otherwise)."""
    c, R = kwargs["C"], kwargs["BLOCK_R"]
    kept = [cfg for cfg in configs if cfg.kwargs["BLOCK_K"] <= c * c and _dx_shared(cfg, c, R) <= DX_SHARED_BYTES]
    if kept:
        return kept
    last = triton.Config(dict(configs[0].kwargs, BLOCK_I=4, BLOCK_J=8, BLOCK_K=min(64, c * c), PROGRAMS_PER_SM=2),
                         num_warps=4, num_stages=2)
    return [last]


@functools.lru_cache(maxsize=None)
def _tuned_dx():
    """`_opm_dx_kernel` autotuned on c and the output width (GPU only)."""
    return triton.autotune(configs=_dx_configs(), key=["C", "BLOCK_R"],
                           prune_configs_by={"early_config_prune": _dx_prune})(_opm_dx_kernel)


# the widest out_proj `_opm_dx_kernel` takes (its W block and Gs tiles in shared memory); wider ones: cuBLAS
DX_MAX_R = 512


def outer_product_grad(gs: torch.Tensor, weight: torch.Tensor, c: int) -> torch.Tensor:
    """dX[b, (i p), (j q)] = sum_r gs[b, i, j, r] weight[r, p*c + q]: (B, n*c, N*c) in gs's dtype, from the
    normalized output gradient gs (B, n, N, R) 16-bit (any strides) of a block of rows i and out_proj's
    weight (R, c*c) (float32 sums). R > DX_MAX_R: one cuBLAS product and a rearranging copy."""
    B, n, N, R = gs.shape
    w = as_dtype(weight, gs.dtype)
    if R > DX_MAX_R:
        return (gs.reshape(-1, R) @ w).view(B, n, N, c, c).transpose(2, 3).reshape(B, n * c, N * c)
    dx = empty(B, n * c, N * c, dtype=gs.dtype, device=gs.device)
    args = (gs, *gs.stride(), w, *w.stride(), dx, *dx.stride(), B, n, N, R)
    sms = multiprocessors(gs.device) if gs.is_cuda and not interpreting() else 3

    def grid(meta):
        n_k = c * c // meta["BLOCK_K"]
        tiles = B * cdiv(n, meta["BLOCK_I"]) * cdiv(N, meta["BLOCK_J"])
        return (n_k * max(1, min(tiles, sms * meta["PROGRAMS_PER_SM"] // n_k)),)

    interpret = {"BLOCK_I": 2, "BLOCK_J": 4, "BLOCK_K": min(64, c * c), "PROGRAMS_PER_SM": 2}
    launch(_opm_dx_kernel, _tuned_dx, _dx_configs, _dx_prune, grid, args, {"C": c, "BLOCK_R": max(16, next_pow2(R))},
           interpret)
    return dx


def _dw_configs() -> list[triton.Config]:
    """Tiles of out_proj's rows r x columns (p q) x pairs a step for `_opm_dw_kernel`; the first that
    survives is the default."""
    return [triton.Config({"BLOCK_R": br, "BLOCK_K": bk, "BLOCK_P": bp}, num_warps=w, num_stages=st)
            for br, bk, bp, w, st in ((128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 128, 8, 3),
                                      (128, 256, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4))]


def _dw_prune(configs, named_args, **kwargs):
    """Column blocks no wider than c*c (c = 8 has 64 columns)."""
    cc = kwargs["C"] * kwargs["C"]
    return [cfg for cfg in configs if cfg.kwargs["BLOCK_K"] <= cc] or [
        triton.Config(dict(configs[0].kwargs, BLOCK_K=cc), num_warps=4, num_stages=3)]


@functools.lru_cache(maxsize=None)
def _tuned_dw():
    """`_opm_dw_kernel` autotuned on c and the output width (GPU only); the partial sums are restored after each
    candidate's runs."""
    return triton.autotune(configs=_dw_configs(), key=["C", "R"], prune_configs_by={"early_config_prune": _dw_prune},
                           restore_value=["ws_ptr"])(_opm_dw_kernel)  # (the candidates' runs accumulate there)


def _dw_splits(device: torch.device) -> int:
    """Runs of pairs `_opm_dw_kernel` sums apart: a quarter of the multiprocessors (each split takes
    4-8 programs of the usual tiles), 3 in the interpreter; fixed for a device, so the sums' order is."""
    return 3 if interpreting() else cdiv(multiprocessors(device), 4)


def weight_grad_partials(R: int, c: int, device: torch.device) -> torch.Tensor:
    """The float32 buffer of `outer_product_weight_grad`'s partial sums, (splits, R, c*c), uninitialized (the
    first block writes every element); out_proj's weight gradient is its sum over dim 0, once after the
    last block (a fixed order: bit-reproducible)."""
    return empty(_dw_splits(device), R, c * c, dtype=torch.float32, device=device)


def outer_product_weight_grad(g: torch.Tensor, x: torch.Tensor, c: int, partials: torch.Tensor,
                              accumulate: bool) -> None:
    """out_proj's weight gradient from a block of rows i, dW[r, p*c + q] = sum_(b, i, j) g[b, i, j, r]
    x[b, i*c + p, j*c + q], as partial sums over fixed runs of pairs written into `partials`
    (`weight_grad_partials`), or added to the earlier blocks' there with `accumulate` (no sum and add a
    block on the host). The normalization's scale on one side (Gs and the plain outer products, cuBLAS's
    a_rows^T b; or g and `outer_products`). g (B, n, N, R) 16-bit (any strides), x (B, n*c, N*c) g's dtype."""
    B, n, N, R = g.shape
    splits = partials.shape[0]
    args = (g, *g.stride(), x, *x.stride(), partials, partials.stride(0), partials.stride(1), n, N, R, B * n * N)

    def grid(meta):
        return (cdiv(R, meta["BLOCK_R"]) * (c * c // meta["BLOCK_K"]), splits)

    interpret = {"BLOCK_R": 16, "BLOCK_K": min(64, c * c), "BLOCK_P": 16}
    launch(_opm_dw_kernel, _tuned_dw, _dw_configs, _dw_prune, grid, args, {"C": c, "ACCUMULATE": accumulate},
           interpret)


def _gs_block_p() -> int:
    return 16 if interpreting() else 32


def gs_blocks(pairs: int) -> int:
    """The programs of `normalized_grad` over `pairs` pairs (b, i, j): the rows of its partial sums."""
    return cdiv(pairs, _gs_block_p())


def normalized_grad(g: torch.Tensor, scale: torch.Tensor, scaled_sum: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Gs = g * scale[..., None] rounded to g's dtype (float32 products), (B, n, N, R) contiguous, from the
    output gradient g (B, n, N, R) and the per-pair scale (B, n, N) float32 (any strides); and the partial sums
    over (b, i, j) of Gs (`scaled_sum`: af2's bias gradient) or of g (the other normalizations'),
    (gs_blocks(B*n*N), R) float32, one row a block of pairs, to be added in a fixed order
    (`ops.partial_sums.sum_partials`, or a sum over dim 0)."""
    B, n, N, R = g.shape
    pairs = B * n * N
    blocks = gs_blocks(pairs)
    gs = empty(B, n, N, R, dtype=g.dtype, device=g.device)
    sums = empty(blocks, R, dtype=torch.float32, device=g.device)
    cached_launch(_opm_gs_kernel)((blocks,), g, *g.stride(), scale, *scale.stride(), gs, sums, sums.stride(0), n, N,
                                  R, pairs, SCALED_SUM=scaled_sum, BLOCK_P=_gs_block_p(), BLOCK_R=min(128, next_pow2(R)))
    return gs, sums

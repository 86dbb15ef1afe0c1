"""The pair's projection to the heads: (LayerNorm(pair) when the module has one) @ W^T + bias, (B, N, N, P) ->
(B, h, N, N), head major, once per batch element: row attention's pair bias and pair-weighted averaging's
head logits.

`pair_heads_kernel` reads all P channels of a block of pairs once and writes every head's column of it: one
tl.dot with the heads padded to 16 columns (the LayerNorm folded into it), in one pass over the pair, near the
pass's memory floor where cuBLAS, given a handful of output columns, is several times slower.
`pair_heads_backward` (the custom op `evofuse::pair_heads_backward`) takes every gradient in one pass over the
pair the same way: the pair's (through its LayerNorm), and each program's partial sums of the weight's, the
bias's and the LayerNorm parameters', added in a fixed order. Float32 pairs take 3xTF32 products (the numerics
contract's default precision); 16-bit pairs' products are exact in the float32 sums.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._runtime import cdiv, custom_op, dot_precision, multiprocessors, next_pow2, traced
from ..reference import LAYER_NORM_EPS
from .layer_norm_rows import centred_rows, layer_norm_rows


@triton.jit
def pair_heads_kernel(
    x_ptr, stride_xb, stride_xij, stride_xp,  # the pair, (i, j) as one index: (B, N*N, P)
    lnw_ptr, lnb_ptr,  # HAS_NORM: the pair's LayerNorm weight and bias (P,)
    w_ptr, stride_wh, stride_wp,  # the projection: (h, P)
    bias_ptr,  # HAS_BIAS: (h,)
    z_ptr, stride_zb, stride_zh,  # out: (B, h, N*N) in the pair's dtype, (i, j) contiguous
    NN, P: tl.constexpr, H, eps,  # NN = N*N pairs a batch element; P the channels (no masks where P = BLOCK_P)
    PROGRAMS,  # programs a batch element
    HAS_NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PRECISION: tl.constexpr,  # tl.dot's input_precision for float32 pairs
    BLOCK_IJ: tl.constexpr,  # pairs (i, j) a step
    BLOCK_P: tl.constexpr,  # the pair's channels, padded
    BLOCK_H: tl.constexpr,  # the heads, padded to at least 16 (with HAS_NORM, more than H: one column of sums)
):
    """z[b, h, ij] = LayerNorm(x[b, ij]) . w[h] + bias[h] (x[b, ij] itself without HAS_NORM) for the blocks of
    BLOCK_IJ consecutive pairs ij = i*N + j of one batch element numbered pid, pid + PROGRAMS, ..., the sums in
    float32. Each head's BLOCK_IJ outputs are consecutive, so that their stores are vectorized.

    The LayerNorm is folded into the product, LayerNorm(x) . w[h] = rstd (x - mean) . (lnw * w[h]) + lnb . w[h]:
    the centred channels xc enter the product rounded to the pair's dtype (each term as accurate as the
    reference's LayerNorm output rounded to it), against the folded weight lnw * w as two halves in that dtype
    (float32's accuracy) and a column of ones, whose product is the sum of the rounded xc: the rounding of the mean
    taken back (shift), so that a row of equal channels gives the LayerNorm's bias alone, as in exact arithmetic.
    The weight is folded once a program, and the programs are persistent."""
    b = tl.program_id(1).to(tl.int64)
    dtype = x_ptr.dtype.element_ty
    offs_p = tl.arange(0, BLOCK_P)
    p_ok = offs_p < P
    offs_h = tl.arange(0, BLOCK_H)
    h_ok = offs_h < H
    w_t = tl.load(w_ptr + offs_h[None, :] * stride_wh + offs_p[:, None] * stride_wp,
                  mask=h_ok[None, :] & p_ok[:, None], other=0.0).to(tl.float32)  # [BLOCK_P, BLOCK_H]
    if HAS_NORM:
        lnw = tl.load(lnw_ptr + offs_p, mask=p_ok, other=0.0).to(tl.float32)
        lnb = tl.load(lnb_ptr + offs_p, mask=p_ok, other=0.0).to(tl.float32)
        sums = (offs_h == H)[None, :] & p_ok[:, None]  # [BLOCK_P, BLOCK_H]: column H, the rows' sums
        w_f = tl.where(sums, 1.0, lnw[:, None] * w_t)  # the folded weight
        w_sum = tl.sum(w_f, axis=0)  # [BLOCK_H]
        z_lnb = tl.sum(lnb[:, None] * w_t, axis=0)  # [BLOCK_H]: lnb . w
    for blk in range(tl.program_id(0), tl.cdiv(NN, BLOCK_IJ), PROGRAMS):
        offs = (blk * BLOCK_IJ + tl.arange(0, BLOCK_IJ)).to(tl.int64)  # [BLOCK_IJ] (below N*N < 2**31)
        ok = offs < NN
        rows = x_ptr + b * stride_xb + offs * stride_xij  # [BLOCK_IJ]
        x = tl.load(rows[:, None] + offs_p.to(tl.int64)[None, :] * stride_xp, mask=ok[:, None] & p_ok[None, :],
                    other=0.0)  # [BLOCK_IJ, BLOCK_P]
        if HAS_NORM:
            xc, var = centred_rows(x.to(tl.float32), p_ok[None, :], P, True)  # [BLOCK_IJ, BLOCK_P], [BLOCK_IJ]
            z = _folded_product(xc.to(dtype), w_f, PRECISION)  # [BLOCK_IJ, BLOCK_H]
            shift = tl.sum(tl.where((offs_h == H)[None, :], z, 0.0), axis=1) / P  # [BLOCK_IJ] the mean of xc
            var = tl.maximum(var - shift * shift, 0.0)  # (about the mean of the rounded xc)
            z = (z - shift[:, None] * w_sum[None, :]) * (1.0 / tl.sqrt(var + eps))[:, None] + z_lnb[None, :]
        else:
            z = tl.dot(x, w_t.to(dtype), input_precision=PRECISION)  # [BLOCK_IJ, BLOCK_H]
        if HAS_BIAS:
            z += tl.load(bias_ptr + offs_h, mask=h_ok, other=0.0).to(tl.float32)[None, :]
        out = z_ptr + b * stride_zb + offs[:, None] + offs_h.to(tl.int64)[None, :] * stride_zh  # [BLOCK_IJ, BLOCK_H]
        tl.store(out, z.to(z_ptr.dtype.element_ty), mask=ok[:, None] & h_ok[None, :])


@triton.jit
def _folded_product(x, w, PRECISION: tl.constexpr):
    """x @ w for x [rows, BLOCK_P] in the pair's dtype and float32 w [BLOCK_P, BLOCK_H], in float32: one product
    for float32 x, else w's high and low halves in x's dtype, two products (w to ~16 bits more than the dtype)."""
    if x.dtype == tl.float32:
        return tl.dot(x, w, input_precision=PRECISION)
    high = w.to(x.dtype)
    return tl.dot(x, (w - high.to(tl.float32)).to(x.dtype), tl.dot(x, high))


@triton.jit
def pair_heads_backward_kernel(
    x_ptr, stride_xb, stride_xij, stride_xp,  # the pair, (i, j) as one index: (B, N*N, P)
    lnw_ptr, lnb_ptr,  # HAS_NORM: the pair's LayerNorm weight and bias (P,)
    w_ptr, stride_wh, stride_wp,  # the projection: (h, P)
    g_ptr, stride_gb, stride_gh, stride_gij,  # the output's gradient: (B, h, N*N), any float dtype
    dx_ptr, stride_db, stride_dij, stride_dp,  # STORE_DX: out: the pair's gradient (B, N*N, P)
    part_ptr, stride_pg,  # out: partial sums (programs, h*P + 2P + h) float32: dW (h, P), d_lnw, d_lnb, d_bias
    NN, P: tl.constexpr, H, eps,  # NN = N*N pairs a batch element; P the channels (constant: no masks where P = BLOCK_P)
    PROGRAMS,  # programs a batch element
    HAS_NORM: tl.constexpr,
    STORE_DX: tl.constexpr,
    PRECISION: tl.constexpr,  # tl.dot's input_precision for float32 pairs
    BLOCK_IJ: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_H: tl.constexpr,  # the heads, padded to at least 16
):
    """For the blocks of pairs pid, pid + PROGRAMS, ... of one batch element: the pair's gradient (through the
    LayerNorm with HAS_NORM, recomputing its statistics) and this program's sums over its pairs of the weight's,
    the bias's and the LayerNorm parameters' gradients, in float32, in a fixed order (no atomics). The output's
    gradient g enters the products rounded to the pair's dtype (as autograd of the reference rounds it).

    The sums over pairs are kept as matrix products and per-lane partial sums, reduced across the block once at
    the end: with dxn = g w, d_lnb = sum(dxn) = (sum g) w and d_lnw = sum(dxn * xhat) = sum_h w[h] * (g^T xhat)[h]
    (xhat split into two 16-bit halves for 16-bit pairs, so that the product keeps float32's accuracy)."""
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    dtype = x_ptr.dtype.element_ty
    offs_p = tl.arange(0, BLOCK_P)
    p_ok = offs_p < P
    offs_h = tl.arange(0, BLOCK_H)
    h_ok = offs_h < H
    w = tl.load(w_ptr + offs_h[:, None] * stride_wh + offs_p[None, :] * stride_wp,
                mask=h_ok[:, None] & p_ok[None, :], other=0.0).to(dtype)  # [BLOCK_H, BLOCK_P]
    acc_w = tl.zeros((BLOCK_H, BLOCK_P), dtype=tl.float32)  # g^T xn
    acc_gx = tl.zeros((BLOCK_H, BLOCK_P), dtype=tl.float32)  # HAS_NORM: g^T xhat
    acc_g = tl.zeros((BLOCK_IJ, BLOCK_H), dtype=tl.float32)  # g, lane by lane
    acc_gr = tl.zeros((BLOCK_IJ, BLOCK_H), dtype=tl.float32)  # HAS_NORM: g rounded, lane by lane
    if HAS_NORM:
        lnw = tl.load(lnw_ptr + offs_p, mask=p_ok, other=0.0).to(tl.float32)
        lnb = tl.load(lnb_ptr + offs_p, mask=p_ok, other=0.0).to(tl.float32)
    x_next, g_next = _load_pairs(x_ptr, stride_xb, stride_xij, stride_xp, g_ptr, stride_gb, stride_gh, stride_gij,
                                 b, pid, NN, P, H, BLOCK_IJ, BLOCK_P, BLOCK_H)
    for blk in range(pid, tl.cdiv(NN, BLOCK_IJ), PROGRAMS):
        x, g = x_next, g_next  # [BLOCK_IJ, BLOCK_P], [BLOCK_IJ, BLOCK_H] float32
        x_next, g_next = _load_pairs(x_ptr, stride_xb, stride_xij, stride_xp, g_ptr, stride_gb, stride_gh, stride_gij,
                                     b, blk + PROGRAMS, NN, P, H, BLOCK_IJ, BLOCK_P, BLOCK_H)
        acc_g += g
        g = g.to(dtype)
        dxn = tl.dot(g, w, input_precision=PRECISION)  # [BLOCK_IJ, BLOCK_P]
        if HAS_NORM:
            xhat, rstd, xn = layer_norm_rows(x.to(tl.float32), p_ok, P, eps, lnw, lnb, dtype)
            acc_w = tl.dot(tl.trans(g), xn.to(dtype), acc_w, input_precision=PRECISION)  # [BLOCK_H, BLOCK_P]
            acc_gr += g.to(tl.float32)
            high = xhat.to(dtype)
            acc_gx = tl.dot(tl.trans(g), high, acc_gx, input_precision=PRECISION)
            if dtype != tl.float32:
                acc_gx = tl.dot(tl.trans(g), (xhat - high.to(tl.float32)).to(dtype), acc_gx)
            dxhat = dxn * lnw[None, :]
            c1 = tl.sum(dxhat * xhat, axis=1) / P
            c2 = tl.sum(dxhat, axis=1) / P
            dx = (dxhat - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        else:
            acc_w = tl.dot(tl.trans(g), x, acc_w, input_precision=PRECISION)
            dx = dxn
        if STORE_DX:
            offs = (blk * BLOCK_IJ + tl.arange(0, BLOCK_IJ)).to(tl.int64)  # [BLOCK_IJ] (below N*N < 2**31)
            d_rows = dx_ptr + b * stride_db + offs * stride_dij  # [BLOCK_IJ]
            tl.store(d_rows[:, None] + offs_p.to(tl.int64)[None, :] * stride_dp, dx.to(dx_ptr.dtype.element_ty),
                     mask=(offs < NN)[:, None] & p_ok[None, :])
    row = part_ptr + (b * PROGRAMS + pid) * stride_pg  # this program's sums, one run: [dW | d_lnw | d_lnb | d_bias]
    tl.store(row + offs_h[:, None] * P + offs_p[None, :], acc_w, mask=h_ok[:, None] & p_ok[None, :])
    w = w.to(tl.float32)
    tl.store(row + H * P + offs_p, tl.sum(acc_gx * w, axis=0), mask=p_ok)  # d_lnw
    tl.store(row + (H + 1) * P + offs_p, tl.sum(tl.sum(acc_gr, axis=0)[:, None] * w, axis=0), mask=p_ok)  # d_lnb
    tl.store(row + (H + 2) * P + offs_h, tl.sum(acc_g, axis=0), mask=h_ok)  # d_bias


@triton.jit
def _load_pairs(x_ptr, stride_xb, stride_xij, stride_xp, g_ptr, stride_gb, stride_gh, stride_gij, b, blk, NN, P, H,
                BLOCK_IJ: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_H: tl.constexpr):
    """The pairs of block blk of batch element b (zeros past the last pair): x [BLOCK_IJ, BLOCK_P] in the pair's
    dtype, and the output's gradient g [BLOCK_IJ, BLOCK_H] in float32."""
    offs = (blk * BLOCK_IJ + tl.arange(0, BLOCK_IJ)).to(tl.int64)  # [BLOCK_IJ] (below N*N < 2**31)
    ok = offs < NN
    offs_p = tl.arange(0, BLOCK_P)
    offs_h = tl.arange(0, BLOCK_H)
    x = tl.load((x_ptr + b * stride_xb + offs * stride_xij)[:, None] + offs_p.to(tl.int64)[None, :] * stride_xp,
                mask=ok[:, None] & (offs_p < P)[None, :], other=0.0)
    g = tl.load(g_ptr + b * stride_gb + offs[:, None] * stride_gij + offs_h.to(tl.int64)[None, :] * stride_gh,
                mask=ok[:, None] & (offs_h < H)[None, :], other=0.0).to(tl.float32)
    return x, g


# The pass is bound by memory latency, not by instructions: the most bytes in flight a multiprocessor win, so the
# forward runs a few persistent programs a multiprocessor (each folds the weight once) over large steps, and the
# backward one wave of programs whose partial sums are added after. The sizes below were the fastest of those timed.
TILE = 8192  # elements (pairs x channels) a step of the forward, 4 warps
FORWARD_PROGRAMS_PER_SM = 4  # the forward's persistent programs (each folds the weight once)
BACKWARD_TILE_BYTES = 8192  # the pair's bytes a step of the backward
BACKWARD_WARPS = 4
PROGRAMS_PER_SM = 2  # the backward's programs: one wave, their partial sums added by torch.sum


def pair_heads_tiles(N: int, P: int, H: int, tile: int = TILE, columns: int = 0) -> dict:
    """BLOCK_IJ, BLOCK_P and BLOCK_H of the kernels: all P channels of tile // P pairs a step, every head and
    `columns` more (tl.dot takes at least 16 rows, columns and terms)."""
    block_p = max(16, next_pow2(P))
    return dict(BLOCK_IJ=max(16, min(next_pow2(N * N), tile // block_p)), BLOCK_P=block_p,
                BLOCK_H=max(16, next_pow2(H + columns)))


def pair_heads(pair_repr: Tensor, norm_weight: Tensor | None, norm_bias: Tensor | None, weight: Tensor,
               bias: Tensor | None) -> Tensor:
    """(LayerNorm(pair_repr) when norm_weight and norm_bias are given) @ weight^T + bias, head major.

    pair_repr (B, N, N, P) float16, bfloat16 or float32, any strides (read in place where (i, j) make one index,
    as in any layout whose channels or batch elements are the only gaps; copied once otherwise); norm_weight,
    norm_bias (P,) or None; weight (h, P) and bias (h,) or None, in its dtype. Returns (B, h, N, N) in
    pair_repr's dtype, contiguous: the statistics and the sums in float32, the normalized channels rounded to the
    dtype first (as the reference's LayerNorm output is)."""
    B, N, _, P = pair_repr.shape
    h = weight.shape[0]
    z = torch.empty(B, h, N, N, dtype=pair_repr.dtype, device=pair_repr.device)
    if z.numel():
        tiles = pair_heads_tiles(N, P, h, columns=int(norm_weight is not None))  # (a column of sums)
        programs = max(1, min(cdiv(N * N, tiles["BLOCK_IJ"]),
                              cdiv(FORWARD_PROGRAMS_PER_SM * multiprocessors(pair_repr.device), B)))
        x = pair_repr.reshape(B, N * N, P)
        pair_heads_kernel[(programs, B)](
            x, *x.stride(), weight if norm_weight is None else norm_weight,
            weight if norm_bias is None else norm_bias, weight, *weight.stride(), weight if bias is None else bias,
            z, z.stride(0), z.stride(1), N * N, P, h, LAYER_NORM_EPS, programs, HAS_NORM=norm_weight is not None,
            HAS_BIAS=bias is not None, PRECISION=dot_precision(pair_repr.dtype, "default"), num_stages=1, **tiles)
    return z


def pair_heads_backward_pass(pair_repr: Tensor, norm_weight: Tensor | None, norm_bias: Tensor | None, weight: Tensor,
                             grad: Tensor, store_dx: int) -> tuple[Tensor, Tensor]:
    """(d_pair, sums): the pair's gradient in its dtype, (B, N, N, P) contiguous where store_dx, else empty; sums
    (h*P + 2P + h,) float32, the weight's gradient (h, P) flattened, the LayerNorm weight's and bias's (zeros
    without a LayerNorm) and the bias's (`pair_heads_backward_kernel`, as an op of its own so that torch.compile
    traces the operations' backwards around it). store_dx is a 0/1 int (`_runtime.custom_op`)."""
    B, N, _, P = pair_repr.shape
    h = weight.shape[0]
    tiles = pair_heads_tiles(N, P, h, BACKWARD_TILE_BYTES // pair_repr.element_size())
    programs = max(1, min(cdiv(N * N, tiles["BLOCK_IJ"]), cdiv(PROGRAMS_PER_SM * multiprocessors(pair_repr.device), B)))
    part = torch.empty(B * programs, (h + 2) * P + h, dtype=torch.float32, device=pair_repr.device)
    d_pair = pair_repr.new_empty(pair_repr.shape) if store_dx else pair_repr.new_empty(0)
    if N and B:
        x, g = pair_repr.reshape(B, N * N, P), grad.reshape(B, h, N * N)  # (views unless (i, j) are not one index)
        dx = d_pair.view(B, N * N, P) if store_dx else x  # (unused without store_dx)
        pair_heads_backward_kernel[(programs, B)](
            x, *x.stride(), weight if norm_weight is None else norm_weight,
            weight if norm_bias is None else norm_bias, weight, *weight.stride(), g, *g.stride(),
            dx, *dx.stride(), part, part.stride(0), N * N, P, h, LAYER_NORM_EPS, programs,
            HAS_NORM=norm_weight is not None, STORE_DX=store_dx, PRECISION=dot_precision(pair_repr.dtype, "default"),
            num_warps=BACKWARD_WARPS, **tiles)
    else:  # (no pairs: every sum is zero)
        part.zero_()
    return d_pair, part.sum(0)


def _pair_heads_backward_fake(pair_repr, norm_weight, norm_bias, weight, grad, store_dx):
    h, P = weight.shape
    return (pair_repr.new_empty(pair_repr.shape) if store_dx else pair_repr.new_empty(0),
            pair_repr.new_empty((h + 2) * P + h, dtype=torch.float32))


pair_heads_backward_op = custom_op("pair_heads_backward", pair_heads_backward_pass, _pair_heads_backward_fake)


def pair_heads_backward(pair_repr: Tensor, norm_weight: Tensor | None, norm_bias: Tensor | None, weight: Tensor,
                        grad: Tensor, needs: tuple[bool, bool, bool, bool, bool]):
    """The gradients of `pair_heads` for the output's gradient grad (B, h, N, N), any float dtype and strides;
    `needs` says which of (pair_repr, norm_weight, norm_bias, weight, bias) want one.

    Returns (d_pair, d_norm_weight, d_norm_bias, d_weight, d_bias), None where not needed, each in its
    tensor's dtype (d_bias in weight's): one pass over the pair, every sum in float32 and in a fixed order (the
    programs' partial sums added by torch.sum)."""
    if not any(needs):
        return (None,) * 5
    h, P = weight.shape
    backward = pair_heads_backward_op if traced(grad) else pair_heads_backward_pass
    d_pair, sums = backward(pair_repr, norm_weight, norm_bias, weight, grad, needs[0])
    norm_dtype = pair_repr.dtype if norm_weight is None else norm_weight.dtype
    # one cast for all where the parameters share a dtype
    norm_sums = sums.to(norm_dtype) if needs[1] or needs[2] else None
    if norm_sums is not None and norm_dtype == weight.dtype:
        sums = norm_sums
    elif needs[3] or needs[4]:
        sums = sums.to(weight.dtype)
    return (d_pair if needs[0] else None, norm_sums[h * P:(h + 1) * P] if needs[1] else None,
            norm_sums[(h + 1) * P:(h + 2) * P] if needs[2] else None, sums[:h * P].view(h, P) if needs[3] else None,
            sums[(h + 2) * P:] if needs[4] else None)

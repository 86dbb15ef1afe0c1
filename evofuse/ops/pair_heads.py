"""The pair's projection to the heads: (LayerNorm(pair) when the module has one) @ W^T + bias, (B, N, N, P) ->
(B, h, N, N), head major, once per batch element: row attention's pair bias and pair-weighted averaging's
head logits.

`pair_heads_kernel` reads all P channels of a block of pairs once and writes each head's column; with its few
columns (one a head) the projection is float32 sums on the CUDA cores, in one pass over the pair (a matrix
product of 4-8 columns leaves the tensor cores idle and the loads narrow: cuBLAS took 2.7 ms for N = 4096, P = 32,
h = 4). The gradients are taken by the operations' backwards.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._runtime import cdiv, next_pow2
from ..reference import LAYER_NORM_EPS


@triton.jit
def pair_heads_kernel(
    x_ptr, stride_xb, stride_xi, stride_xj, stride_xp,  # the pair: (B, N, N, P)
    lnw_ptr, lnb_ptr,  # HAS_NORM: the pair's LayerNorm weight and bias (P,)
    w_ptr, stride_wh, stride_wp,  # the projection: (h, P) in the pair's dtype
    bias_ptr,  # HAS_BIAS: (h,)
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,  # out: (B, h, N, N) in the pair's dtype
    N, P, H, eps,
    HAS_NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_IJ: tl.constexpr,  # pairs (i, j) a program
    BLOCK_P: tl.constexpr,  # the pair's channels, padded
):
    """z[b, h, i, j] = LayerNorm(x[b, i, j]) . w[h] + bias[h] (x[b, i, j] itself without HAS_NORM) for BLOCK_IJ
    consecutive pairs (i, j) of one batch element: the statistics in float32, the normalized channels rounded to
    the pair's dtype as the reference's LayerNorm output is, every product exact in float32 and summed there."""
    b = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0) * BLOCK_IJ + tl.arange(0, BLOCK_IJ)  # [BLOCK_IJ], flat (i, j)
    ok = offs < N * N
    i = (offs // N).to(tl.int64)
    j = (offs % N).to(tl.int64)
    offs_p = tl.arange(0, BLOCK_P)
    p_ok = offs_p < P
    rows = x_ptr + b * stride_xb + i * stride_xi + j * stride_xj  # [BLOCK_IJ]
    x = tl.load(rows[:, None] + offs_p[None, :] * stride_xp, mask=ok[:, None] & p_ok[None, :],
                other=0.0).to(tl.float32)  # [BLOCK_IJ, BLOCK_P]
    if HAS_NORM:
        mean = tl.sum(x, axis=1) / P
        xc = tl.where(p_ok[None, :], x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / P + eps)
        lnw = tl.load(lnw_ptr + offs_p, mask=p_ok, other=0.0).to(tl.float32)
        lnb = tl.load(lnb_ptr + offs_p, mask=p_ok, other=0.0).to(tl.float32)
        x = (xc * rstd[:, None] * lnw[None, :] + lnb[None, :]).to(z_ptr.dtype.element_ty).to(tl.float32)
    out = z_ptr + b * stride_zb + i * stride_zi + j * stride_zj  # [BLOCK_IJ]
    for h in range(H):
        w = tl.load(w_ptr + h * stride_wh + offs_p * stride_wp, mask=p_ok, other=0.0).to(tl.float32)  # [BLOCK_P]
        col = tl.sum(x * w[None, :], axis=1)  # [BLOCK_IJ]
        if HAS_BIAS:
            col += tl.load(bias_ptr + h).to(tl.float32)
        tl.store(out + h * stride_zh, col.to(z_ptr.dtype.element_ty), mask=ok)


TILE = 4096  # elements (pairs x channels) a program


def pair_heads_tiles(N: int, P: int) -> dict:
    """BLOCK_IJ and BLOCK_P of the kernel: all P channels of TILE // P pairs a program."""
    block_p = next_pow2(P)
    return dict(BLOCK_IJ=max(16, min(next_pow2(N * N), TILE // block_p)), BLOCK_P=block_p)


def pair_heads(pair_repr: Tensor, norm_weight: Tensor | None, norm_bias: Tensor | None, weight: Tensor,
               bias: Tensor | None) -> Tensor:
    """(LayerNorm(pair_repr) when norm_weight and norm_bias are given) @ weight^T + bias, head major.

    pair_repr (B, N, N, P) float16, bfloat16 or float32, any strides; norm_weight, norm_bias (P,) or None;
    weight (h, P) and bias (h,) or None, in its dtype. Returns (B, h, N, N) in pair_repr's dtype, contiguous:
    the statistics and the sums in float32, the normalized channels rounded to the dtype first (as the
    reference's LayerNorm output is)."""
    B, N, _, P = pair_repr.shape
    h = weight.shape[0]
    z = torch.empty(B, h, N, N, dtype=pair_repr.dtype, device=pair_repr.device)
    if z.numel():
        tiles = pair_heads_tiles(N, P)
        pair_heads_kernel[(cdiv(N * N, tiles["BLOCK_IJ"]), B)](
            pair_repr, *pair_repr.stride(), weight if norm_weight is None else norm_weight,
            weight if norm_bias is None else norm_bias, weight, *weight.stride(), weight if bias is None else bias,
            z, *z.stride(), N, P, h, LAYER_NORM_EPS, HAS_NORM=norm_weight is not None, HAS_BIAS=bias is not None,
            **tiles)
    return z

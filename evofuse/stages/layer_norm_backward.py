"""The backward of `layer_norm_linear` (y = (LayerNorm(x) @ W^T + bias) * mask), called from the operations'
registered backwards: `layer_norm_linear_backward` gives every gradient. One kernel recomputes the normalized rows and
takes the LayerNorm's backward in one pass; a narrow linear (`projects_on_chip`) has its mask, products and weight
and bias gradients taken in that pass too, a wider one cuBLAS products around it. The pass alone, without a
gradient, writes the normalized rows (`layer_norm_pass`: the forward's route for wide 16-bit linears).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._runtime import cdiv, custom_op, dot_precision, multiprocessors, next_pow2, permuted, rows_first, traced
from ..reference import LAYER_NORM_EPS
from .layer_norm_rows import centred_rows
from .matmul import matmul


@triton.jit
def _layer_norm_backward_kernel(
    x_ptr, stride_xm, stride_xd,  # x: (M, D)
    lnw_ptr, lnb_ptr,  # LayerNorm weight and bias: (D,)
    g_ptr, stride_gm, stride_gd,  # HAS_GRAD: the gradient of LayerNorm(x) (M, D), or with PROJECT the linear's (M, K)
    m_ptr, stride_mm,  # HAS_MASK (with PROJECT): the row mask (M,), 0/1 of any dtype, that multiplied the linear's output
    w_ptr, stride_wk, stride_wd,  # PROJECT: the linear's weight (K, D)
    xn_ptr, stride_nm, stride_nd,  # STORE_XN: LayerNorm(x) out, (M, D)
    dx_ptr, stride_dm, stride_dd,  # STORE_DX: (M, D)
    dln_ptr,  # HAS_GRAD: each program's partial sums for the LayerNorm weight and bias, (2, programs, D) float32
    dw_ptr,  # PROJECT: each program's partial sums for the linear's weight, (programs, K, D) float32
    db_ptr,  # PROJECT: each program's partial sums for the linear's bias, (programs, K) float32
    M, D, K, eps, programs, blocks_per_program,
    HAS_GRAD: tl.constexpr,
    PROJECT: tl.constexpr,  # the gradient of LayerNorm(x) made on chip from the linear's, and the weight's and
    # bias's gradients
    HAS_MASK: tl.constexpr,
    STORE_XN: tl.constexpr,
    STORE_DX: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,  # the whole row
    BLOCK_K: tl.constexpr,  # PROJECT: the linear's outputs, padded
    PRECISION: tl.constexpr,
):
    """blocks_per_program blocks of BLOCK_M rows: their moments again in float32, the normalized rows (out for
    the linear weight's gradient, or with PROJECT taken on chip), and the LayerNorm's backward; the parameters'
    gradients summed over this program's rows, to be summed over the programs in a fixed order afterwards. The
    next block's rows (x and, with PROJECT, the linear's gradient) are loaded before this block's are taken, so
    that their latency hides behind its work."""
    pid = tl.program_id(0)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    dlnw = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dlnb = tl.zeros((BLOCK_D,), dtype=tl.float32)
    if PROJECT:
        offs_k = tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        w = tl.load(w_ptr + offs_k[:, None] * stride_wk + offs_d[None, :] * stride_wd,
                    mask=k_ok[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_K, BLOCK_D]
        dw = tl.zeros((BLOCK_K, BLOCK_D), dtype=tl.float32)
        dbias = tl.zeros((BLOCK_K,), dtype=tl.float32)
    first = pid * blocks_per_program * BLOCK_M
    x_next, dy_next = _load_block(x_ptr, stride_xm, stride_xd, g_ptr, stride_gm, stride_gd, first, M, D, K,
                                  BLOCK_M, BLOCK_D, BLOCK_K, HAS_GRAD and PROJECT)
    for block in range(blocks_per_program):
        offs_m = (pid * blocks_per_program + block) * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < M
        ok = m_ok[:, None] & d_ok[None, :]  # [BLOCK_M, BLOCK_D]
        rows = offs_m.to(tl.int64)[:, None]
        x = x_next.to(tl.float32)  # [BLOCK_M, BLOCK_D]
        dy_block = dy_next  # [BLOCK_M, BLOCK_K]
        x_next, dy_next = _load_block(x_ptr, stride_xm, stride_xd, g_ptr, stride_gm, stride_gd,
                                      first + (block + 1) * BLOCK_M,
                                      tl.minimum(M, (pid + 1) * blocks_per_program * BLOCK_M), D, K,
                                      BLOCK_M, BLOCK_D, BLOCK_K, HAS_GRAD and PROJECT)
        xc, var = centred_rows(x, ok, D, x_ptr.dtype.element_ty != tl.float32)
        rstd = 1.0 / tl.sqrt(var + eps)
        xhat = xc * rstd[:, None]  # [BLOCK_M, BLOCK_D]
        if STORE_XN:
            tl.store(xn_ptr + rows * stride_nm + offs_d.to(tl.int64)[None, :] * stride_nd,
                     (xhat * lnw[None, :] + lnb[None, :]).to(xn_ptr.dtype.element_ty), mask=ok)
        if HAS_GRAD:
            if PROJECT:
                dy = dy_block
                if HAS_MASK:  # the gradient of the output before the mask
                    dy = dy * tl.load(m_ptr + offs_m.to(tl.int64) * stride_mm, mask=m_ok, other=0).to(dy.dtype)[:, None]
                dbias += tl.sum(dy.to(tl.float32), axis=0)
                g = tl.dot(dy, w, input_precision=PRECISION)  # [BLOCK_M, BLOCK_D]
                xn = tl.where(ok, xhat * lnw[None, :] + lnb[None, :], 0.0).to(dy.dtype)
                dw = tl.dot(tl.trans(dy), xn, dw, input_precision=PRECISION)  # [BLOCK_K, BLOCK_D]
            else:
                g = tl.load(g_ptr + rows * stride_gm + offs_d.to(tl.int64)[None, :] * stride_gd, mask=ok,
                            other=0.0).to(tl.float32)
            dlnw += tl.sum(g * xhat, axis=0)
            dlnb += tl.sum(g, axis=0)
            if STORE_DX:
                gw = g * lnw[None, :]  # the gradient of xhat, [BLOCK_M, BLOCK_D]
                mean_gw = tl.sum(gw, axis=1) / D
                mean_gw_xhat = tl.sum(gw * xhat, axis=1) / D
                dx = (gw - mean_gw[:, None] - xhat * mean_gw_xhat[:, None]) * rstd[:, None]
                tl.store(dx_ptr + rows * stride_dm + offs_d.to(tl.int64)[None, :] * stride_dd, dx.to(dx_ptr.dtype.element_ty),
                         mask=ok)
    if HAS_GRAD:
        tl.store(dln_ptr + pid * D + offs_d, dlnw, mask=d_ok)
        tl.store(dln_ptr + (programs + pid) * D + offs_d, dlnb, mask=d_ok)
        if PROJECT:
            tl.store(dw_ptr + (pid * K + offs_k[:, None]) * D + offs_d[None, :], dw, mask=k_ok[:, None] & d_ok[None, :])
            tl.store(db_ptr + pid * K + offs_k, dbias, mask=k_ok)


@triton.jit
def _load_block(x_ptr, stride_xm, stride_xd, g_ptr, stride_gm, stride_gd, start, end, D, K, BLOCK_M: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_K: tl.constexpr, WITH_GRAD: tl.constexpr):
    """(x [BLOCK_M, BLOCK_D], dy [BLOCK_M, BLOCK_K]) of the rows start .. start + BLOCK_M, in their dtype, zero
    from row `end` on; dy (the linear's output gradient) only WITH_GRAD, else x again."""
    offs_m = start + tl.arange(0, BLOCK_M)
    m_ok = offs_m < end
    rows = offs_m.to(tl.int64)[:, None]
    offs_d = tl.arange(0, BLOCK_D)
    x = tl.load(x_ptr + rows * stride_xm + offs_d.to(tl.int64)[None, :] * stride_xd, mask=m_ok[:, None] & (offs_d < D)[None, :],
                other=0.0)
    if WITH_GRAD:
        offs_k = tl.arange(0, BLOCK_K)
        dy = tl.load(g_ptr + rows * stride_gm + offs_k.to(tl.int64)[None, :] * stride_gd,
                     mask=m_ok[:, None] & (offs_k < K)[None, :], other=0.0)
    else:
        dy = x
    return x, dy


BACKWARD_TILE = 4096  # elements of x a program holds a step: BLOCK_M rows of the whole (padded) row
BACKWARD_WARPS_PER_SM = 8  # the backward's programs fill every multiprocessor once with this many warps, each
# program taking consecutive blocks of rows; their partial sums are then added
# A linear with at most PROJECTED_MAX_K outputs whose (padded) weight takes at most PROJECTED_MAX_BYTES takes its
# backward on chip (the pair's head projections; the Outer Product Mean's [a | b] projection, c <= 32, in 16 bits
# at D <= 256, in float32 at D <= 128); wider ones run slower on chip than through cuBLAS's products
PROJECTED_MAX_K = 64
PROJECTED_MAX_BYTES = 32 << 10


def projects_on_chip(D: int, K: int, element_size: int) -> bool:
    """Whether a linear (K, D) on elements of element_size bytes takes its backward in the LayerNorm's pass."""
    block_d, block_k, _, _ = backward_tiles(D, K, True)
    return K <= PROJECTED_MAX_K and block_k * block_d * element_size <= PROJECTED_MAX_BYTES


def backward_programs(device: torch.device, warps: int) -> int:
    """The most programs of `_layer_norm_backward_kernel`: one wave of BACKWARD_WARPS_PER_SM warps a
    multiprocessor (no tail wave, and fewer partial sums to add than with a program a block of rows)."""
    return multiprocessors(device) * max(1, BACKWARD_WARPS_PER_SM // warps)


def backward_tiles(D: int, K: int, project: bool) -> tuple[int, int, int, int]:
    """(BLOCK_D, BLOCK_K, BLOCK_M, num_warps) of `_layer_norm_backward_kernel`: BLOCK_M rows a step, BACKWARD_TILE
    elements of x and, with PROJECT, of the linear's gradient too."""
    block_d, block_k = max(16, next_pow2(D)), max(16, next_pow2(K))
    block_m = max(16, BACKWARD_TILE // max(block_d, block_k)) if project else max(1, BACKWARD_TILE // block_d)
    warps = 8 if block_m * block_d > BACKWARD_TILE or project and block_k * block_d > 4096 else 4
    return block_d, block_k, block_m, warps


def layer_norm_pass(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, grad: Tensor | None, weight: Tensor | None,
                    row_mask: Tensor | None, store_xn: int, store_dx: bool,
                    precision: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The LayerNorm's rows and, given a gradient, its backward, in one pass over x (M, D)
    (`_layer_norm_backward_kernel`; registered as the op `evofuse::layer_norm_backward`, so that torch.compile
    traces the operations' backwards around it).

    grad: the gradient of LayerNorm(x) (M, D); or, with the linear's weight (K, D), the linear's output gradient
    (M, K), whose product with the weight is then taken on chip, with the weight's and bias's gradients; row_mask
    (M,) (0/1 of any dtype, with weight) multiplied the linear's output, so it multiplies that gradient first.
    Returns (xn, dx, d_ln, d_weight, d_bias): xn = LayerNorm(x) in x's dtype, (M, D) where store_xn (without
    weight), else empty; dx in x's dtype, (M, D) where store_dx and grad is given, else empty; d_ln (2, D) float32,
    the LayerNorm weight's and bias's gradients, (2, 0) without grad; d_weight (K, D) and d_bias (K,) float32 with
    weight and grad, else empty. store_xn is a 0/1 int (`_runtime.custom_op`)."""
    return layer_norm_pass_into(x, ln_weight, ln_bias, grad, weight, row_mask, store_xn, store_dx, precision, None)


def layer_norm_pass_into(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, grad: Tensor | None, weight: Tensor | None,
                         row_mask: Tensor | None, store_xn: bool, store_dx: bool, precision: str,
                         dx: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """`layer_norm_pass`, its dx written into `dx` (M, D) where given (an eager caller's rows of a larger gradient; the
    op `evofuse::layer_norm_backward` mutates nothing, so this stays outside it)."""
    M, D = x.shape
    has_grad = grad is not None
    project = has_grad and weight is not None
    store_xn = store_xn and not project
    store_dx = store_dx and has_grad
    K = weight.shape[0] if project else 0
    xn = x.new_empty((M, D) if store_xn else (0,))
    if dx is None or not store_dx:
        dx = x.new_empty((M, D) if store_dx else (0,))
    block_d, block_k, block_m, warps = backward_tiles(D, K, project)
    blocks = cdiv(M, block_m)
    per_program = max(1, cdiv(blocks, backward_programs(x.device, warps)))
    programs = cdiv(blocks, per_program) if has_grad or store_xn else 0
    d_ln = torch.empty(2, programs if has_grad else 0, D, dtype=torch.float32, device=x.device)
    d_w = torch.empty(programs if project else 0, K, D, dtype=torch.float32, device=x.device)
    d_b = torch.empty(programs if project else 0, K, dtype=torch.float32, device=x.device)
    has_mask = project and row_mask is not None
    if programs:
        unused = (x, 0, 0)  # the pointer and strides of an output not asked for
        _layer_norm_backward_kernel[(programs,)](
            x, *x.stride(), ln_weight, ln_bias, *((grad, *grad.stride()) if has_grad else unused),
            *((row_mask, row_mask.stride(0)) if has_mask else unused[:2]),
            *((weight, *weight.stride()) if project else unused), *((xn, *xn.stride()) if store_xn else unused),
            *((dx, *dx.stride()) if store_dx else unused), d_ln, d_w, d_b, M, D, K, LAYER_NORM_EPS, programs,
            per_program, HAS_GRAD=has_grad, PROJECT=project, HAS_MASK=has_mask, STORE_XN=store_xn,
            STORE_DX=store_dx, BLOCK_M=block_m, BLOCK_D=block_d, BLOCK_K=block_k,
            PRECISION=dot_precision(x.dtype, precision), num_warps=warps)
    return (xn, dx, d_ln.sum(1) if has_grad else d_ln.new_empty(2, 0), d_w.sum(0) if project else d_w.new_empty(0),
            d_b.sum(0) if project else d_b.new_empty(0))


def _layer_norm_backward_fake(x, ln_weight, ln_bias, grad, weight, row_mask, store_xn, store_dx, precision):
    M, D = x.shape
    project = grad is not None and weight is not None
    return (x.new_empty((M, D) if store_xn and not project else (0,)),
            x.new_empty((M, D) if store_dx and grad is not None else (0,)),
            x.new_empty((2, D) if grad is not None else (2, 0), dtype=torch.float32),
            x.new_empty((weight.shape[0], D) if project else (0,), dtype=torch.float32),
            x.new_empty((weight.shape[0],) if project else (0,), dtype=torch.float32))


layer_norm_backward_op = custom_op("layer_norm_backward", layer_norm_pass, _layer_norm_backward_fake)


def layer_norm_linear_backward(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, weight: Tensor, dy: Tensor,
                               needs: tuple[bool, bool, bool, bool, bool], precision: str = "default",
                               mask: Tensor | None = None, dx_out: Tensor | None = None):
    """Gradients of y = (LayerNorm(x) @ weight^T + bias) * mask[..., None] for the output gradient dy (..., K);
    mask of x's leading shape, 0/1 of any dtype, or None. `needs` says which of (x, ln_weight, ln_bias, weight,
    bias) want one.

    Returns (dx, d_ln_weight, d_ln_bias, d_weight, d_bias), None where not needed; each in its tensor's
    dtype. 16-bit inputs recompute the normalized rows in their dtype (as the reference does), and every
    product accumulates in float32. A narrow linear (`projects_on_chip`: a pair's head projection, the Outer
    Product Mean's) takes the mask and its products on chip, in one pass over x with nothing of x's size but dx
    written; a wider one takes cuBLAS products around the pass. Where `dx_out` (M, D) is given (an eager caller's rows
    of a larger gradient), x's gradient is written into it."""
    D = x.shape[-1]
    K = weight.shape[0]
    # (a distributed x sharded along a later leading dimension: its rows taken that dimension first, dy's alike)
    order = rows_first(x) if dy.dim() == x.dim() else None
    x, dy = permuted(x, order), permuted(dy, order)
    mask = None if mask is None else permuted(mask, None if order is None else order[:-1])
    rows = x.reshape(-1, D)
    dy = dy.reshape(-1, K)
    mask_rows = None if mask is None else mask.reshape(-1)
    backward = (functools.partial(layer_norm_pass_into, dx=dx_out) if dx_out is not None
                else layer_norm_backward_op if traced(dy) else layer_norm_pass)
    if projects_on_chip(D, K, x.element_size()) and any(needs[:4]):
        _, dx, d_ln, d_weight, d_bias = backward(rows, ln_weight, ln_bias, dy, weight, mask_rows, False, needs[0],
                                                 precision)
        d_weight = d_weight.to(weight.dtype) if needs[3] else None
        d_bias = d_bias.to(weight.dtype) if needs[4] else None
    else:
        if mask_rows is not None:
            dy = dy * mask_rows.to(dy.dtype)[:, None]
        d_bias = dy.sum(0) if needs[4] else None
        dxn = matmul(dy, weight, precision) if any(needs[:3]) else None
        xn, dx, d_ln, _, _ = backward(rows, ln_weight, ln_bias, dxn, None, None, needs[3], needs[0], precision)
        d_weight = matmul(dy.t(), xn, precision) if needs[3] else None
    d_ln_weight, d_ln_bias = d_ln.to(ln_weight.dtype)
    return (permuted(dx.view(x.shape), order, back=True) if needs[0] else None, d_ln_weight if needs[1] else None,
            d_ln_bias if needs[2] else None, d_weight, d_bias)

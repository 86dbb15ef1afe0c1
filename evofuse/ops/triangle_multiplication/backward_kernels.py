"""Triangle multiplication's input backward in one pass over the pair: from the rows z (M, c_z), a's and b's
gradients (2c planes) and g_out's pre-activation's gradient (c_z planes), each block of rows is normalized again, p and
g made again on chip, the gates' gradients taken and written once (4c planes, for the stacked weight's gradient by
cuBLAS), and the LayerNorm's input gradient made on chip from the stacked projection's backward (5c products a row)
and LN_in's backward: z, the two gradients in; the gates' gradients, LN_in(z) and dx out. It replaces the gates'
gradient pass, cuBLAS's product of the 5c-wide gradient with the weight and the LayerNorm's backward pass, three
passes over the 5c-wide gradient, with one.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..._runtime import autotuned, bucket, cdiv, dot_precision, next_pow2, tuning_candidates
from ...reference import LAYER_NORM_EPS
from ...stages.layer_norm_glu import activation_grad
from ...stages.layer_norm_rows import centred_rows


@triton.jit
def input_backward_kernel(
    z_ptr, stride_zm, stride_zd,  # the pair's rows (M, c_z)
    lnw_ptr, lnb_ptr,  # LN_in's weight and bias (c_z,)
    w_ptr, stride_wk, stride_wd,  # the stacked projection (4c + c_z, c_z): p_a, p_b, g_a, g_b, g_out
    bias_ptr,  # HAS_BIAS: its bias (4c + c_z,)
    m_ptr,  # HAS_MASK: the row mask (M,), 0/1 of any dtype
    dab_ptr, stride_ac, stride_am,  # a's and b's gradients (2c, M), channel planes
    dp_ptr, stride_pc, stride_pm,  # (4c + c_z, M) channel planes: out, rows 0 .. 4c, p's and g's gradients; in, rows
    # 4c on, g_out's pre-activation's gradient
    xn_ptr,  # STORE_XN: out, LN_in(z) (M, c_z), rows contiguous
    dx_ptr, stride_dm, stride_dd,  # STORE_DX: out, z's gradient (M, c_z)
    dln_ptr,  # out: each program's partial sums of LN_in's weight and bias gradients, (2, programs, c_z) float32
    M, C, CZ, eps, programs,
    M_BUCKET,  # autotuning key only
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    STORE_XN: tl.constexpr,
    STORE_DX: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,  # the whole row, padded
):
    """BLOCK_M rows: LN_in(z) on chip (rounded to z's dtype, as the forward's); for each block of BLOCK_N of the 2c
    gated channels, p and g against their weight rows ([BLOCK_N, BLOCK_M], so that the planes' loads and stores run
    along their unit stride), rounded as the forward's; their gradients from a's and b's (times the row mask), rounded
    to z's dtype and stored, then multiplied by the same weight rows into LN_in's output gradient, accumulated in
    float32 with g_out's; LN_in's backward from it."""
    pid = tl.program_id(0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    m_ok = offs_m < M
    rows = offs_m.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < CZ
    ok = m_ok[:, None] & d_ok[None, :]  # [BLOCK_M, BLOCK_D]
    dtype = z_ptr.dtype.element_ty
    x = tl.load(z_ptr + rows[:, None] * stride_zm + offs_d[None, :] * stride_zd, mask=ok, other=0.0).to(tl.float32)
    xc, var = centred_rows(x, ok, CZ, dtype != tl.float32)
    rstd = 1.0 / tl.sqrt(var + eps)
    xhat = xc * rstd[:, None]  # [BLOCK_M, BLOCK_D], zero in the padding
    lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    xn = tl.where(d_ok[None, :], xhat * lnw[None, :] + lnb[None, :], 0.0).to(dtype)  # [BLOCK_M, BLOCK_D]
    if STORE_XN:
        tl.store(xn_ptr + rows[:, None] * CZ + offs_d[None, :], xn, mask=ok)
    if HAS_MASK:
        row_mask = tl.load(m_ptr + rows, mask=m_ok, other=0).to(tl.float32)[None, :]  # [1, BLOCK_M]
    dxn = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    H = 2 * C
    for n0 in range(0, H, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
        n_ok = offs_n < H
        w_ok = n_ok[:, None] & d_ok[None, :]
        w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wk + offs_d[None, :] * stride_wd  # [BLOCK_N, BLOCK_D]
        wp = tl.load(w_rows, mask=w_ok, other=0.0)
        wg = tl.load(w_rows + H * stride_wk, mask=w_ok, other=0.0)
        p = tl.dot(wp, tl.trans(xn), input_precision=PRECISION)  # [BLOCK_N, BLOCK_M]
        g = tl.dot(wg, tl.trans(xn), input_precision=PRECISION)
        if HAS_BIAS:
            p += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
            g += tl.load(bias_ptr + H + offs_n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        plane_ok = n_ok[:, None] & m_ok[None, :]
        cols = offs_n.to(tl.int64)[:, None]
        dh = tl.load(dab_ptr + cols * stride_ac + rows[None, :] * stride_am, mask=plane_ok, other=0.0).to(tl.float32)
        if HAS_MASK:
            dh *= row_mask
        dp, dg = activation_grad(p.to(dtype).to(tl.float32), g.to(dtype).to(tl.float32), dh, "sigmoid")
        dp = dp.to(dtype)
        dg = dg.to(dtype)
        tl.store(dp_ptr + cols * stride_pc + rows[None, :] * stride_pm, dp, mask=plane_ok)
        tl.store(dp_ptr + (cols + H) * stride_pc + rows[None, :] * stride_pm, dg, mask=plane_ok)
        dxn = tl.dot(tl.trans(dp), wp, dxn, input_precision=PRECISION)  # [BLOCK_M, BLOCK_D]
        dxn = tl.dot(tl.trans(dg), wg, dxn, input_precision=PRECISION)
    for n0 in range(0, CZ, BLOCK_N):  # g_out's share
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_ok = offs_n < CZ
        cols = (2 * H + offs_n).to(tl.int64)[:, None]  # [BLOCK_N, 1]
        wo = tl.load(w_ptr + cols * stride_wk + offs_d[None, :] * stride_wd, mask=n_ok[:, None] & d_ok[None, :],
                     other=0.0)
        dgo = tl.load(dp_ptr + cols * stride_pc + rows[None, :] * stride_pm, mask=n_ok[:, None] & m_ok[None, :],
                      other=0.0)  # [BLOCK_N, BLOCK_M]
        dxn = tl.dot(tl.trans(dgo), wo, dxn, input_precision=PRECISION)
    tl.store(dln_ptr + pid * CZ + offs_d, tl.sum(dxn * xhat, axis=0), mask=d_ok)
    tl.store(dln_ptr + (programs + pid) * CZ + offs_d, tl.sum(dxn, axis=0), mask=d_ok)
    if STORE_DX:
        gw = dxn * lnw[None, :]  # the gradient of xhat
        mean_gw = tl.sum(gw, axis=1) / CZ
        mean_gw_xhat = tl.sum(gw * xhat, axis=1) / CZ
        dx = (gw - mean_gw[:, None] - xhat * mean_gw_xhat[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * stride_dm + offs_d[None, :] * stride_dd, dx.to(dx_ptr.dtype.element_ty),
                 mask=ok)


def _configs(tiles) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=1) for bm, bn, warps in tiles]


# (BLOCK_M, BLOCK_N, num_warps) for 16-bit rows and for float32 rows; one stage (a pipelined tile feeding both
# tl.dot and a reduction gave wrong results: docs/PERFORMANCE.md, What lost); the first is the default
CONFIGS = _configs(((64, 64, 8), (32, 64, 4), (64, 32, 8), (32, 32, 4), (64, 128, 8), (16, 64, 4)))
FLOAT32_CONFIGS = _configs(((32, 32, 4), (32, 64, 8), (16, 32, 4)))
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1)
KEY = ["M_BUCKET", "C", "CZ", "HAS_BIAS", "HAS_MASK", "STORE_XN", "STORE_DX", "PRECISION"]
# float32 registers a thread may hold of the three row tiles (the rows, their normalized form and its gradient): wider
# rows take the three-pass path
ROW_REGISTERS = 128


def _fits(config: triton.Config, M: int, CZ: int) -> bool:
    bm = config.kwargs["BLOCK_M"]
    return bm <= max(16, next_pow2(M)) and 3 * bm * max(16, next_pow2(CZ)) // (32 * config.num_warps) <= ROW_REGISTERS


def _prune(configs, named_args, **kwargs):
    table = FLOAT32_CONFIGS if named_args["z_ptr"].element_size() == 4 else CONFIGS
    return tuning_candidates(table, lambda c: _fits(c, named_args["M"], named_args["CZ"]), INTERPRETER_CONFIG)


def fused_fits(cz: int, element_size: int) -> bool:
    """Whether rows of c_z channels take the fused pass (a block of them, with its gradient, in registers)."""
    table = FLOAT32_CONFIGS if element_size == 4 else CONFIGS
    return any(_fits(config, 1 << 20, cz) for config in table)


def input_backward(rows: Tensor, mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor,
                   in_weight: Tensor, in_bias: Tensor | None, dab: Tensor, d_proj: Tensor, dx: Tensor | None,
                   store_xn: bool, precision: str) -> tuple[Tensor, Tensor]:
    """One pass (`input_backward_kernel`) over rows (M, c_z) of the pair: writes p's and g's gradients into d_proj's
    first 4c rows ((4c + c_z, M), unit stride along M; its last c_z rows hold g_out's pre-activation's gradient) and,
    where dx (M, c_z) is given, z's gradient into it. dab (2c, M): a's and b's gradients, unit stride along M; mask
    (M,) 0/1 or None; in_weight (4c + c_z, c_z) and in_bias (4c + c_z,) or None in the rows' dtype. Returns (xn, d_ln):
    LN_in(z) (M, c_z) in the rows' dtype where store_xn (for the weight's gradient), else empty, and LN_in's weight
    and bias gradients (2, c_z) float32."""
    M, cz = rows.shape
    c = dab.shape[0] // 2
    xn = rows.new_empty((M, cz) if store_xn else (0,))

    def grid(meta):
        return (cdiv(M, meta["BLOCK_M"]),)

    # the partial sums' count is the grid's, known once the tile is: sized for the smallest tile, the rest unused
    programs = cdiv(M, min(config.kwargs["BLOCK_M"] for config in CONFIGS + FLOAT32_CONFIGS + [INTERPRETER_CONFIG]))
    d_ln = torch.zeros(2, programs, cz, dtype=torch.float32, device=rows.device)
    autotuned(input_backward_kernel, lambda: CONFIGS + FLOAT32_CONFIGS, KEY, _prune, restore_value=("dln_ptr",))[grid](
        rows, *rows.stride(), norm_in_weight, norm_in_bias, in_weight, *in_weight.stride(),
        in_weight if in_bias is None else in_bias, rows if mask is None else mask, dab, *dab.stride(), d_proj,
        *d_proj.stride(), xn, *((rows, 0, 0) if dx is None else (dx, *dx.stride())), d_ln, M, c, cz, LAYER_NORM_EPS,
        programs, bucket(M), HAS_BIAS=in_bias is not None, HAS_MASK=mask is not None, STORE_XN=store_xn,
        STORE_DX=dx is not None, PRECISION=dot_precision(rows.dtype, precision), BLOCK_D=max(16, next_pow2(cz)))
    return xn, d_ln.sum(1)

"""Triangle multiplication's backward in two passes over the pair, each a block of rows a program with its LayerNorms
made again on chip.

- The output side (`output_backward_kernel`): from t, z and the output's gradient, y = p_out(LN_out(t)) and g_out(LN_in
  (z)) made again, the gate's gradients (g_out's pre-activation's written, channel major), and through p_out's weight
  on chip LN_out's backward: t's gradient, channel major, for the products' backward.
- The input side (`input_backward_kernel`): from z, a's and b's gradients (2c planes) and g_out's pre-activation's
  gradient, p and g made again, the gates' gradients written once (4c planes, for the stacked weight's gradient by
  cuBLAS), and through the stacked weight (5c products a row) on chip LN_in's backward: z's gradient.

Each replaces three passes over a gradient as wide as the projection (the gate's, cuBLAS's product with the weight,
the LayerNorm's backward) with one. A program takes every so-many-th block of rows; the parameters' gradients are
its partial sums, added afterwards, but the weights' own, which cuBLAS takes from the gradients and normalized rows
these passes write.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..._runtime import autotuned, bucket, cdiv, dot_precision, multiprocessors, next_pow2, tuning_candidates
from ...reference import LAYER_NORM_EPS
from ...stages.layer_norm_glu import activation_grad, normalized_rows
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
    sums_ptr,  # out: each program's partial sums (programs, 2 c_z + 4c) float32: LN_in's weight's and bias's
    # gradients, then the gates' biases'
    M, C, CZ, eps,
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
    """Each of the program's blocks of BLOCK_M rows: LN_in(z) on chip (rounded to z's dtype, as the forward's); for
    each block of BLOCK_N of the 2c gated channels, p and g against their weight rows ([BLOCK_N, BLOCK_M], so that
    the planes' loads and stores run along their unit stride), rounded as the forward's; their gradients from a's
    and b's (times the row mask), rounded to z's dtype and stored, then multiplied by the same weight rows into
    LN_in's output gradient, accumulated in float32 with g_out's; LN_in's backward from it."""
    pid = tl.program_id(0)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < CZ
    dtype = z_ptr.dtype.element_ty
    lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    H = 2 * C
    sums = sums_ptr + pid * (2 * CZ + 2 * H)
    _zero_sums(sums + 2 * CZ, 2 * H, BLOCK_N)
    dlnw = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dlnb = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for block in range(pid, tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
        m_ok = offs_m < M
        rows = offs_m.to(tl.int64)
        ok = m_ok[:, None] & d_ok[None, :]  # [BLOCK_M, BLOCK_D]
        x = tl.load(z_ptr + rows[:, None] * stride_zm + offs_d[None, :] * stride_zd, mask=ok, other=0.0).to(tl.float32)
        xc, var = centred_rows(x, ok, CZ, dtype != tl.float32)
        rstd = 1.0 / tl.sqrt(var + eps)
        xhat = xc * rstd[:, None]  # [BLOCK_M, BLOCK_D], zero in the padding
        xn = tl.where(d_ok[None, :], xhat * lnw[None, :] + lnb[None, :], 0.0).to(dtype)  # [BLOCK_M, BLOCK_D]
        if STORE_XN:
            tl.store(xn_ptr + rows[:, None] * CZ + offs_d[None, :], xn, mask=ok)
        if HAS_MASK:
            row_mask = tl.load(m_ptr + rows, mask=m_ok, other=0).to(tl.float32)[None, :]  # [1, BLOCK_M]
        dxn = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
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
            _add_sums(sums + 2 * CZ + offs_n, tl.sum(dp.to(tl.float32), axis=1), n_ok)
            _add_sums(sums + 2 * CZ + H + offs_n, tl.sum(dg.to(tl.float32), axis=1), n_ok)
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
        dlnw += tl.sum(dxn * xhat, axis=0)
        dlnb += tl.sum(dxn, axis=0)
        if STORE_DX:
            gw = dxn * lnw[None, :]  # the gradient of xhat
            mean_gw = tl.sum(gw, axis=1) / CZ
            mean_gw_xhat = tl.sum(gw * xhat, axis=1) / CZ
            dx = (gw - mean_gw[:, None] - xhat * mean_gw_xhat[:, None]) * rstd[:, None]
            tl.store(dx_ptr + rows[:, None] * stride_dm + offs_d[None, :] * stride_dd,
                     dx.to(dx_ptr.dtype.element_ty), mask=ok)
    tl.store(sums + offs_d, dlnw, mask=d_ok)
    tl.store(sums + CZ + offs_d, dlnb, mask=d_ok)


@triton.jit
def _zero_sums(at, width, BLOCK: tl.constexpr):
    """Zeros at `at` .. `at` + width: the program's running sums, before its first block of rows."""
    for k0 in range(0, width, BLOCK):
        offs = k0 + tl.arange(0, BLOCK)
        tl.store(at + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < width)


@triton.jit
def _add_sums(at, partial, ok):
    """A program's running sums at `at` (its own row of the partial sums: no other program writes there) plus
    `partial`."""
    tl.store(at, tl.load(at, mask=ok, other=0.0) + partial, mask=ok)


@triton.jit
def output_backward_kernel(
    t_ptr, stride_tm, stride_tc,  # the product t as rows (M, c), channel major
    lno_w_ptr, lno_b_ptr,  # LN_out's weight and bias (c,)
    wp_ptr, stride_pk, stride_pc,  # p_out's weight (c_z, c)
    bp_ptr,  # HAS_P_BIAS: p_out's bias (c_z,)
    z_ptr, stride_zm, stride_zd,  # the pair's rows (M, c_z)
    lni_w_ptr, lni_b_ptr,  # LN_in's weight and bias (c_z,)
    wg_ptr, stride_gk, stride_gd,  # g_out's weight (c_z, c_z)
    bg_ptr,  # HAS_G_BIAS: g_out's bias (c_z,)
    grad_ptr, stride_om, stride_on,  # the output's gradient (M, c_z), any strides (a broadcast one included)
    dgo_ptr, stride_gc,  # out: g_out's pre-activation's gradient (c_z, M), its channels stride_gc apart
    dt_ptr, stride_dc,  # out: t's gradient (c, M), its channels stride_dc apart
    dy_ptr, tn_ptr,  # STORE_ROWS: out, y's gradient (M, c_z) and LN_out(t) (M, c), rows contiguous
    sums_ptr,  # out: each program's partial sums (programs, 2c + 2 c_z) float32: LN_out's weight's and bias's
    # gradients, p_out's bias's, g_out's bias's
    M, C, CZ, eps,
    M_BUCKET,  # autotuning key only
    HAS_P_BIAS: tl.constexpr,
    HAS_G_BIAS: tl.constexpr,
    STORE_ROWS: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_C: tl.constexpr,  # t's whole row, padded
    BLOCK_D: tl.constexpr,  # the pair's whole row, padded
):
    """Each of the program's blocks of BLOCK_M rows: LN_out(t) and LN_in(z) on chip (rounded to z's dtype, as the
    forward's); for each block of BLOCK_N output channels, y and g_out made again and rounded as the forward's, y's
    gradient grad sigmoid(g) and g's grad y sigmoid'(g) rounded to z's dtype, y's multiplied by p_out's weight rows
    into LN_out's output gradient, accumulated in float32; LN_out's backward from it."""
    pid = tl.program_id(0)
    offs_c = tl.arange(0, BLOCK_C)
    c_ok = offs_c < C
    offs_d = tl.arange(0, BLOCK_D)
    dtype = z_ptr.dtype.element_ty
    lnw = tl.load(lno_w_ptr + offs_c, mask=c_ok, other=0.0).to(tl.float32)
    lnb = tl.load(lno_b_ptr + offs_c, mask=c_ok, other=0.0).to(tl.float32)
    sums = sums_ptr + pid * (2 * C + 2 * CZ)
    _zero_sums(sums + 2 * C, 2 * CZ, BLOCK_N)
    dlnw = tl.zeros((BLOCK_C,), dtype=tl.float32)
    dlnb = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for block in range(pid, tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
        m_ok = offs_m < M
        rows = offs_m.to(tl.int64)
        ok = m_ok[:, None] & c_ok[None, :]  # [BLOCK_M, BLOCK_C]
        x = tl.load(t_ptr + rows[:, None] * stride_tm + offs_c[None, :] * stride_tc, mask=ok, other=0.0).to(tl.float32)
        xc, var = centred_rows(x, ok, C, dtype != tl.float32)
        rstd = 1.0 / tl.sqrt(var + eps)
        xhat = xc * rstd[:, None]  # [BLOCK_M, BLOCK_C], zero in the padding
        tn = tl.where(c_ok[None, :], xhat * lnw[None, :] + lnb[None, :], 0.0).to(dtype)  # [BLOCK_M, BLOCK_C]
        if STORE_ROWS:
            tl.store(tn_ptr + rows[:, None] * C + offs_c[None, :], tn, mask=ok)
        zn = normalized_rows(z_ptr + rows[:, None] * stride_zm, stride_zd, m_ok, lni_w_ptr, lni_b_ptr, CZ, eps, dtype,
                             BLOCK_D)  # [BLOCK_M, BLOCK_D]
        dtn = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
        for n0 in range(0, CZ, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
            n_ok = offs_n < CZ
            cols = offs_n.to(tl.int64)
            wp = tl.load(wp_ptr + cols[:, None] * stride_pk + offs_c[None, :] * stride_pc,
                         mask=n_ok[:, None] & c_ok[None, :], other=0.0)  # [BLOCK_N, BLOCK_C]
            y = tl.dot(tn, tl.trans(wp), input_precision=PRECISION)  # [BLOCK_M, BLOCK_N]
            if HAS_P_BIAS:
                y += tl.load(bp_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
            wg = tl.load(wg_ptr + cols[:, None] * stride_gk + offs_d[None, :] * stride_gd,
                         mask=n_ok[:, None] & (offs_d < CZ)[None, :], other=0.0)  # [BLOCK_N, BLOCK_D]
            g = tl.dot(zn, tl.trans(wg), input_precision=PRECISION)
            if HAS_G_BIAS:
                g += tl.load(bg_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
            out_ok = m_ok[:, None] & n_ok[None, :]
            d = tl.load(grad_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, mask=out_ok,
                        other=0.0).to(tl.float32)
            s = tl.sigmoid(g.to(dtype).to(tl.float32))
            dy = (d * s).to(dtype)  # [BLOCK_M, BLOCK_N]
            dgo = (d * y.to(dtype).to(tl.float32) * s * (1.0 - s)).to(dtype)
            tl.store(dgo_ptr + cols[None, :] * stride_gc + rows[:, None], dgo, mask=out_ok)
            if STORE_ROWS:
                tl.store(dy_ptr + rows[:, None] * CZ + cols[None, :], dy, mask=out_ok)
            _add_sums(sums + 2 * C + offs_n, tl.sum(dy.to(tl.float32), axis=0), n_ok)
            _add_sums(sums + 2 * C + CZ + offs_n, tl.sum(dgo.to(tl.float32), axis=0), n_ok)
            dtn = tl.dot(dy, wp, dtn, input_precision=PRECISION)  # [BLOCK_M, BLOCK_C]
        dlnw += tl.sum(dtn * xhat, axis=0)
        dlnb += tl.sum(dtn, axis=0)
        gw = dtn * lnw[None, :]  # the gradient of xhat
        mean_gw = tl.sum(gw, axis=1) / C
        mean_gw_xhat = tl.sum(gw * xhat, axis=1) / C
        dt = (gw - mean_gw[:, None] - xhat * mean_gw_xhat[:, None]) * rstd[:, None]
        tl.store(dt_ptr + offs_c.to(tl.int64)[None, :] * stride_dc + rows[:, None], dt.to(dt_ptr.dtype.element_ty),
                 mask=ok)
    tl.store(sums + offs_c, dlnw, mask=c_ok)
    tl.store(sums + C + offs_c, dlnb, mask=c_ok)


def _configs(tiles) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=1) for bm, bn, warps in tiles]


# (BLOCK_M, BLOCK_N, num_warps) for 16-bit rows and for float32 rows, both kernels; one stage (a pipelined tile feeding
# both tl.dot and a reduction gave wrong results: docs/PERFORMANCE.md, What lost); the first that fits is the default
CONFIGS = _configs(((64, 64, 8), (32, 64, 4), (64, 32, 8), (32, 32, 4), (64, 128, 8), (32, 64, 8)))
FLOAT32_CONFIGS = _configs(((32, 32, 4), (32, 64, 8), (32, 32, 8)))
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1)
INPUT_KEY = ["M_BUCKET", "C", "CZ", "HAS_BIAS", "HAS_MASK", "STORE_XN", "STORE_DX", "PRECISION"]
OUTPUT_KEY = ["M_BUCKET", "C", "CZ", "HAS_P_BIAS", "HAS_G_BIAS", "STORE_ROWS", "PRECISION"]
# float32 registers a thread may hold of a block's row tiles (three of its widest: the rows, their normalized form
# and its gradient); wider rows take the three-pass path
ROW_REGISTERS = 128


def _fits(config: triton.Config, M: int, width: int) -> bool:
    bm = config.kwargs["BLOCK_M"]
    return bm <= max(32, next_pow2(M)) and 3 * bm * max(16, next_pow2(width)) // (32 * config.num_warps) <= ROW_REGISTERS


def _candidates(M: int, width: int, element_size: int) -> list[triton.Config]:
    table = FLOAT32_CONFIGS if element_size == 4 else CONFIGS
    return tuning_candidates(table, lambda config: _fits(config, M, width), INTERPRETER_CONFIG, fallback=False)


def _prune(configs, named_args, **kwargs):
    width = max(named_args["CZ"], named_args.get("C", 0) if "t_ptr" in named_args else 0)
    return _candidates(named_args["M"], width, named_args["z_ptr"].element_size())


def fused_fits(width: int, element_size: int) -> bool:
    """Whether rows of `width` channels (the pair's, and for the output side t's too) take the fused passes: a block
    of them and its gradient in registers."""
    return any(_fits(config, 1 << 20, width) for config in (FLOAT32_CONFIGS if element_size == 4 else CONFIGS))


# programs a multiprocessor of each kernel's grid: each takes every so-many-th block of rows, so that its partial
# sums (a row of the pair's width or so) are few, whatever the pair's size
PROGRAMS_PER_SM = 4


def _launch(kernel, key: list[str], M: int, width: int, element_size: int, sums_width: int, device, *args,
            **kwargs) -> Tensor:
    """Launches `kernel` on at most PROGRAMS_PER_SM programs a multiprocessor, each over every so-many-th block of
    rows; returns their partial sums added, (sums_width,) float32. The programs are as many as the candidates'
    smallest block asks, whatever the tile chosen (those past its blocks write zeros), so that every row of the sums
    is written."""
    programs = min(multiprocessors(device) * PROGRAMS_PER_SM,
                   cdiv(M, min(config.kwargs["BLOCK_M"] for config in _candidates(M, width, element_size))))
    sums = torch.empty(programs, sums_width, dtype=torch.float32, device=device)
    if not M:
        return sums.new_zeros(sums_width)
    autotuned(kernel, lambda: CONFIGS + FLOAT32_CONFIGS, key, _prune)[(programs,)](*args, sums, *kwargs.pop("after"),
                                                                                bucket(M), **kwargs)
    return sums.sum(0)


def input_backward(rows: Tensor, mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor,
                   in_weight: Tensor, in_bias: Tensor | None, dab: Tensor, d_proj: Tensor, dx: Tensor | None,
                   store_xn: bool, precision: str) -> tuple[Tensor, Tensor]:
    """One pass (`input_backward_kernel`) over rows (M, c_z) of the pair: writes p's and g's gradients into d_proj's
    first 4c rows ((4c + c_z, M), unit stride along M; its last c_z rows hold g_out's pre-activation's gradient) and,
    where dx (M, c_z) is given, z's gradient into it. dab (2c, M): a's and b's gradients, unit stride along M; mask
    (M,) 0/1 or None; in_weight (4c + c_z, c_z) and in_bias (4c + c_z,) or None in the rows' dtype. Returns (xn, sums):
    LN_in(z) (M, c_z) in the rows' dtype where store_xn (for the weight's gradient), else empty; and (2 c_z + 4c,)
    float32: LN_in's weight's and bias's gradients, then the gates' biases'."""
    M, cz = rows.shape
    c = dab.shape[0] // 2
    xn = rows.new_empty((M, cz) if store_xn else (0,))
    sums = _launch(input_backward_kernel, INPUT_KEY, M, cz, rows.element_size(), 2 * cz + 4 * c, rows.device,
                   rows, *rows.stride(), norm_in_weight, norm_in_bias, in_weight, *in_weight.stride(),
                   in_weight if in_bias is None else in_bias, rows if mask is None else mask, dab, *dab.stride(),
                   d_proj, *d_proj.stride(), xn, *((rows, 0, 0) if dx is None else (dx, *dx.stride())),
                   after=(M, c, cz, LAYER_NORM_EPS), HAS_BIAS=in_bias is not None, HAS_MASK=mask is not None,
                   STORE_XN=store_xn, STORE_DX=dx is not None, PRECISION=dot_precision(rows.dtype, precision),
                   BLOCK_D=max(16, next_pow2(cz)))
    return xn, sums


def output_backward(t: Tensor, rows: Tensor, norm_in_weight: Tensor, norm_in_bias: Tensor, g_out_weight: Tensor,
                    g_out_bias: Tensor | None, norm_out_weight: Tensor, norm_out_bias: Tensor, p_out_weight: Tensor,
                    p_out_bias: Tensor | None, grad: Tensor, d_gate_out: Tensor, dt: Tensor, dy: Tensor | None,
                    tn: Tensor | None, precision: str) -> Tensor:
    """One pass (`output_backward_kernel`) over rows of t (c, M), unit stride along M, and of the pair (M, c_z), for
    the output's gradient grad (M, c_z), any strides: writes g_out's pre-activation's gradient into d_gate_out (c_z,
    M) and t's into dt (c, M), both with unit stride along M; where dy and tn (M, c_z) and (M, c) are given, y's
    gradient and LN_out(t) into them (for p_out's weight's gradient). Returns (2c + 2 c_z,) float32: LN_out's
    weight's and bias's gradients, p_out's bias's, g_out's bias's."""
    c, M = t.shape
    cz = rows.shape[1]
    store = dy is not None
    return _launch(output_backward_kernel, OUTPUT_KEY, M, max(c, cz), rows.element_size(), 2 * c + 2 * cz, rows.device,
                   t, 1, t.stride(0), norm_out_weight, norm_out_bias, p_out_weight, *p_out_weight.stride(),
                   p_out_weight if p_out_bias is None else p_out_bias, rows, *rows.stride(), norm_in_weight,
                   norm_in_bias, g_out_weight, *g_out_weight.stride(),
                   g_out_weight if g_out_bias is None else g_out_bias, grad, *grad.stride(), d_gate_out,
                   d_gate_out.stride(0), dt, dt.stride(0), dy if store else rows, tn if store else rows,
                   after=(M, c, cz, LAYER_NORM_EPS), HAS_P_BIAS=p_out_bias is not None,
                   HAS_G_BIAS=g_out_bias is not None, STORE_ROWS=store, PRECISION=dot_precision(rows.dtype, precision),
                   BLOCK_C=max(16, next_pow2(c)), BLOCK_D=max(16, next_pow2(cz)))

"""The transition's backward kernel through pointers, and its launch (`core_backward`): from the output's gradient to
the pre-activations' gradient, a and b made again from the input (the shared `layer_norm_glu` rows on chip) and the
hidden rows' gradient on chip, which also gives back the hidden rows for the output projection's weight gradient: the
forward keeps nothing but its input. Its forward is the shared `layer_norm_glu` kernel; many 16-bit rows take the
pass through tensor descriptors instead (`backward_tma`)."""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from ..._runtime import autotuned, bucket, cdiv, custom_op, dot_precision
from ...reference import LAYER_NORM_EPS
from ...stages import layer_norm_glu
from ...stages.layer_norm_glu import projected_rows
from . import configs

# what the backward kernel's autotuned choice is kept by
BACKWARD_KEY = ["M_BUCKET", "H_BUCKET", "D", "C", "GLU", "HAS_BIAS", "HAS_MASK", "PRECISION"]


@triton.jit
def transition_backward_kernel(
    x_ptr, stride_xm, stride_xd,  # the input x (M, D)
    lnw_ptr, lnb_ptr,  # the LayerNorm's weight and bias (D,)
    w_ptr, stride_wk, stride_wd,  # the input projection (K, D), K = 2H (GLU: a's H rows, then b's) or H
    bias_ptr,  # HAS_BIAS: (K,)
    g_ptr, stride_gm, stride_gc,  # the output's gradient (M, C), any strides (a broadcast one included)
    m_ptr,  # HAS_MASK: the row mask (M,), 0/1 of any dtype
    wo_ptr, stride_wc, stride_wh,  # the output projection (C, H)
    dpre_ptr,  # out: the pre-activations' gradient (M, K) contiguous
    h_ptr,  # out: the hidden rows again, times the row mask (M, H) contiguous
    M, D, C, H, eps,
    M_BUCKET, H_BUCKET,  # autotuning key only
    GLU: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,  # input, then output, channels a step
):
    """BLOCK_M rows and BLOCK_N hidden channels: a (and b) again from x as the forward makes them (`projected_rows`),
    dh = (g mask) W_out on tensor cores in float32 (never in memory), then in float32: GLU h = silu(a) b,
    da = dh b silu'(a) with silu'(a) = s (1 + a (1 - s)) for s = sigmoid(a), db = dh silu(a); else h = relu(a),
    da = dh [a > 0]."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    m_ok = offs_m < M
    n_ok = offs_n < H
    rows = offs_m.to(tl.int64)[:, None]  # [BLOCK_M, 1]
    dtype = x_ptr.dtype.element_ty
    a, b = projected_rows(x_ptr + rows * stride_xm, stride_xd, m_ok, lnw_ptr, lnb_ptr,
                          w_ptr + offs_n.to(tl.int64)[None, :] * stride_wk, stride_wk, stride_wd, bias_ptr, offs_n, n_ok,
                          D, H, eps, dtype, GLU, HAS_BIAS, PRECISION, BLOCK_M, BLOCK_N, BLOCK_D)
    keep = tl.load(m_ptr + offs_m, mask=m_ok, other=0).to(tl.float32) if HAS_MASK else m_ok.to(tl.float32)
    dh = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(0, C, BLOCK_D):
        offs_c = c0 + tl.arange(0, BLOCK_D)
        c_ok = offs_c < C
        g = tl.load(g_ptr + rows * stride_gm + offs_c[None, :] * stride_gc, mask=m_ok[:, None] & c_ok[None, :],
                    other=0.0)  # [BLOCK_M, BLOCK_D]
        if HAS_MASK:
            g = (g.to(tl.float32) * keep[:, None]).to(dtype)
        w = tl.load(wo_ptr + offs_c[:, None] * stride_wc + offs_n[None, :] * stride_wh,
                    mask=c_ok[:, None] & n_ok[None, :], other=0.0)  # [BLOCK_D, BLOCK_N]
        dh = tl.dot(g.to(dtype), w.to(dtype), dh, input_precision=PRECISION)
    ok = m_ok[:, None] & n_ok[None, :]
    a = a.to(tl.float32)
    da_at = dpre_ptr + rows * (H * (1 + GLU)) + offs_n[None, :]
    if GLU:
        b = b.to(tl.float32)
        s = tl.sigmoid(a)
        silu = a * s
        tl.store(da_at, (dh * b * s * (1.0 + a * (1.0 - s))).to(dtype), mask=ok)
        tl.store(da_at + H, (dh * silu).to(dtype), mask=ok)
        h = silu * b
    else:
        tl.store(da_at, tl.where(a > 0.0, dh, 0.0).to(dtype), mask=ok)
        h = tl.maximum(a, 0.0)
    tl.store(h_ptr + rows * H + offs_n[None, :], (h * keep[:, None]).to(dtype), mask=ok)


def core_backward(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, in_weight: Tensor, in_bias: Tensor | None,
                  grad: Tensor, mask: Tensor | None, out_weight: Tensor, glu: bool,
                  precision: str) -> tuple[Tensor, Tensor]:
    """(d_pre (M, K), h (M, H)): the pre-activations' gradient, from the rows x (M, D) any strides, the LayerNorm's and
    the input projection's parameters as the forward took them, the output's gradient grad (M, C) (any strides), the
    row mask (M,) or None and out_weight (C, H); a and b made again and the hidden rows' gradient on chip; and the
    hidden rows again, times the mask, for out_weight's gradient (`transition_backward_kernel`)."""
    M, D = x.shape
    C, H = out_weight.shape
    d_pre = x.new_empty(M, in_weight.shape[0])
    h = x.new_empty(M, H)
    if M:
        def grid(meta):
            return cdiv(M, meta["BLOCK_M"]), cdiv(H, meta["BLOCK_N"])

        kernel = autotuned(transition_backward_kernel, layer_norm_glu.tables, BACKWARD_KEY, configs.prune_backward)
        kernel[grid](x, *x.stride(), ln_weight, ln_bias, in_weight, *in_weight.stride(),
                     in_weight if in_bias is None else in_bias, grad, *grad.stride(), h if mask is None else mask,
                     out_weight, *out_weight.stride(), d_pre, h, M, D, C, H, LAYER_NORM_EPS, bucket(M), bucket(H),
                     GLU=glu, HAS_BIAS=in_bias is not None, HAS_MASK=mask is not None,
                     PRECISION=dot_precision(x.dtype, precision))
    return d_pre, h


def _core_backward_fake(x, ln_weight, ln_bias, in_weight, in_bias, grad, mask, out_weight, glu, precision):
    return x.new_empty(x.shape[0], in_weight.shape[0]), x.new_empty(x.shape[0], out_weight.shape[1])


core_backward_op = custom_op("transition_core_backward", core_backward, _core_backward_fake)

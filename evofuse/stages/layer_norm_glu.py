"""LayerNorm, a linear layer of two halves a and b, and an activation that joins them, in one pass with the normalized
rows made on chip: h = silu(a) * b (SwiGLU: the transition's), a * sigmoid(b) (the triangle multiplication's gated
projections) or relu(a) (no b: AF2's transition), times a row mask. Only h is written, in any layout (the transition's
rows, triangle multiplication's channel planes), and the pre-activations [a, b] where a backward needs them.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from .._runtime import OPERAND_SHARED_BYTES, autotuned, bucket, cdiv, dot_precision, next_pow2, tuning_candidates
from ..reference import LAYER_NORM_EPS
from . import layer_norm_glu_tma
from .glu_activations import activation, activation_grad
from .layer_norm_rows import normalized, row_moments


@triton.jit
def layer_norm_glu_kernel(
    x_ptr, stride_xm, stride_xd,  # x: (M, D)
    lnw_ptr, lnb_ptr,  # the LayerNorm's weight and bias (D,)
    w_ptr, stride_wk, stride_wd,  # the projection (K, D): a's H rows, then b's (K = 2H; "relu": a's alone, K = H)
    bias_ptr,  # HAS_BIAS: (K,)
    m_ptr,  # HAS_MASK: the row mask (M,), 0/1 of any dtype
    pre_ptr, stride_pm, stride_pk,  # STORE_PRE: out, the pre-activations (M, K) in x's dtype
    h_ptr, stride_hm, stride_hn,  # out: h (M, H) in x's dtype
    M, D, H, eps,
    M_BUCKET, H_BUCKET,  # autotuning key only
    ACTIVATION: tl.constexpr,  # "swiglu": silu(a) * b, "sigmoid": a * sigmoid(b), "relu": relu(a)
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    STORE_PRE: tl.constexpr,
    PRECISION: tl.constexpr,  # tl.dot's input_precision for float32 rows
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ROW_STEPS: tl.constexpr = 1,  # > 1: whole rows (BLOCK_D >= D) normalized once for up to ROW_STEPS blocks of BLOCK_N
    GRAD: tl.constexpr = False,  # the backward: h_ptr holds h's gradient, pre_ptr takes [a, b]'s
    PLANES: tl.constexpr = False,  # h and pre are channel planes (unit stride along M): whole-row tiles run transposed
):
    """BLOCK_M rows and BLOCK_N (ROW_STEPS x BLOCK_N) channels of h: the rows' moments in float32, then LayerNorm(x)
    chunk by chunk of BLOCK_D channels (rounded to x's dtype as the reference's LayerNorm output is) against a's (and
    b's) weight rows on tensor cores, accumulated in float32; a and b rounded to x's dtype (as the reference's linears
    give them), the activation in float32, times the row mask, rounded once. With ROW_STEPS > 1 a program reads and
    normalizes its rows once (one chunk: the same arithmetic) and steps through the output blocks, where one block a
    program reads its rows three times (two for the moments) for each block of BLOCK_N. With GRAD, a and b made the
    same way meet h's gradient instead (`_store_h`): nothing of [a, b] is kept from the forward. With PLANES, whole-row
    tiles take the products as [BLOCK_N, BLOCK_M] (weight rows against the normalized rows transposed), so that the
    stores and loads of channel planes run along their unit stride with no change of layout on chip."""
    GATED: tl.constexpr = ACTIVATION != "relu"
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    m_ok = offs_m < M
    dtype = x_ptr.dtype.element_ty
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm  # [BLOCK_M, 1]
    if ROW_STEPS == 1:
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
        n_ok = offs_n < H
        a, b = projected_rows(x_rows, stride_xd, m_ok, lnw_ptr, lnb_ptr, w_ptr + offs_n.to(tl.int64)[None, :] * stride_wk,
                              stride_wk, stride_wd, bias_ptr, offs_n, n_ok, D, H, eps, dtype, GATED, HAS_BIAS, PRECISION,
                              BLOCK_M, BLOCK_N, BLOCK_D)
        _store_h(a, b, offs_m, m_ok, offs_n, n_ok, m_ptr, pre_ptr, stride_pm, stride_pk, h_ptr, stride_hm, stride_hn, H,
                 ACTIVATION, HAS_MASK, STORE_PRE, GRAD, False)
    else:
        xn = normalized_rows(x_rows, stride_xd, m_ok, lnw_ptr, lnb_ptr, D, eps, dtype, BLOCK_D)  # [BLOCK_M, BLOCK_D]
        n_start = tl.program_id(1) * (ROW_STEPS * BLOCK_N)
        for n0 in range(n_start, tl.minimum(n_start + ROW_STEPS * BLOCK_N, H), BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
            n_ok = offs_n < H
            a = normalized_rows_projected(xn, w_ptr, stride_wk, stride_wd, bias_ptr, offs_n, n_ok, D, dtype, HAS_BIAS,
                                          PRECISION, BLOCK_D, PLANES)
            b = a
            if GATED:
                b = normalized_rows_projected(xn, w_ptr + H * stride_wk, stride_wk, stride_wd, bias_ptr + H, offs_n,
                                              n_ok, D, dtype, HAS_BIAS, PRECISION, BLOCK_D, PLANES)
            _store_h(a, b, offs_m, m_ok, offs_n, n_ok, m_ptr, pre_ptr, stride_pm, stride_pk, h_ptr, stride_hm,
                     stride_hn, H, ACTIVATION, HAS_MASK, STORE_PRE, GRAD, PLANES)


@triton.jit
def _store_h(a, b, offs_m, m_ok, offs_n, n_ok, m_ptr, pre_ptr, stride_pm, stride_pk, h_ptr, stride_hm, stride_hn, H,
             ACTIVATION: tl.constexpr, HAS_MASK: tl.constexpr, STORE_PRE: tl.constexpr, GRAD: tl.constexpr,
             TRANSPOSED: tl.constexpr):
    """The pre-activations a, b [BLOCK_M, BLOCK_N] ([BLOCK_N, BLOCK_M] where TRANSPOSED; x's dtype) stored where
    STORE_PRE, and h = act(a, b) times the row mask, rounded once, at rows offs_m and channels offs_n; with GRAD, h's
    gradient read there instead and a's and b's (`activation_grad`) stored where the pre-activations go."""
    if TRANSPOSED:
        ok = n_ok[:, None] & m_ok[None, :]
        rows = offs_m.to(tl.int64)[None, :]  # [1, BLOCK_M]
        cols = offs_n.to(tl.int64)[:, None]  # [BLOCK_N, 1]
    else:
        ok = m_ok[:, None] & n_ok[None, :]
        rows = offs_m.to(tl.int64)[:, None]  # [BLOCK_M, 1]
        cols = offs_n.to(tl.int64)[None, :]  # [1, BLOCK_N]
    h_at = h_ptr + rows * stride_hm + cols * stride_hn
    if HAS_MASK:
        row_mask = tl.load(m_ptr + offs_m, mask=m_ok, other=0).to(tl.float32)
        row_mask = row_mask[None, :] if TRANSPOSED else row_mask[:, None]
    if GRAD:
        dh = tl.load(h_at, mask=ok, other=0.0).to(tl.float32)
        if HAS_MASK:
            dh *= row_mask
        da, db = activation_grad(a.to(tl.float32), b.to(tl.float32), dh, ACTIVATION)
        tl.store(pre_ptr + rows * stride_pm + cols * stride_pk, da.to(pre_ptr.dtype.element_ty), mask=ok)
        if ACTIVATION != "relu":
            tl.store(pre_ptr + rows * stride_pm + (cols + H) * stride_pk, db.to(pre_ptr.dtype.element_ty), mask=ok)
    else:
        if STORE_PRE:
            tl.store(pre_ptr + rows * stride_pm + cols * stride_pk, a, mask=ok)
            if ACTIVATION != "relu":
                tl.store(pre_ptr + rows * stride_pm + (cols + H) * stride_pk, b, mask=ok)
        h = activation(a.to(tl.float32), b.to(tl.float32), ACTIVATION)
        if HAS_MASK:
            h *= row_mask
        tl.store(h_at, h.to(h_ptr.dtype.element_ty), mask=ok)


@triton.jit
def normalized_rows(x_rows, stride_xd, m_ok, lnw_ptr, lnb_ptr, D, eps, dtype: tl.constexpr, BLOCK_D: tl.constexpr):
    """LayerNorm of whole rows at x_rows [BLOCK_M, 1] (D <= BLOCK_D), [BLOCK_M, BLOCK_D] in `dtype`, zero in the padding
    channels: `row_moments`' and `projected_rows`' arithmetic on one chunk, from one read."""
    offs_d = tl.arange(0, BLOCK_D)
    ok = m_ok[:, None] & (offs_d < D)[None, :]
    x = tl.load(x_rows + offs_d.to(tl.int64)[None, :] * stride_xd, mask=ok, other=0.0).to(tl.float32)  # [BLOCK_M, BLOCK_D]
    return normalized(x, ok, lnw_ptr, lnb_ptr, D, eps, dtype, BLOCK_D)


@triton.jit
def normalized_rows_projected(xn, w_ptr, stride_wk, stride_wd, bias_ptr, offs_n, n_ok, D, dtype: tl.constexpr,
                              HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, BLOCK_D: tl.constexpr,
                              TRANSPOSED: tl.constexpr):
    """[BLOCK_M, BLOCK_N] in `dtype` ([BLOCK_N, BLOCK_M] where TRANSPOSED): whole normalized rows xn [BLOCK_M,
    BLOCK_D] (`normalized_rows`) against the weight rows offs_n of w_ptr (K, D) on tensor cores, accumulated in
    float32, the bias at offs_n added, rounded as the reference's linears give them (`projected_rows`' arithmetic on
    one chunk)."""
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    if TRANSPOSED:
        w = tl.load(w_ptr + offs_n.to(tl.int64)[:, None] * stride_wk + offs_d[None, :] * stride_wd,
                    mask=n_ok[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_N, BLOCK_D]
        acc = tl.dot(w, tl.trans(xn), input_precision=PRECISION)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    else:
        w = tl.load(w_ptr + offs_n.to(tl.int64)[None, :] * stride_wk + offs_d[:, None] * stride_wd,
                    mask=d_ok[:, None] & n_ok[None, :], other=0.0)  # [BLOCK_D, BLOCK_N]
        acc = tl.dot(xn, w, input_precision=PRECISION)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    return acc.to(dtype)


@triton.jit
def projected_rows(x_rows, stride_xd, m_ok, lnw_ptr, lnb_ptr, w_a, stride_wk, stride_wd, bias_ptr, offs_n, n_ok, D, H,
                   eps, dtype: tl.constexpr, GATED: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """(a, b) [BLOCK_M, BLOCK_N] in `dtype` (b zeros unless GATED): LayerNorm of the rows at x_rows [BLOCK_M, 1]
    (moments in float32; the normalized rows rounded to `dtype`, as the reference's LayerNorm output) against a's
    weight columns at w_a [1, BLOCK_N] and b's H rows on, BLOCK_D channels a step on tensor cores, accumulated in
    float32, the bias added (a's at offs_n, b's H on), rounded to `dtype` as the reference's linears give them."""
    mean, rstd = row_moments(x_rows, m_ok, stride_xd, D, eps, BLOCK_M, BLOCK_D)
    acc_a = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        x = tl.load(x_rows + offs_d.to(tl.int64)[None, :] * stride_xd, mask=m_ok[:, None] & d_ok[None, :], other=0.0)
        xhat = (x.to(tl.float32) - mean[:, None]) * rstd[:, None]  # [BLOCK_M, BLOCK_D]
        lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
        lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
        xn = tl.where(d_ok[None, :], xhat * lnw[None, :] + lnb[None, :], 0.0).to(dtype)
        w_ok = d_ok[:, None] & n_ok[None, :]  # [BLOCK_D, BLOCK_N]
        w_d = offs_d[:, None] * stride_wd
        acc_a = tl.dot(xn, tl.load(w_a + w_d, mask=w_ok, other=0.0), acc_a, input_precision=PRECISION)
        if GATED:
            acc_b = tl.dot(xn, tl.load(w_a + H * stride_wk + w_d, mask=w_ok, other=0.0), acc_b,
                           input_precision=PRECISION)
    if HAS_BIAS:
        acc_a += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        if GATED:
            acc_b += tl.load(bias_ptr + H + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    return acc_a.to(dtype), acc_b.to(dtype)


def _configs(tiles) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": bd}, num_warps=warps, num_stages=stages)
            for bm, bn, bd, warps, stages in tiles]


# (BLOCK_M, BLOCK_N, BLOCK_D, num_warps, num_stages) for 16-bit rows and for float32 rows; the first that fits is the
# default where autotuning is off
CONFIGS = _configs(((128, 64, 64, 4, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 3), (64, 64, 64, 4, 3),
                    (128, 128, 32, 8, 4), (64, 64, 32, 4, 2), (32, 64, 32, 4, 2), (16, 32, 32, 4, 2)))
FLOAT32_CONFIGS = _configs(((64, 64, 32, 4, 3), (128, 64, 32, 8, 3), (64, 128, 32, 8, 3), (32, 64, 32, 4, 2),
                            (16, 32, 32, 4, 2)))
# layer_norm_glu_kernel's whole-row tiles, (BLOCK_M, BLOCK_N, BLOCK_D, ROW_STEPS, num_warps, num_stages): tried by its
# autotuner beside the tiles above where a row fits one chunk (each row read and normalized once); the default with
# autotuning off stays a block tile, which every shape can take
ROW_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": bd, "ROW_STEPS": steps}, num_warps=warps,
                             num_stages=stages, maxnreg=maxnreg)
               for bm, bn, bd, steps, warps, stages, maxnreg in (
                   (64, 64, 128, 8, 4, 3, None), (128, 64, 128, 8, 8, 3, None), (64, 128, 128, 4, 8, 2, None),
                   (64, 64, 128, 4, 4, 3, None), (128, 64, 128, 4, 8, 3, None), (64, 64, 64, 8, 4, 3, None),
                   (128, 64, 64, 8, 4, 3, None), (64, 64, 256, 4, 8, 2, None), (32, 64, 128, 8, 4, 3, None),
                   # one stage (the weight tiles come from L2) and a register cap: more blocks a multiprocessor,
                   # whose loads of rows overlap each other's arithmetic
                   (64, 64, 128, 4, 4, 1, 128), (64, 64, 128, 4, 4, 1, None), (64, 128, 128, 2, 4, 1, None))]
FLOAT32_ROW_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": bd, "ROW_STEPS": steps},
                                     num_warps=warps, num_stages=stages)
                       for bm, bn, bd, steps, warps, stages in (
                           (64, 32, 128, 8, 4, 2), (32, 64, 128, 8, 4, 2), (64, 64, 64, 8, 4, 2))]
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 16}, num_warps=1, num_stages=1)
KEY = ["M_BUCKET", "H_BUCKET", "D", "ACTIVATION", "HAS_BIAS", "HAS_MASK", "STORE_PRE", "PRECISION", "GRAD", "PLANES"]


# the block tables' narrowest tiles: a call narrower than these is offered them
LEAST_N, LEAST_D = (min(c.kwargs[k] for c in CONFIGS + FLOAT32_CONFIGS) for k in ("BLOCK_N", "BLOCK_D"))


def fits(config: triton.Config, M: int, D: int, H: int, operands: int, element_size: int) -> bool:
    """A tile is kept when it is no larger than the call needs (or than the tables' smallest) and its pipelined x
    tile and `operands` weight tiles fit shared memory; a whole-row tile (ROW_STEPS > 1) where a row fits its chunk."""
    bm, bn, bd = (config.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_D"))
    if bm > max(16, next_pow2(M)) or bn > max(LEAST_N, next_pow2(H)) or bd > max(LEAST_D, next_pow2(D)):
        return False
    if config.kwargs.get("ROW_STEPS", 1) > 1 and bd < D:
        return False
    return (bm * bd + operands * bd * bn) * element_size * max(1, config.num_stages) <= OPERAND_SHARED_BYTES


def candidates(M: int, D: int, H: int, operands: int, element_size: int, whole_rows: bool = False) -> list[triton.Config]:
    """The tiles tried for a call (`fits`; the table of the rows' dtype, then its whole-row tiles where `whole_rows`:
    this kernel's) by this kernel and by the kernels built on `projected_rows` (the transition's backward, triangle
    multiplication's output), whose predicates call here."""
    blocks = FLOAT32_CONFIGS if element_size == 4 else CONFIGS
    table = blocks + (FLOAT32_ROW_CONFIGS if element_size == 4 else ROW_CONFIGS) if whole_rows else blocks
    kept = tuning_candidates(table, lambda c: fits(c, M, D, H, operands, element_size), INTERPRETER_CONFIG,
                             fallback=False)
    # where none fits, the smallest block tile: every shape can take it (a whole-row tile holds rows of its BLOCK_D)
    return kept or tuning_candidates(blocks[-1:], lambda c: True, INTERPRETER_CONFIG)


def tables() -> list[triton.Config]:
    """Every tile of both tables: what the autotuners of the kernels that use them are built with."""
    return CONFIGS + FLOAT32_CONFIGS


def row_tables() -> list[triton.Config]:
    """Both tables, then the whole-row tiles: the autotuners of the kernels with a whole-row path (this one's,
    triangle multiplication's output kernel)."""
    return tables() + ROW_CONFIGS + FLOAT32_ROW_CONFIGS


def _prune(configs, named_args, **kwargs):
    operands = 1 if kwargs["ACTIVATION"] == "relu" else 2
    return candidates(named_args["M"], named_args["D"], named_args["H"], operands, named_args["x_ptr"].element_size(),
                      whole_rows=True)


def layer_norm_glu(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, weight: Tensor, bias: Tensor | None,
                   mask: Tensor | None, h: Tensor, activation: str, precision: str, pre: Tensor | None = None,
                   grad: bool = False) -> Tensor:
    """Writes h (M, H), any strides, = act(a, b) * mask for [a, b] = LayerNorm(x) @ weight^T + bias (eps 1e-5), and
    returns it; where `pre` (M, K), any strides, is given, [a, b] there too. x (M, D) float16, bfloat16 or float32, any
    strides; ln_weight, ln_bias (D,); weight (K, D) with K = 2H (a's rows, then b's; H for "relu"), bias (K,) or None,
    in x's dtype; mask (M,) 0/1 of any real dtype, or None. With `grad`, h holds h's gradient and [a, b]'s (made again
    from x) are written to `pre`, which is returned."""
    M, D = x.shape
    H = h.shape[1]
    if M == 0 or H == 0:
        return pre if grad else h
    if not grad and pre is None and layer_norm_glu_tma.takes(x, weight, h, activation):
        return layer_norm_glu_tma.layer_norm_glu_tma(x, ln_weight, ln_bias, weight, bias, mask, h, activation)

    def grid(meta):
        return cdiv(M, meta["BLOCK_M"]), cdiv(H, meta["BLOCK_N"] * meta.get("ROW_STEPS", 1))

    pre_args = (h, 0, 0) if pre is None else (pre, *pre.stride())
    autotuned(layer_norm_glu_kernel, row_tables, KEY, _prune)[grid](
        x, *x.stride(), ln_weight, ln_bias, weight, *weight.stride(), weight if bias is None else bias,
        h if mask is None else mask, *pre_args, h, *h.stride(), M, D, H, LAYER_NORM_EPS, bucket(M), bucket(H),
        ACTIVATION=activation, HAS_BIAS=bias is not None, HAS_MASK=mask is not None, STORE_PRE=pre is not None,
        PRECISION=dot_precision(x.dtype, precision), GRAD=grad, PLANES=h.stride(0) == 1 and h.stride(1) != 1)
    return pre if grad else h


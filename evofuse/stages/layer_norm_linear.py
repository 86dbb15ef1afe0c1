"""LayerNorm followed by a linear layer, and an optional row mask: the first stage of every operation.
y = (LayerNorm(x) @ W^T + bias) * mask, in one pass with the normalized rows made on chip, never in memory;
wide 16-bit linears (`normalizes_first`) instead write the normalized rows (`layer_norm_backward.layer_norm_pass`)
for a cuBLAS product. Its gradients: `layer_norm_backward.layer_norm_linear_backward`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._runtime import OPERAND_SHARED_BYTES, autotuned, bucket, cdiv, next_pow2, tuning_candidates
from ..reference import LAYER_NORM_EPS
from .float16_halves import finite_abs, power_of_two_scales, store_halves
from .layer_norm_backward import layer_norm_pass
from .layer_norm_rows import centred_rows, row_moments


@triton.jit
def _layer_norm_linear_kernel(
    x_ptr, stride_x0, stride_x1, stride_x2, stride_xd,  # x: (M, D), row m = (m0, m1, m2) of its leading shape
    # (., M1, M2)
    lnw_ptr, lnb_ptr,  # LayerNorm weight and bias: (D,); TERMS > 0: unused (folded into W and the bias)
    w_ptr, stride_wk, stride_wd, stride_wh,  # W: (K, D) in x's dtype; TERMS > 0: float16 halves of the folded W
    # (`_weight_halves_kernel`), the low half stride_wh after the high
    bias_ptr,  # HAS_BIAS: (K,)
    inv_ptr,  # TERMS > 0: (K,) float32, 1 / each column's power-of-two scale
    m_ptr, stride_mm,  # HAS_MASK: the row mask (M,), 0/1 of any dtype
    y_ptr, stride_yg,  # y: (M, K) contiguous; GROUP > 0: groups of GROUP columns (heads), each group's rows one run
    # (column k of row m at (k // GROUP) * stride_yg + m * GROUP + k % GROUP)
    M, D, K, M1, M2, eps,
    K_BUCKET,  # autotuning key only
    GROUP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    WHOLE_ROW: tl.constexpr,  # BLOCK_D >= D: the rows normalized once, every output column by this program
    TERMS: tl.constexpr,  # float32 x: float16 products a chunk (3: hi*hi + hi*lo + lo*hi, 1: hi*hi); 16-bit x: 0
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr,  # the row, or a chunk of it
):
    """BLOCK_M rows: their mean and variance in float32, then the product of the normalized rows with W. A row
    that fits one chunk is loaded and normalized once and multiplied by all of W, BLOCK_K columns a step;
    a longer one is read in chunks, twice for its moments and once more for the product, by each program
    of a BLOCK_K block of columns. 16-bit rows are normalized, rounded to their dtype and multiplied as the
    reference does. float32 rows take float16 tensor cores: xhat (|xhat| <= sqrt(D)) as high and low float16
    halves against the folded weight's halves (`_split_dot`)."""
    pid_m = tl.program_id(0)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    m_ok = offs_m < M
    x_rows = x_ptr + _rows(offs_m, M1, M2, stride_x0, stride_x1, stride_x2)[:, None]  # [BLOCK_M, 1]
    if WHOLE_ROW:
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        ok = m_ok[:, None] & d_ok[None, :]
        x = tl.load(x_rows + offs_d.to(tl.int64)[None, :] * stride_xd, mask=ok, other=0.0).to(tl.float32)  # [BLOCK_M, BLOCK_D]
        xc, var = centred_rows(x, ok, D, TERMS == 0)
        rstd = 1.0 / tl.sqrt(var + eps)
        if TERMS == 0:
            xn = _affine(xc * rstd[:, None], lnw_ptr, lnb_ptr, offs_d, d_ok).to(w_ptr.dtype.element_ty)
        else:
            xhat = xc * rstd[:, None]
            x_hi = xhat.to(tl.float16)
            x_lo = (xhat - x_hi.to(tl.float32)).to(tl.float16)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            w_tile = w_ptr + offs_k[None, :] * stride_wk + offs_d[:, None] * stride_wd  # [BLOCK_D, BLOCK_K]
            w_ok = (offs_k < K)[None, :] & d_ok[:, None]
            if TERMS == 0:
                acc = tl.dot(xn, tl.load(w_tile, mask=w_ok, other=0.0))  # [BLOCK_M, BLOCK_K]
            else:
                acc = _split_dot(x_hi, x_lo, w_tile, stride_wh, w_ok, TERMS)
                acc *= tl.load(inv_ptr + offs_k, mask=offs_k < K, other=0.0)[None, :]
            _store(acc, pid_m * BLOCK_M, k0, M, K, bias_ptr, m_ptr, stride_mm, y_ptr, stride_yg, GROUP, HAS_BIAS,
                   HAS_MASK, BLOCK_M, BLOCK_K)
    else:
        mean, rstd = row_moments(x_rows, m_ok, stride_xd, D, eps, BLOCK_M, BLOCK_D)
        offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            d_ok = offs_d < D
            x = tl.load(x_rows + offs_d.to(tl.int64)[None, :] * stride_xd, mask=m_ok[:, None] & d_ok[None, :], other=0.0)
            xhat = tl.where(d_ok[None, :], (x.to(tl.float32) - mean[:, None]) * rstd[:, None], 0.0)
            w_tile = w_ptr + offs_k[None, :] * stride_wk + offs_d[:, None] * stride_wd  # [BLOCK_D, BLOCK_K]
            w_ok = (offs_k < K)[None, :] & d_ok[:, None]
            if TERMS == 0:
                xn = _affine(xhat, lnw_ptr, lnb_ptr, offs_d, d_ok)
                w = tl.load(w_tile, mask=w_ok, other=0.0)
                acc = tl.dot(xn.to(w.dtype), w, acc)  # [BLOCK_M, BLOCK_K]
            else:
                x_hi = xhat.to(tl.float16)
                acc += _split_dot(x_hi, (xhat - x_hi.to(tl.float32)).to(tl.float16), w_tile, stride_wh, w_ok, TERMS)
        if TERMS > 0:
            acc *= tl.load(inv_ptr + offs_k, mask=offs_k < K, other=0.0)[None, :]
        _store(acc, pid_m * BLOCK_M, tl.program_id(1) * BLOCK_K, M, K, bias_ptr, m_ptr, stride_mm, y_ptr, stride_yg,
               GROUP, HAS_BIAS, HAS_MASK, BLOCK_M, BLOCK_K)


@triton.jit
def _split_dot(x_hi, x_lo, w_tile, stride_wh, w_ok, TERMS: tl.constexpr):
    """x @ w from float16 halves: x_hi, x_lo [rows, chunk]; the weight's high half at the pointers w_tile
    [chunk, columns], its low half stride_wh on. TERMS 3: hi*hi + (hi*lo + lo*hi), each from zero, added in
    float32; 1: hi*hi. Returns float32 [rows, columns]."""
    w_hi = tl.load(w_tile, mask=w_ok, other=0.0)
    acc = tl.dot(x_hi, w_hi)
    if TERMS == 3:
        small = tl.dot(x_hi, tl.load(w_tile + stride_wh, mask=w_ok, other=0.0))
        acc += tl.dot(x_lo, w_hi, small)
    return acc


@triton.jit
def _weight_halves_kernel(
    w_ptr, stride_wk, stride_wd,  # W: (K, D) float32
    lnw_ptr, lnb_ptr,  # LayerNorm weight and bias: (D,)
    bias_ptr,  # HAS_BIAS: (K,)
    halves_ptr, stride_hh, stride_hk,  # out: (TERMS == 3 ? 2 : 1, K, D) float16, channel stride 1
    inv_ptr, folded_bias_ptr,  # out: (K,) float32 each
    K, D,
    HAS_BIAS: tl.constexpr,
    TERMS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """LayerNorm(x) @ W^T + bias = xhat @ (W * lnw)^T + (W @ lnb + bias): for BLOCK_K rows of W, the folded
    weight's float16 halves after each row's power-of-two scale (`float16_halves`), the inverse scales and the
    folded bias."""
    offs_k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_ok = offs_k < K
    rows = w_ptr + offs_k.to(tl.int64)[:, None] * stride_wk  # [BLOCK_K, 1]
    largest = tl.zeros((BLOCK_K,), dtype=tl.float32)
    folded_bias = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        w = tl.load(rows + offs_d[None, :] * stride_wd, mask=k_ok[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_K, BLOCK_D]
        lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0)
        folded_bias += tl.sum(w * tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0)[None, :], axis=1)
        largest = tl.maximum(largest, tl.max(finite_abs(w * lnw[None, :]), axis=1))
    scale = power_of_two_scales(largest)  # [BLOCK_K]
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        ok = k_ok[:, None] & d_ok[None, :]
        w = tl.load(rows + offs_d[None, :] * stride_wd, mask=ok, other=0.0)
        w = w * tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0)[None, :] * scale[:, None]  # [BLOCK_K, BLOCK_D]
        store_halves(halves_ptr + offs_k.to(tl.int64)[:, None] * stride_hk + offs_d[None, :], stride_hh, w, ok, TERMS)
    if HAS_BIAS:
        folded_bias += tl.load(bias_ptr + offs_k, mask=k_ok, other=0.0)
    tl.store(inv_ptr + offs_k, 1.0 / scale, mask=k_ok)
    tl.store(folded_bias_ptr + offs_k, folded_bias, mask=k_ok)


@triton.jit
def _affine(xhat, lnw_ptr, lnb_ptr, offs_d, d_ok):
    """The LayerNorm's weight and bias applied to normalized rows xhat [rows, chunk] (float32)."""
    lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    return xhat * lnw[None, :] + lnb[None, :]


@triton.jit
def _rows(offs_m, M1, M2, stride_0, stride_1, stride_2):
    """The 64-bit offsets of rows m = (m0, m1, m2) of a (., M1, M2) leading shape."""
    m = offs_m.to(tl.int64)
    return m // M2 // M1 * stride_0 + (m // M2) % M1 * stride_1 + m % M2 * stride_2


@triton.jit
def _store(acc, m0, k0, M, K, bias_ptr, m_ptr, stride_mm, y_ptr, stride_yg, GROUP: tl.constexpr,
           HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc [BLOCK_M, BLOCK_K], rows m0 .. and columns k0 .., plus the bias, times the rows' mask, stored in y's
    dtype at y's layout (the kernel's y arguments)."""
    offs_m = m0 + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_k = k0 + tl.arange(0, BLOCK_K)  # [BLOCK_K]
    k_ok = offs_k < K
    m_ok = offs_m < M
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_MASK:
        acc *= tl.load(m_ptr + offs_m.to(tl.int64) * stride_mm, mask=m_ok, other=0).to(tl.float32)[:, None]
    y = acc.to(y_ptr.dtype.element_ty)
    rows = offs_m.to(tl.int64)[:, None]  # [BLOCK_M, 1]
    if GROUP == 0:
        tl.store(y_ptr + rows * K + offs_k[None, :], y, mask=m_ok[:, None] & k_ok[None, :])
    elif BLOCK_K % GROUP == 0 and GROUP & (GROUP - 1) == 0:
        # each group's BLOCK_M rows are one run of BLOCK_M * GROUP elements: stored as such, a store the compiler
        # vectorizes (as [BLOCK_M, BLOCK_K] its runs would be GROUP elements long)
        GROUPS: tl.constexpr = BLOCK_K // GROUP
        runs = tl.reshape(tl.permute(tl.reshape(y, (BLOCK_M, GROUPS, GROUP)), (1, 0, 2)), (GROUPS, BLOCK_M * GROUP))
        flat = tl.arange(0, BLOCK_M * GROUP)  # [BLOCK_M * GROUP]: (row, channel)
        groups = k0 // GROUP + tl.arange(0, GROUPS)  # [GROUPS]
        run = y_ptr + groups.to(tl.int64)[:, None] * stride_yg + (m0.to(tl.int64) * GROUP + flat)[None, :]
        tl.store(run, runs, mask=(groups < K // GROUP)[:, None] & (m0 + flat // GROUP < M)[None, :])
    else:
        cols = (offs_k // GROUP).to(tl.int64) * stride_yg + offs_k % GROUP  # [BLOCK_K]
        tl.store(y_ptr + rows * GROUP + cols[None, :], y, mask=m_ok[:, None] & k_ok[None, :])


def _configs(tiles) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_K": bk}, num_warps=warps, num_stages=stages)
            for bm, bk, warps, stages in tiles]


# Candidate tiles, (BLOCK_M, BLOCK_K, num_warps, num_stages), for 16-bit rows and for float32 rows (on float16
# halves); the first that passes the predicate is the default where autotuning is off.
CONFIGS = _configs(((64, 64, 4, 2), (128, 64, 8, 2), (64, 128, 4, 2), (128, 128, 8, 2), (32, 64, 4, 2)))
FLOAT32_CONFIGS = _configs(((64, 64, 4, 2), (64, 64, 8, 2), (128, 64, 8, 2), (64, 32, 4, 2), (32, 32, 4, 2)))
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_K": 16}, num_warps=1, num_stages=1)
MAX_BLOCK_D = 256  # the longest row a program holds whole
SPLIT_BLOCK_K = 16  # rows of the weight a program of `_weight_halves_kernel` takes


def _keep(config: triton.Config, K: int, BLOCK_D: int, terms: int, whole_row: bool) -> bool:
    """A tile is worth trying when it is no wider than the output and fits shared memory: 16-bit operand tiles
    within ~96 KB; for float32 rows the shared memory that sm_90 compiles took (Triton 3.6, within 16 KB): the
    weight's halves in each stage and the rows' halves, or where rows come in chunks, their float32 chunks in
    each stage."""
    bm, bk = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_K"]
    if bk > max(16, next_pow2(K)):
        return False
    if terms == 0:
        return (bm + bk) * BLOCK_D * 2 <= 96 * 1024
    halves, stages = (2 if terms == 3 else 1), max(1, config.num_stages)
    if whole_row:
        shared = halves * (bk * stages + bm) * BLOCK_D * 2
    else:
        shared = (halves * bk * 2 + bm * 4) * BLOCK_D * stages
    return shared <= OPERAND_SHARED_BYTES


def _prune(configs, named_args, **kwargs):
    table = CONFIGS if kwargs["TERMS"] == 0 else FLOAT32_CONFIGS
    return tuning_candidates(
        table, lambda c: _keep(c, named_args["K"], kwargs["BLOCK_D"], kwargs["TERMS"], kwargs["WHOLE_ROW"]),
        INTERPRETER_CONFIG)


KEY = ["K_BUCKET", "D", "HAS_BIAS", "HAS_MASK", "WHOLE_ROW", "TERMS"]  # what the autotuner's choice is kept by


# 16-bit linears with at least CUBLAS_MIN_ROWS rows, CUBLAS_MIN_D input channels and D * K >= CUBLAS_MIN_WORK take
# the normalized rows from memory into a cuBLAS product (`layer_norm_pass`, then addmm): the fused kernel re-reads W
# for every block of rows, which costs more than the normalized rows' round trip where W is large and the rows many;
# below these bounds the fused kernel's one launch wins (the crossover as timed, docs/PERFORMANCE.md)
CUBLAS_MIN_ROWS = 16384
CUBLAS_MIN_D = 128
CUBLAS_MIN_WORK = 1 << 17


def normalizes_first(M: int, D: int, K: int, dtype: torch.dtype) -> bool:
    """Whether `layer_norm_linear` writes LayerNorm(x) and hands it to cuBLAS for M rows of a linear (K, D) on
    `dtype`."""
    return (dtype in (torch.float16, torch.bfloat16) and M >= CUBLAS_MIN_ROWS and D >= CUBLAS_MIN_D
            and D * K >= CUBLAS_MIN_WORK)


def joined_bias(biases: list[torch.Tensor | None], weights: list[torch.Tensor]) -> torch.Tensor | None:
    """The biases of projections whose weights are stacked into one, as one bias: None where every one is None,
    else each None as zeros of its weight's output width (a run of them one fill: each is a launch)."""
    if all(b is None for b in biases):
        return None
    pieces, zeros = [], 0
    for b, w in zip(biases, weights):
        if b is None:
            zeros += w.shape[0]
            continue
        if zeros:
            pieces.append(b.new_zeros(zeros))
            zeros = 0
        pieces.append(b)
    if zeros:
        pieces.append(pieces[-1].new_zeros(zeros))
    return torch.cat(pieces)


def layer_norm_linear(x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, weight: torch.Tensor,
                      bias: torch.Tensor | None, mask: torch.Tensor | None, precision: str = "default",
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """(LayerNorm(x) @ weight^T + bias) * mask[..., None], eps 1e-5.

    x (..., D) float16, bfloat16 or float32 (any strides); ln_weight, ln_bias (D,); weight (K, D) and bias
    (K,) or None in x's dtype; mask of x's leading shape, 0/1 of any real dtype, or None. Returns (..., K) in
    x's dtype, contiguous; or, given `out`, writes it there and returns it: a view of x's leading shape (at
    most three dimensions) then (K // G, G), the output's columns as groups of G (heads), each group's rows one
    contiguous run (`out.select(-2, 0)` contiguous: the heads of a projection written head major). The
    statistics and the products accumulate in float32. Wide 16-bit linears (`normalizes_first`) write
    LayerNorm(x) (M, D) for a cuBLAS product, rounded to x's dtype as the reference does; narrower ones keep the
    normalized rows on chip. float32
    rows take float16 tensor cores: the normalized rows' and the (LayerNorm-folded, column-scaled) weight's high
    and low halves, three products at the "default" precision (~1e-7 relative), the high halves alone at "fast".
    """
    D = x.shape[-1]
    K = weight.shape[0]
    lead = x.shape[:-1]
    M = x[..., 0].numel()
    if out is not None and (out.shape[:-2] != lead or len(lead) > 3 or out.shape[-2] * out.shape[-1] != K
                            or not out.select(-2, 0).is_contiguous()):
        raise ValueError(f"out of shape {tuple(out.shape)} and strides {out.stride()} does not hold the heads of a "
                         f"{tuple(lead)} x {K} output, each head's rows one run")
    if M == 0 or K == 0:
        return torch.empty(*lead, K, dtype=x.dtype, device=x.device) if out is None else out
    mask_rows = x if mask is None else mask.reshape(-1)
    if normalizes_first(M, D, K, x.dtype):  # (the normalized rows are freed on return)
        xn = layer_norm_pass(x.reshape(M, D), ln_weight, ln_bias, None, None, None, True, False, precision)[0]
        y = torch.mm(xn, weight.t()) if bias is None else torch.addmm(bias, xn, weight.t())
        if mask is not None:
            y *= mask_rows.to(y.dtype)[:, None]
        return y.view(*lead, K) if out is None else out.copy_(y.view(out.shape))
    if len(lead) > 3:  # (rows of at most three leading dimensions)
        x = x.reshape(-1, *x.shape[-3:])
    sizes = (1,) * (4 - x.dim()) + tuple(x.shape[:-1])
    x_layout = (0,) * (4 - x.dim()) + x.stride()
    y = torch.empty(M, K, dtype=x.dtype, device=x.device) if out is None else out
    group, stride_group = (0, 0) if out is None else (out.shape[-1], out.stride(-2))
    block_d = max(16, min(next_pow2(D), MAX_BLOCK_D))
    whole_row = block_d >= D
    terms = 0 if x.element_size() == 2 else 3 if precision == "default" else 1
    w_stride_h, inverse = 0, y  # (unused with 16-bit rows)
    if terms:  # float32: the folded weight's float16 halves, its inverse column scales and the folded bias
        halves = torch.empty(2 if terms == 3 else 1, K, D, dtype=torch.float16, device=x.device)
        inverse, folded_bias = torch.empty(2, K, dtype=torch.float32, device=x.device)
        _weight_halves_kernel[(cdiv(K, SPLIT_BLOCK_K),)](
            weight, *weight.stride(), ln_weight, ln_bias, weight if bias is None else bias, halves, halves.stride(0),
            halves.stride(1), inverse, folded_bias, K, D, HAS_BIAS=bias is not None, TERMS=terms,
            BLOCK_K=SPLIT_BLOCK_K, BLOCK_D=block_d)
        weight, w_stride_h, bias = halves[0], halves.stride(0), folded_bias

    def grid(meta):
        return cdiv(M, meta["BLOCK_M"]), 1 if whole_row else cdiv(K, meta["BLOCK_K"])

    kernel = autotuned(_layer_norm_linear_kernel, lambda: CONFIGS + FLOAT32_CONFIGS, KEY, _prune)
    kernel[grid](x, *x_layout, ln_weight, ln_bias, weight, *weight.stride(), w_stride_h,
                 weight if bias is None else bias, inverse, mask_rows, 0 if mask is None else mask_rows.stride(0), y,
                 stride_group, M, D, K, sizes[1], sizes[2], LAYER_NORM_EPS, bucket(K), GROUP=group,
                 HAS_BIAS=bias is not None, HAS_MASK=mask is not None, WHOLE_ROW=whole_row, TERMS=terms,
                 BLOCK_D=block_d)
    return y.view(*lead, K) if out is None else out

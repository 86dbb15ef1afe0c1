"""An optional LayerNorm, a linear layer and an optional row mask in one pass over the rows.

`_ln_linear_kernel` loads a tile of whole rows of x, normalizes it on chip, and then streams the
output columns in blocks of BLOCK_K: for each, a (BLOCK_D x BLOCK_K) tile of the transposed weight
(pipelined from L2), one matrix product, the bias, the row's mask value, and a store that can send
column k to slot k // SLOT (the Outer Product Mean's a and b come out as two separate tensors). The
normalized x never reaches device memory; each row is read once. Used for the Outer Product Mean's
projections; for float32 rows (SPLIT, `split_linear.split_ln_linear`) the tile is split into float16
halves and each weight tile comes as two (hi, lo): three products. (Row attention's projections,
K = 4 * 256 wide, ran 0.61 ms here against 0.44 ms for PyTorch's LayerNorm + cuBLAS on att-af2-main
bf16 on the H200, and stay in PyTorch.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import cached_launch, cdiv, empty, float32_product, interpreting, multiprocessors, next_pow2
from .partial_sums import sum_partials

# With float32 rows and 3xTF32 products this kernel measured 5.1 ms for the Outer Product Mean's
# projections on opm-af2-main on the H200 (LayerNorm + IEEE cuBLAS: ~0.5 ms): float32 rows take it only
# split into float16 halves (SPLIT). Tiles: ~32 KiB of rows and ~32 KiB of weight columns, two weight
# tiles in flight (the projections' K <= 128 columns are one step); 64 KiB at D = 256 or 512,
# measured by compiling for sm_90 (benchmarks/compile_sm90.py). On the H200, 64 rows x 4 warps ran the
# projections of opm-af2-main in 0.107 ms, 128 rows x 8 warps in 0.134 ms.
ROW_TILE_BYTES = 32 * 1024
WEIGHT_TILE_BYTES = 32 * 1024
MAX_BLOCK_D = 512


def _tiles(D: int, K: int) -> tuple[int, int, int]:
    """(BLOCK_ROWS, BLOCK_D, BLOCK_K) for a (K, D) weight of 16-bit elements."""
    block_d = max(16, next_pow2(D))
    block_k = min(max(16, next_pow2(K)), max(16, WEIGHT_TILE_BYTES // 2 // block_d))
    if interpreting():
        return 16, block_d, min(block_k, 32)
    return max(16, min(128, ROW_TILE_BYTES // 2 // block_d)), block_d, block_k


def _launch_tiles(D: int, K: int, split: bool) -> tuple[int, int, int, int]:
    """(BLOCK_ROWS, BLOCK_D, BLOCK_K, num_warps) of a launch. SPLIT holds two operand halves and two weight
    tiles: half the rows a tile. Measured on the H200 (opm-af2-main's projections): 16-bit 64 rows x 4
    warps 0.107 ms (128 x 8: 0.134); float32 SPLIT (session 10) 32 rows x 4 warps 0.238 ms, x 8 warps
    0.369, 64 x 8 0.280, 64 x 4 0.308, 16 x 4 0.294, 16 x 8 0.481."""
    block_rows, block_d, block_k = _tiles(D, K)
    if split:
        return max(16, block_rows // 2), block_d, block_k, 4
    return block_rows, block_d, block_k, 4


def fits(D: int, K: int, dtype: torch.dtype) -> bool:
    """Whether the fused kernel takes rows of width D in `dtype` (16-bit; K is streamed)."""
    return dtype in (torch.float16, torch.bfloat16) and max(16, next_pow2(D)) <= MAX_BLOCK_D


@triton.jit
def row_coords(first, BLOCK_ROWS: tl.constexpr, S, N):
    """Rows first .. first + BLOCK_ROWS - 1 of a (B, S, N) row space and their (b, s, i), int64
    [BLOCK_ROWS] each. Only the first row is divided in 64 bits (a scalar: sm_90 calls a subroutine for
    each 64-bit division); the tile's rows follow from it in 32 bits (N, S < 2**31 - BLOCK_ROWS)."""
    first = tl.cast(first, tl.int64)
    tile = tl.arange(0, BLOCK_ROWS)
    i_t = (first % N).to(tl.int32) + tile  # [BLOCK_ROWS], the first row's i plus the offset
    q0 = first // N
    s_t = (q0 % S).to(tl.int32) + i_t // N
    b = q0 // S + (s_t // S).to(tl.int64)
    return first + tile, b, (s_t % S).to(tl.int64), (i_t % N).to(tl.int64)


@triton.jit
def _row_moments(x, offs_d, D, eps):
    """Mean and 1 / std ([rows] float32) of a float32 row tile x [rows, BLOCK_D] whose columns past D
    are 0, and the centred tile (0 past D)."""
    mean = tl.sum(x, axis=1) / D
    xc = tl.where((offs_d < D)[None, :], x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / D + eps)
    return mean, rstd, xc


@triton.jit
def _affine(xc, rstd, offs_d, D, w_ptr, b_ptr):
    d_ok = offs_d < D
    w = tl.load(w_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    return xc * rstd[:, None] * w[None, :] + b[None, :]


@triton.jit
def normalize_rows(x, offs_d, D, w_ptr, b_ptr, eps):
    """LayerNorm of a float32 row tile x [rows, BLOCK_D] whose columns past D are 0; weight and bias
    (D,) of any float dtype. Returns float32. Every kernel that normalizes rows on chip calls it."""
    _, rstd, xc = _row_moments(x, offs_d, D, eps)
    return _affine(xc, rstd, offs_d, D, w_ptr, b_ptr)


@triton.jit
def _ln_linear_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi, stride_xd,  # x: (B, S, N, D), any strides
    lnw_ptr, lnb_ptr,  # LayerNorm weight, bias: (D,) (HAS_LN only)
    w_ptr, stride_wk, stride_wd,  # linear weight: (K, D); SPLIT: (K, 2D) float16, [w_hi | w_lo]
    w2_ptr,  # K_FIRST > 0: the weight's rows K_FIRST.. from here instead (w_ptr's strides)
    bias_ptr,  # linear bias: (K,)
    bias2_ptr,  # K_FIRST > 0: the bias from K_FIRST on
    shift_ptr, scale_ptr,  # SPLIT only: one float32 k (the rows are scaled by 2**k), one output factor
    m_ptr, stride_mb, stride_ms, stride_mi,  # row mask: (B, S, N) float32 (HAS_MASK only)
    y_ptr, stride_yslot, stride_yrow,  # out: slot k // SLOT, row (b*S + s)*N + i, channel k % SLOT
    ya_ptr,  # A_COPY: the first slot again, (B, S, A_PASSES, N, SLOT // A_PASSES) pass-major, contiguous
    amax_ptr,  # AMAX: (K // SLOT,) int32, max |y| of each slot as float32 bits (atomic max, from 0)
    ROWS, S, N, D, K, eps,  # ROWS = B * S * N
    SLOT: tl.constexpr,
    HAS_LN: tl.constexpr,
    HAS_MASK: tl.constexpr,
    SPLIT: tl.constexpr,  # float32 rows as float16 hi + lo: x_hi w_hi + x_hi w_lo + x_lo w_hi, times ALPHA
    ALPHA: tl.constexpr,
    AMAX: tl.constexpr,
    K_FIRST: tl.constexpr,  # > 0: two weights (and biases) stacked, the first with K_FIRST rows (no concatenated copy)
    A_PASSES: tl.constexpr,  # > 1: the first slot as (B, S, A_PASSES, N, SLOT // A_PASSES), pass-major (y contiguous)
    A_COPY: tl.constexpr,  # with A_PASSES > 1: y as it is, and the pass-major first slot in ya_ptr
    BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rows, b, s, i = row_coords(tl.program_id(0).to(tl.int64) * BLOCK_ROWS, BLOCK_ROWS, S, N)  # [BLOCK_ROWS]
    rows_ok = rows < ROWS
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    x = tl.load(x_ptr + (b * stride_xb + s * stride_xs + i * stride_xi)[:, None] + offs_d[None, :] * stride_xd,
                mask=rows_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)  # [BLOCK_ROWS, BLOCK_D]
    if HAS_LN:
        x = normalize_rows(x, offs_d, D, lnw_ptr, lnb_ptr, eps)
    if SPLIT:
        x = x * tl.math.exp2(tl.load(shift_ptr))
    xn = x.to(w_ptr.dtype.element_ty)  # [BLOCK_ROWS, BLOCK_D], the products' operand dtype (SPLIT: the high half)
    if SPLIT:
        x_lo = (x - xn.to(tl.float32)).to(tl.float16)  # [BLOCK_ROWS, BLOCK_D]
        out_scale = tl.load(scale_ptr)
    if HAS_MASK:
        m = tl.load(m_ptr + b * stride_mb + s * stride_ms + i * stride_mi, mask=rows_ok, other=0.0)  # [BLOCK_ROWS]
    y_rows = y_ptr + rows[:, None] * stride_yrow

    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)  # [BLOCK_K]
        k_ok = offs_k < K
        if K_FIRST > 0:
            first = offs_k < K_FIRST
            w_k = tl.where(first, w_ptr + offs_k * stride_wk, w2_ptr + (offs_k - K_FIRST) * stride_wk)  # [BLOCK_K]
            b_k = tl.where(first, bias_ptr + offs_k, bias2_ptr + (offs_k - K_FIRST))
        else:
            w_k = w_ptr + offs_k * stride_wk
            b_k = bias_ptr + offs_k
        w_t = tl.load(w_k[None, :] + offs_d[:, None] * stride_wd,
                      mask=d_ok[:, None] & k_ok[None, :], other=0.0)  # [BLOCK_D, BLOCK_K]
        y = tl.dot(xn, w_t)  # [BLOCK_ROWS, BLOCK_K], 16-bit operands, fp32 accumulator
        if SPLIT:
            w_lo_t = tl.load(w_ptr + offs_k[None, :] * stride_wk + (D + offs_d)[:, None] * stride_wd,
                             mask=d_ok[:, None] & k_ok[None, :], other=0.0)  # [BLOCK_D, BLOCK_K]
            y = tl.dot(x_lo, w_t, tl.dot(xn, w_lo_t, y)) * ALPHA
        y += tl.load(b_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
        if HAS_MASK:
            y = y * m[:, None]
        if SPLIT:
            y = y * out_scale
        if A_PASSES > 1:  # the first slot's channel k of row (b s, i) at ((b s), k // width, i, k % width)
            # the tile as groups of `width` channels: an address per (row, group), the group's channels contiguous
            width: tl.constexpr = SLOT // A_PASSES
            g = k0 // width + tl.arange(0, BLOCK_K // width)  # [groups]
            base_a = ((rows - i) * SLOT + i * width)[:, None] + (g * N * width).to(tl.int64)[None, :]
            y_g = tl.reshape(y, (BLOCK_ROWS, BLOCK_K // width, width)).to(y_ptr.dtype.element_ty)
            if A_COPY:  # [BLOCK_ROWS, groups, width]: the first slot's groups only
                tl.store(ya_ptr + base_a[:, :, None] + tl.arange(0, width)[None, None, :], y_g,
                         mask=rows_ok[:, None, None] & (g < A_PASSES)[None, :, None])
            else:
                base = rows[:, None] * stride_yrow + ((g * width // SLOT).to(tl.int64) * stride_yslot
                                                      + (g * width) % SLOT)[None, :]
                base = tl.where((g < A_PASSES)[None, :], base_a, base)  # [BLOCK_ROWS, groups]
                ptrs = y_ptr + base[:, :, None] + tl.arange(0, width)[None, None, :]  # [BLOCK_ROWS, groups, width]
                tl.store(ptrs, y_g, mask=rows_ok[:, None, None] & (g * width < K)[None, :, None])
        if A_PASSES == 1 or A_COPY:
            y_ptrs = y_rows + (offs_k // SLOT).to(tl.int64)[None, :] * stride_yslot + (offs_k % SLOT)[None, :]
            tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=rows_ok[:, None] & k_ok[None, :])
        if AMAX:  # |y|'s bits: their integer order is the float order (NaN above Inf), so the max is exact
            bits = tl.where(rows_ok[:, None] & k_ok[None, :], tl.abs(y).to(tl.int32, bitcast=True), 0)
            col_max = tl.max(bits, axis=0)  # [BLOCK_K]
            if SLOT <= BLOCK_K:  # whole slots (powers of two) in the tile: one atomic each
                slots = k0 // SLOT + tl.arange(0, BLOCK_K // SLOT)
                tl.atomic_max(amax_ptr + slots, tl.max(tl.reshape(col_max, (BLOCK_K // SLOT, SLOT)), axis=1),
                              mask=slots < K // SLOT)
            else:  # the tile within one slot
                tl.atomic_max(amax_ptr + k0 // SLOT, tl.max(col_max, axis=0))


def ln_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, ln_weight: torch.Tensor | None = None,
              ln_bias: torch.Tensor | None = None, mask: torch.Tensor | None = None, slot: int | None = None,
              eps: float = 1e-5, a_passes: int = 1, a_copy: bool = False) -> torch.Tensor:
    """(LayerNorm(x) @ weight.T + bias) * mask[..., None], LayerNorm only when ln_weight is given.

    x (B, S, N, D), any strides, bfloat16/float16; weight (K, D) and bias (K,) in x's dtype, or two of each whose
    rows are stacked (two weights of one stride: read where they are, no concatenated copy); ln_weight, ln_bias
    (D,), any float dtype; mask (B, S, N) float32 or None. Products accumulate in float32.
    Returns (K // slot, B, S, N, slot) contiguous in x's dtype, or (B, S, N, K) when slot is None. With
    a_passes > 1 the first slot's memory holds (B, S, a_passes, N, slot // a_passes) instead: its channels in
    a_passes parts, each part's rows of one MSA row contiguous (the Outer Product Mean's Hopper kernel reads a
    pass's rows (i p') as one box). With a_copy too, the first slot stays as it is and the pass-major form is a
    second output: (y, (B, S, a_passes, N, slot // a_passes) contiguous) is returned.
    Needs fits(D, K, x.dtype).
    """
    K = sum(w.shape[0] for w in weight) if isinstance(weight, (tuple, list)) else weight.shape[0]
    if not fits(x.shape[-1], K, x.dtype):
        raise ValueError(f"ln_linear takes 16-bit rows of width <= {MAX_BLOCK_D}, got {x.dtype} rows of {x.shape[-1]}")
    B, S, N, D = x.shape
    slot = K if slot is None else slot
    y = empty(K // slot, B, S, N, slot, dtype=x.dtype, device=x.device)
    ya = empty(B, S, a_passes, N, slot // a_passes, dtype=x.dtype, device=x.device) if a_copy else None
    if B * S * N:
        launch_ln_linear(x, weight, bias, ln_weight, ln_bias, mask, y, slot, eps, a_passes=a_passes, a_copy=ya)
    y = y if slot != K else y[0]
    return (y, ya) if a_copy else y


def launch_ln_linear(x, weight, bias, ln_weight, ln_bias, mask, y, slot, eps, split=None, amax=None, a_passes=1,
                     a_copy=None):
    """Launches `_ln_linear_kernel` over the rows of x (B, S, N, D) into y (K // slot, B, S, N, slot).
    `split` = (shift, scale, alpha): x float32, split into float16 halves after scaling by 2**shift
    (shift and scale one-element float32 tensors), weight (K, >= 2D) float16 with w_hi in columns [0, D)
    and w_lo in [D, 2D), the products times alpha (a float), the output times scale. `amax` (K // slot,)
    int32 zeros, or None: each slot's max |y| is written there as float32 bits (slot a power of two). `a_passes`
    as `ln_linear`'s (y contiguous); `a_copy`, with a_passes > 1: y as it is and the pass-major first slot written
    to this contiguous tensor. weight and bias: a tensor each, or two stacked (`ln_linear`)."""
    B, S, N, D = x.shape
    if isinstance(weight, (tuple, list)):
        (weight, weight2), (bias, bias2) = weight, bias
        if weight2.stride() != weight.stride() or bias.stride() != (1,) or bias2.stride() != (1,):
            weight, bias, weight2, bias2 = torch.cat([weight, weight2]), torch.cat([bias, bias2]), None, None
    else:
        weight2 = bias2 = None
    k_first = 0 if weight2 is None else weight.shape[0]
    K = weight.shape[0] + (0 if weight2 is None else weight2.shape[0])
    rows = B * S * N
    block_rows, block_d, block_k, warps = _launch_tiles(D, K, split is not None)
    has_ln = ln_weight is not None
    lnw, lnb = (ln_weight, ln_bias) if has_ln else (weight, weight)  # unused without LayerNorm
    m = mask if mask is not None else y  # unused without a mask
    m_strides = mask.stride() if mask is not None else (0, 0, 0)
    shift, scale, alpha = split if split is not None else (bias, bias, 1.0)  # unused without SPLIT
    cached_launch(_ln_linear_kernel)(
        (cdiv(rows, block_rows),), x, *x.stride(), lnw, lnb, weight, *weight.stride(),
        weight if weight2 is None else weight2, bias, bias if bias2 is None else bias2, shift, scale, m,
        *m_strides, y, y.stride(0), slot, y if a_copy is None else a_copy, y if amax is None else amax, rows, S, N,
        D, K, eps, SLOT=slot, HAS_LN=has_ln, HAS_MASK=mask is not None, SPLIT=split is not None, ALPHA=alpha,
        AMAX=amax is not None, K_FIRST=k_first, A_PASSES=a_passes, A_COPY=a_copy is not None, BLOCK_ROWS=block_rows,
        BLOCK_D=block_d, BLOCK_K=block_k, num_warps=warps,
        num_stages=1 if K <= block_k and split is None else 2)  # one weight tile: no second buffer (16-bit opm-af2-main,
    # session 13: 0.093 -> 0.081 ms, 104 -> ~72 KiB of shared memory; float32 SPLIT there: 2 stages 0.231 ms, 1 stage
    # 0.279, 3 stages 0.384, session 17)


@triton.jit
def _layer_norm_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi, stride_xd,  # x: (B, S, N, D), any strides
    w_ptr, b_ptr,  # LayerNorm weight, bias: (D,)
    y_ptr,  # out: (B*S*N, D) contiguous, x's dtype
    mean_ptr, rstd_ptr,  # out (STATS): mean and 1 / std of each row, (B*S*N,) float32 each
    ROWS, S, N, D, eps,
    STATS: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rows, b, s, i = row_coords(tl.program_id(0).to(tl.int64) * BLOCK_ROWS, BLOCK_ROWS, S, N)  # [BLOCK_ROWS]
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    ok = (rows < ROWS)[:, None] & d_ok[None, :]
    x = tl.load(x_ptr + (b * stride_xb + s * stride_xs + i * stride_xi)[:, None] + offs_d[None, :] * stride_xd,
                mask=ok, other=0.0).to(tl.float32)  # [BLOCK_ROWS, BLOCK_D]
    mean, rstd, xc = _row_moments(x, offs_d, D, eps)
    y = _affine(xc, rstd, offs_d, D, w_ptr, b_ptr)
    tl.store(y_ptr + rows[:, None] * D + offs_d[None, :], y.to(y_ptr.dtype.element_ty), mask=ok)
    if STATS:
        tl.store(mean_ptr + rows, mean, mask=rows < ROWS)
        tl.store(rstd_ptr + rows, rstd, mask=rows < ROWS)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, stats: bool = False):
    """LayerNorm over the last dim of x (B, S, N, D), any strides, statistics in float32; returns a
    contiguous tensor of x's shape and dtype, and with `stats` also each row's mean and 1 / std
    (B, S, N, 1) float32 (as `layer_norm_backward` takes them). On the H200, PyTorch's
    LayerNorm moved att-af2-main's 200 MB in 0.259 ms (0.77 TB/s, bf16), this kernel in 0.055 ms."""
    B, S, N, D = x.shape
    y = empty(B, S, N, D, dtype=x.dtype, device=x.device)
    rows = B * S * N
    mean, rstd = ((empty(B, S, N, 1, dtype=torch.float32, device=x.device) for _ in range(2)) if stats
                  else (y, y))
    if rows > 0:
        block_d = max(16, next_pow2(D))
        block_rows = 4 if interpreting() else max(1, 4096 // block_d)
        cached_launch(_layer_norm_kernel)((cdiv(rows, block_rows),), x, *x.stride(), weight, bias, y, mean, rstd, rows,
                                          S, N, D, eps, STATS=stats, BLOCK_ROWS=block_rows, BLOCK_D=block_d,
                                          num_warps=4)
    return (y, mean, rstd) if stats else y


@triton.jit
def _layer_norm_bwd_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi, stride_xd,  # x: (B, S, N, D), any strides
    dy_ptr,  # the output's gradient: (B*S*N, D) contiguous
    mean_ptr, rstd_ptr,  # the forward's statistics: (B*S*N,) float32 each
    w_ptr,  # LayerNorm weight: (D,)
    dx_ptr,  # out (NEED_X): (B*S*N, D) contiguous, x's dtype
    dw_ptr, db_ptr,  # out: per-program partial sums of the weight's and bias's gradients, (programs, D) float32
    ROWS, S, N, D,
    NEED_X: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """LayerNorm's backward from the forward's statistics: dx = rstd (g - mean(g) - xhat mean(g xhat)) with
    g = dy w, xhat = (x - mean) rstd; the weight's and bias's gradients summed over this program's row
    tiles (tiles pid, pid + programs, ...) in a fixed order, no atomics."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    w = tl.load(w_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_ROWS, BLOCK_D), dtype=tl.float32)
    db = tl.zeros((BLOCK_ROWS, BLOCK_D), dtype=tl.float32)
    for t in range(pid, tl.cdiv(ROWS, BLOCK_ROWS), programs):
        rows, b, s, i = row_coords(tl.cast(t, tl.int64) * BLOCK_ROWS, BLOCK_ROWS, S, N)  # [BLOCK_ROWS]
        r_ok = rows < ROWS
        ok = r_ok[:, None] & d_ok[None, :]
        x = tl.load(x_ptr + (b * stride_xb + s * stride_xs + i * stride_xi)[:, None] + offs_d[None, :] * stride_xd,
                    mask=ok, other=0.0).to(tl.float32)  # [BLOCK_ROWS, BLOCK_D]
        dy = tl.load(dy_ptr + rows[:, None] * D + offs_d[None, :], mask=ok, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=r_ok, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=r_ok, other=0.0)
        xhat = tl.where(ok, (x - mean[:, None]) * rstd[:, None], 0.0)
        dw += dy * xhat
        db += dy
        if NEED_X:
            g = dy * w[None, :]
            c1 = tl.sum(g * xhat, axis=1) / D
            c2 = tl.sum(g, axis=1) / D
            dx = (g - c2[:, None] - xhat * c1[:, None]) * rstd[:, None]
            tl.store(dx_ptr + rows[:, None] * D + offs_d[None, :], dx.to(dx_ptr.dtype.element_ty), mask=ok)
    tl.store(dw_ptr + pid * D + offs_d, tl.sum(dw, axis=0), mask=d_ok)
    tl.store(db_ptr + pid * D + offs_d, tl.sum(db, axis=0), mask=d_ok)


LN_BWD_PROGRAMS = 1024  # programs of the LayerNorm backward (each sums its row tiles' weight gradients)


def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                        weight: torch.Tensor, need_x: bool = True):
    """Gradients of `layer_norm` (x (B, S, N, D), any strides; weight (D,)) from the output's gradient dy
    (B, S, N, D) and the forward's statistics mean, rstd (B, S, N, 1) float32: (dx in x's dtype and shape,
    or None without `need_x`; the weight's and the bias's gradients (D,) float32), all in one pass over
    the rows, the parameter gradients summed in a fixed order (bit-reproducible). On the H200, PyTorch's
    LayerNorm backward took 0.26 ms for att-af2-main's 200 MB rows (bf16)."""
    B, S, N, D = x.shape
    rows = B * S * N
    dy = dy.reshape(rows, D).contiguous()
    block_d = max(16, next_pow2(D))
    block_rows = 4 if interpreting() else max(1, 2048 // block_d)
    programs = max(1, min(cdiv(rows, block_rows), 8 if interpreting() else LN_BWD_PROGRAMS))
    dx = empty(B, S, N, D, dtype=x.dtype, device=x.device) if need_x else None
    partial = torch.empty(2, programs, D, dtype=torch.float32, device=x.device)
    cached_launch(_layer_norm_bwd_kernel)((programs,), x, *x.stride(), dy, mean, rstd, weight, dx if need_x else dy,
                                          partial[0], partial[1], rows, S, N, D, NEED_X=need_x, BLOCK_ROWS=block_rows,
                                          BLOCK_D=block_d, num_warps=4)
    return dx, partial[0].sum(0), partial[1].sum(0)


@triton.jit
def _ln_linear_bwd_loads(x_ptr, stride_xr, stride_xd, m_ptr, stride_mr, dy0_ptr, stride_dy0, dy1_ptr, stride_dy1, t,
                         offs_d, d_ok, offs_c, c_ok, ROWS, HAS_MASK: tl.constexpr, EVEN_D: tl.constexpr,
                         EVEN_C: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    """Row tile t's loads for `_ln_linear_bwd_kernel`, as stored (none past ROWS): x^T [BLOCK_D, BLOCK_ROWS],
    the row mask [BLOCK_ROWS] (float32; ones without HAS_MASK) and dy_0^T, dy_1^T [BLOCK_C, BLOCK_ROWS]."""
    rows = tl.cast(t, tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # [BLOCK_ROWS]
    r_ok = rows < ROWS
    ok = r_ok[None, :] if EVEN_D else d_ok[:, None] & r_ok[None, :]
    x = tl.load(x_ptr + offs_d[:, None] * stride_xd + (rows * stride_xr)[None, :], mask=ok, other=0.0)
    dy_ok = r_ok[None, :] if EVEN_C else c_ok[:, None] & r_ok[None, :]
    dy0 = tl.load(dy0_ptr + rows[None, :] * stride_dy0 + offs_c[:, None], mask=dy_ok, other=0.0)
    dy1 = tl.load(dy1_ptr + rows[None, :] * stride_dy1 + offs_c[:, None], mask=dy_ok, other=0.0)
    if HAS_MASK:
        m = tl.load(m_ptr + rows * stride_mr, mask=r_ok, other=0.0)
    else:
        m = tl.full((BLOCK_ROWS,), 1.0, dtype=tl.float32)
    return x, m, dy0, dy1


@triton.jit
def _ln_linear_bwd_kernel(
    x_ptr, stride_xr, stride_xd,  # x: (B*S*N, D), rows evenly strided
    lnw_ptr, lnb_ptr,  # LayerNorm weight, bias: (D,)
    w_ptr,  # the two projections' weights stacked: (2 C, D) contiguous, x's dtype (one pointer: two cost
    # 32 -> 104 bytes of register spills a thread for sm_90 at opm-af2-main)
    m_ptr, stride_mr,  # row mask: (B*S*N,) float32 (HAS_MASK only)
    dy0_ptr, stride_dy0, dy1_ptr, stride_dy1,  # each projection's output gradient: row (b*S + s)*N + i, C channels
    dx_ptr,  # out (need_x): (B*S*N, D) contiguous, x's dtype
    xn_ptr,  # out: the normalized rows (B*S*N, D) contiguous, x's dtype (the weights' gradient takes them)
    dy_ptr,  # out: the masked output gradients [dy_0 | dy_1] (B*S*N, 2 C) contiguous, x's dtype
    part_ptr, stride_part,  # out: this program's partial sums, float32: d bias (2 C), dlnw (D), dlnb (D)
    ROWS, D, C, eps, need_x,
    HAS_MASK: tl.constexpr, EVEN_D: tl.constexpr, EVEN_C: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """The backward of y_k = (LayerNorm(x) @ w_k^T + bias_k) * mask (k = 0, 1) from dy_0, dy_1, on tiles of
    rows held transposed ([BLOCK_D, BLOCK_ROWS]): the LayerNorm recomputed from x (its statistics too),
    dxn^T = sum_k w_k^T (dy_k mask)^T (D is the product's M: Hopper's warpgroup products read the weights
    from shared memory, not registers; 0.22 against 0.29 ms for row tiles, opm-af2-main on the H200), then
    dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dxn lnw. Each tile's loads are issued one tile
    ahead, by hand (Triton's pipeliner prefetches only the weights', which feed the products directly):
    0.255 -> 0.170 ms at opm-af2-main with 16-row tiles. The normalized rows and the masked gradients go
    out in x's dtype for one product dW = dy^T xn (cuBLAS); the biases' and the LayerNorm's gradients are
    summed over this program's row tiles (tiles pid, pid + programs, ...) in a fixed order, no atomics.
    `need_x` (0 or 1) only masks dx's store, so that the sums are the same code either way."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    dtype = w_ptr.dtype.element_ty
    offs_d = tl.arange(0, BLOCK_D)  # dim 0 of every tile
    offs_c = tl.arange(0, BLOCK_C)
    d_ok = offs_d < D
    c_ok = offs_c < C
    lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)  # [BLOCK_D]
    lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    w_ok = d_ok[:, None] & c_ok[None, :]
    w0t_ptrs = w_ptr + offs_d[:, None] + offs_c[None, :] * D  # [BLOCK_D, BLOCK_C]: w_0^T
    w1t_ptrs = w0t_ptrs + C * D
    db0 = tl.zeros((BLOCK_C, BLOCK_ROWS), dtype=tl.float32)
    db1 = tl.zeros((BLOCK_C, BLOCK_ROWS), dtype=tl.float32)
    dlnw = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dlnb = tl.zeros((BLOCK_D,), dtype=tl.float32)
    x_next, m_next, dy0_next, dy1_next = _ln_linear_bwd_loads(
        x_ptr, stride_xr, stride_xd, m_ptr, stride_mr, dy0_ptr, stride_dy0, dy1_ptr, stride_dy1, pid, offs_d, d_ok,
        offs_c, c_ok, ROWS, HAS_MASK, EVEN_D, EVEN_C, BLOCK_ROWS)
    for t in range(pid, tl.cdiv(ROWS, BLOCK_ROWS), programs):
        x = x_next.to(tl.float32)  # [BLOCK_D, BLOCK_ROWS]
        m = m_next  # [BLOCK_ROWS]
        dy0 = dy0_next.to(tl.float32)  # [BLOCK_C, BLOCK_ROWS]
        dy1 = dy1_next.to(tl.float32)
        x_next, m_next, dy0_next, dy1_next = _ln_linear_bwd_loads(
            x_ptr, stride_xr, stride_xd, m_ptr, stride_mr, dy0_ptr, stride_dy0, dy1_ptr, stride_dy1, t + programs,
            offs_d, d_ok, offs_c, c_ok, ROWS, HAS_MASK, EVEN_D, EVEN_C, BLOCK_ROWS)
        rows = tl.cast(t, tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # [BLOCK_ROWS]
        r_ok = rows < ROWS
        ok = r_ok[None, :] if EVEN_D else d_ok[:, None] & r_ok[None, :]  # [BLOCK_D or 1, BLOCK_ROWS]
        mean = tl.sum(x, axis=0) / D
        if EVEN_D:
            xc = x - mean[None, :]
        else:
            xc = tl.where(ok, x - mean[None, :], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / D + eps)  # [BLOCK_ROWS]
        xhat = xc * rstd[None, :]  # [BLOCK_D, BLOCK_ROWS], 0 past D
        xn_t = (xhat * lnw[:, None] + lnb[:, None]).to(dtype)
        tl.store(xn_ptr + rows[None, :] * D + offs_d[:, None], xn_t, mask=ok)
        dy_ok = r_ok[None, :] if EVEN_C else c_ok[:, None] & r_ok[None, :]  # [BLOCK_C, BLOCK_ROWS]
        if HAS_MASK:
            dy0 = dy0 * m[None, :]
            dy1 = dy1 * m[None, :]
        dy0 = dy0.to(dtype)  # [BLOCK_C, BLOCK_ROWS], the products' operands
        dy1 = dy1.to(dtype)
        tl.store(dy_ptr + rows[None, :] * (2 * C) + offs_c[:, None], dy0, mask=dy_ok)
        tl.store(dy_ptr + rows[None, :] * (2 * C) + C + offs_c[:, None], dy1, mask=dy_ok)
        if EVEN_D and EVEN_C:
            w0t, w1t = tl.load(w0t_ptrs), tl.load(w1t_ptrs)  # [BLOCK_D, BLOCK_C]
        else:
            w0t, w1t = tl.load(w0t_ptrs, mask=w_ok, other=0.0), tl.load(w1t_ptrs, mask=w_ok, other=0.0)
        dxn = tl.dot(w0t, dy0)  # [BLOCK_D, BLOCK_ROWS]
        dxn = tl.dot(w1t, dy1, dxn)
        db0 += dy0.to(tl.float32)
        db1 += dy1.to(tl.float32)
        dlnw += tl.sum(dxn * xhat, axis=1)
        dlnb += tl.sum(dxn, axis=1)
        g = dxn * lnw[:, None]  # [BLOCK_D, BLOCK_ROWS]
        c1 = tl.sum(g * xhat, axis=0) / D
        c2 = tl.sum(g, axis=0) / D
        dx = (g - c2[None, :] - xhat * c1[None, :]) * rstd[None, :]
        x_ok = rows < ROWS * need_x  # [BLOCK_ROWS], none without need_x (a branch: 280 -> 968 bytes of spills)
        x_ok = x_ok[None, :] if EVEN_D else d_ok[:, None] & x_ok[None, :]
        tl.store(dx_ptr + rows[None, :] * D + offs_d[:, None], dx.to(dx_ptr.dtype.element_ty), mask=x_ok)
    part = part_ptr + pid.to(tl.int64) * stride_part
    tl.store(part + offs_c, tl.sum(db0, axis=1), mask=c_ok)
    tl.store(part + C + offs_c, tl.sum(db1, axis=1), mask=c_ok)
    tl.store(part + 2 * C + offs_d, dlnw, mask=d_ok)
    tl.store(part + 2 * C + D + offs_d, dlnb, mask=d_ok)


def _rows_view(t: torch.Tensor) -> torch.Tensor:
    """t (B, S, N[, D]) as (B*S*N[, D]) rows: a view when its rows are evenly strided, else a contiguous copy.
    (A row index split into b, s, i in the kernel cost ~70 bytes of register spills a thread for sm_90.)"""
    try:
        return t.view(-1, *t.shape[3:])
    except RuntimeError:
        return t.reshape(-1, *t.shape[3:])


# the widest rows and projections `_ln_linear_bwd_kernel` takes: its [BLOCK_D, 16 rows] float32 tiles (4 warps) hold
# 32 registers a thread each at BLOCK_D = 256, the next tile's loads 8-12 more; compiled for sm_90, ~254 registers
# (benchmarks/compile_sm90.py)
LN_LINEAR_BWD_MAX_D = 256
LN_LINEAR_BWD_MAX_C = 64
LN_LINEAR_BWD_ROWS = 16  # the row tile (session 13, loads a tile ahead, opm-af2-main on the H200: 16 rows x 4 warps
# 0.170 ms at 2 programs an SM, 0.172 at 4, 0.217 at 3; 32 rows x 4 warps 0.250 (spills); 32 x 8 warps 0.191)
LN_LINEAR_BWD_PROGRAMS_PER_SM = 2


def ln_linear_backward_fits(dtype: torch.dtype, D: int, C: int) -> bool:
    """Whether `ln_linear_backward` takes 16-bit rows of width D and two projections of C channels each."""
    return dtype in (torch.float16, torch.bfloat16) and 1 <= D <= LN_LINEAR_BWD_MAX_D and 1 <= C <= LN_LINEAR_BWD_MAX_C


def ln_linear_backward(x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, weight: torch.Tensor,
                       mask: torch.Tensor | None, dy0: torch.Tensor, dy1: torch.Tensor, eps: float,
                       need_x: bool = True, out_dtype: torch.dtype = torch.float32):
    """Gradients of `ln_linear`'s LayerNorm, two projections and row mask, y_k = (LayerNorm(x) @ w_k^T +
    bias_k) * mask[..., None] (k = 0, 1; weight = [w_0; w_1]), from the outputs' gradients: one pass over
    the rows that recomputes the LayerNorm (no statistics kept), then one product for the weights.

    x (B, S, N, D) 16-bit (copied when its rows are not evenly strided); ln_weight, ln_bias (D,) any float
    dtype; weight (2 C, D) in x's dtype; mask (B, S, N) float32 or None; dy0, dy1 (B, S, N, C) or
    (B, S, N*C) of any float dtype, the channels contiguous (cast to x's dtype on chip, as the products'
    operands). Returns (dx (B, S, N, D) in x's dtype or None without `need_x`; the LayerNorm weight's and
    bias's gradients (D,); the stacked weights' (2 C, D); the stacked biases' (2 C,)), the parameters' summed in
    float32 in a fixed order (bit-reproducible, the same with or without dx), then rounded once to `out_dtype`
    (the programs' partial sums finished and the weights' product cast in one launch,
    `ops.partial_sums.sum_partials`). Needs ln_linear_backward_fits(x.dtype, D, C)."""
    B, S, N, D = x.shape
    C = weight.shape[0] // 2
    rows = B * S * N
    block_c, block_d = max(16, next_pow2(C)), max(16, next_pow2(D))
    block_rows = LN_LINEAR_BWD_ROWS
    per_sm = LN_LINEAR_BWD_PROGRAMS_PER_SM
    on_gpu = x.is_cuda and not interpreting()  # (CI's launch-path tests run the GPU's tiles on CPU tensors)
    programs = max(1, min(cdiv(rows, block_rows), per_sm * multiprocessors(x.device) if on_gpu else 3))
    part = empty(programs, 2 * C + 2 * D, dtype=torch.float32, device=x.device)
    xn = empty(rows, D, dtype=x.dtype, device=x.device)
    dy = empty(rows, 2 * C, dtype=x.dtype, device=x.device)
    dx = empty(B, S, N, D, dtype=x.dtype, device=x.device) if need_x else None
    dy0, dy1 = dy0.reshape(rows, C), dy1.reshape(rows, C)
    x_rows = _rows_view(x)
    m = _rows_view(mask) if mask is not None else x_rows[:, 0]  # unused without a mask
    cached_launch(_ln_linear_bwd_kernel)(
        (programs,), x_rows, *x_rows.stride(), ln_weight, ln_bias, weight.contiguous(), m, m.stride(0), dy0,
        dy0.stride(0), dy1, dy1.stride(0), dx if need_x else xn, xn, dy, part, part.stride(0), rows, D, C, eps, int(need_x),
        HAS_MASK=mask is not None, EVEN_D=D == block_d, EVEN_C=C == block_c,
        BLOCK_ROWS=block_rows, BLOCK_C=block_c, BLOCK_D=block_d, num_warps=4, num_stages=2)
    dw = float32_product(dy.t(), xn)
    if out_dtype == torch.float32:
        (sums,) = sum_partials([part], out_dtype)
    else:  # the programs' sums and the weights' cast in one launch
        sums, dw = sum_partials([part, dw.view(1, -1)], out_dtype)
        dw = dw.view(2 * C, D)
    db, dlnw, dlnb = sums.split([2 * C, D, D])  # (one call for the three views)
    return dx, dlnw, dlnb, dw, db


def layer_norm_fits(D: int) -> bool:
    """Whether `layer_norm` takes rows of width D (one row tile of BLOCK_D columns a program)."""
    return 16 <= D <= 4096


def ln_project_ready(dtype: torch.dtype, D: int) -> bool:
    """Whether `ln_project` takes rows of width D in `dtype` (16-bit, widths `layer_norm` takes)."""
    return dtype in (torch.float16, torch.bfloat16) and layer_norm_fits(D)


def ln_project(x: torch.Tensor, layer_norm_weight: torch.Tensor, layer_norm_bias: torch.Tensor, weights, biases,
               eps: float):
    """16-bit training: LayerNorm (this module's kernel, with its row statistics), then one cuBLAS
    product over the concatenated weights, without autograd. Returns (y (B, S, N, sum of the weights'
    rows), the normalized rows (B, S, N, D), mean, 1 / std (B, S, N, 1) float32): what a backward needs
    to take the products' and the LayerNorm's gradients by hand (`evofuse._backward`). Row attention's
    training forward and its backward both call it, so the backward's q, k, v are bit for bit the
    forward's."""
    dtype = x.dtype
    xn, mean, rstd = layer_norm(x, layer_norm_weight.to(dtype), layer_norm_bias.to(dtype), eps, stats=True)
    w, bias = torch.cat(list(weights)).to(dtype), torch.cat(list(biases)).to(dtype)
    return torch.nn.functional.linear(xn, w, bias), xn, mean, rstd

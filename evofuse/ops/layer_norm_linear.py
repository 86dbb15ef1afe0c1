"""LayerNorm, a linear layer and a row mask in one pass (the Outer Product Mean's projections).

`_ln_linear_kernel` normalizes a block of rows of x entirely on chip, multiplies by the transposed
weight (all output columns at once: the width is small), adds the bias, scales each row by its mask
value and writes output column k to slot k // SLOT, channel k % SLOT. The normalized x never reaches
device memory, which is both a pass saved and the (B, S, N, D) temporary the memory budget forbids.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import dot_precision, interpreting

# The transposed weight and a tile of rows of x sit in shared memory. Sizes measured by compiling for
# sm_90 (float32 with 3xTF32 / bfloat16): D=512, K=64: 128 KiB / -; D=1024, K=64: - / 160 KiB;
# D=2048, K=16, 16 rows: 256 KiB / -; D=2048, K=32: - / 192 KiB. The H200 gives a block 227 KiB; the
# estimate weight + row tile <= 160 KiB stays under every measurement.
MAX_SHARED_BYTES = 160 * 1024
ROW_TILE_BYTES = 32 * 1024


def _block_rows(block_d: int, elt: int) -> int:
    return 16 if interpreting() else max(16, min(128, (ROW_TILE_BYTES // elt) // block_d))


def fits(D: int, K: int, dtype: torch.dtype) -> bool:
    """Whether a (K, D) weight of `dtype` and its row tile fit the fused kernel's shared memory."""
    elt = 4 if dtype == torch.float32 else 2
    block_d = max(16, triton.next_power_of_2(D))
    weight = block_d * max(16, triton.next_power_of_2(K)) * elt
    return weight + _block_rows(block_d, elt) * block_d * elt <= MAX_SHARED_BYTES


@triton.jit
def _ln_linear_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi, stride_xd,  # x: (B, S, N, D)
    lnw_ptr, lnb_ptr,  # LayerNorm weight, bias: (D,)
    w_ptr, stride_wk, stride_wd,  # linear weight: (K, D)
    bias_ptr,  # linear bias: (K,)
    m_ptr, stride_mb, stride_ms, stride_mi,  # row mask: (B, S, N) float32
    y_ptr, stride_yslot, stride_yrow,  # out: slot k // SLOT, row (b*S + s)*N + i, channel k % SLOT
    ROWS, S, N, D, K, eps,  # ROWS = B * S * N
    SLOT: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # [BLOCK_ROWS]
    rows_ok = rows < ROWS
    b = rows // (S * N)
    s = (rows // N) % S
    i = rows % N
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    x = tl.load(x_ptr + (b * stride_xb + s * stride_xs + i * stride_xi)[:, None] + offs_d[None, :] * stride_xd,
                mask=rows_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)  # [BLOCK_ROWS, BLOCK_D]
    mean = tl.sum(x, axis=1) / D
    xc = tl.where(d_ok[None, :], x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / D + eps)
    lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    xn = (xc * rstd[:, None] * lnw[None, :] + lnb[None, :]).to(w_ptr.dtype.element_ty)  # [BLOCK_ROWS, BLOCK_D]

    offs_k = tl.arange(0, BLOCK_K)
    k_ok = offs_k < K
    w_t = tl.load(w_ptr + offs_k[None, :] * stride_wk + offs_d[:, None] * stride_wd,
                  mask=d_ok[:, None] & k_ok[None, :], other=0.0)  # [BLOCK_D, BLOCK_K]
    y = tl.dot(xn, w_t, input_precision=PRECISION)  # [BLOCK_ROWS, BLOCK_K]
    y += tl.load(bias_ptr + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_MASK:
        m = tl.load(m_ptr + b * stride_mb + s * stride_ms + i * stride_mi, mask=rows_ok, other=0.0)
        y = y * m[:, None]
    y_ptrs = y_ptr + (offs_k // SLOT).to(tl.int64)[None, :] * stride_yslot + rows[:, None] * stride_yrow \
        + (offs_k % SLOT)[None, :]
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=rows_ok[:, None] & k_ok[None, :])


def ln_linear_slots(x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, weight: torch.Tensor,
                    bias: torch.Tensor, mask: torch.Tensor | None, slot: int, eps: float,
                    precision: str) -> torch.Tensor:
    """(LayerNorm(x) @ weight.T + bias) * mask[..., None], split into slots of `slot` channels.

    x (B, S, N, D), any strides; weight (K, D), K a multiple of `slot`; mask (B, S, N) float32 or None.
    Returns (K // slot, B, S, N, slot) contiguous in x's dtype. Needs fits(D, K, x.dtype).
    """
    B, S, N, D = x.shape
    K = weight.shape[0]
    y = torch.empty(K // slot, B, S, N, slot, dtype=x.dtype, device=x.device)
    rows = B * S * N
    if rows == 0:
        return y
    block_d = max(16, triton.next_power_of_2(D))
    block_k = max(16, triton.next_power_of_2(K))
    block_rows = _block_rows(block_d, x.element_size())
    m = mask if mask is not None else y  # unused when HAS_MASK is False
    m_strides = mask.stride() if mask is not None else (0, 0, 0)
    _ln_linear_kernel[(triton.cdiv(rows, block_rows),)](
        x, *x.stride(), ln_weight, ln_bias, weight, *weight.stride(), bias, m, *m_strides,
        y, y.stride(0), slot, rows, S, N, D, K, eps,
        SLOT=slot, HAS_MASK=mask is not None, BLOCK_ROWS=block_rows, BLOCK_D=block_d, BLOCK_K=block_k,
        PRECISION=dot_precision(x.dtype, precision), num_warps=4)
    return y

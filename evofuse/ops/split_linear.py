"""float32 linear layers to the float32 contract on float16 tensor cores: row attention's projections, and
(`split_ln_linear`, the rows split on chip by the fused LayerNorm-linear kernel) the Outer Product Mean's.

y = x W^T + b with x scaled by 2**(k + 6) and W by 2**(6 - k) (k balances their ranges; the product's
alpha 2**-12 undoes the rest, `PRODUCT_SHIFT`), each split into float16 halves hi + lo; one cuBLAS product
over the concatenated halves, [x_hi | x_hi | x_lo] @ [W_hi | W_lo | W_hi]^T = x_hi W_hi + x_hi W_lo +
x_lo W_hi (~2**-22 relative), accumulates and returns float32 and adds the bias
(`torch.addmm(..., alpha=2**-12, out_dtype=torch.float32)`). The
rows go a block at a time, so the float16 copy stays at most BLOCK_BYTES; a LayerNorm can be applied to
the rows on the way (its output is bounded by sqrt(D) max|w| + max|b|, which sets k without a pass).

Measured on the H200 before this path existed: IEEE cuBLAS took 2.80 ms of att-af2-main's 5.57 ms float32
forward for these products (46 TFLOP/s); float16 tensor cores run ~13x that rate.
Limits: max|x| * max|W| from ~2**-12 (below, the scaled operands' low halves fall into float16's
subnormals: 1e-5-scale weights gave 2.4e-5 relative error with the scales cancelling, 2**-6 was then the
edge) to ~2**19 (float16's range). The Outer Product Mean prescales its weights by powers of two and
undoes it in the output's scale.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._common import cached_launch, cdiv, empty, float32_out_products, next_pow2
from .layer_norm_linear import MAX_BLOCK_D, launch_ln_linear, normalize_rows

BLOCK_BYTES = 32 << 20
_SHIFT_CLAMP = 60.0
# log2 of the product of the two operands' scales, undone by the product's alpha (a constant: no host
# synchronization). With 0 (scales that cancel), max|x| * max|W| under ~2**-6 left both operands so small
# that their low halves fell into float16's subnormals (2.4e-5 relative error at 1e-5-scale weights, CPU);
# 12 keeps both in float16's normal range for max|x| * max|W| from ~2**-12 to ~2**19
PRODUCT_SHIFT = 12


@triton.jit
def _split_rows_kernel(
    x_ptr, stride_xr, stride_xd,  # rows of x: (ROWS, D), float32
    lnw_ptr, lnb_ptr,  # LayerNorm weight, bias: (D,) (HAS_LN only)
    shift_ptr,  # one float32 k: x is scaled by 2**k
    a_ptr,  # out: (ROWS, 3D) float16, [x_hi | x_hi | x_lo]
    ROWS, D, eps,
    HAS_LN: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # [BLOCK_ROWS]
    offs_d = tl.arange(0, BLOCK_D)
    ok = (rows < ROWS)[:, None] & (offs_d < D)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xr + offs_d[None, :] * stride_xd, mask=ok, other=0.0)  # [BLOCK_ROWS, BLOCK_D]
    if HAS_LN:
        x = normalize_rows(x, offs_d, D, lnw_ptr, lnb_ptr, eps)
    x = x * tl.math.exp2(tl.load(shift_ptr))
    hi = x.to(tl.float16)
    lo = (x - hi.to(tl.float32)).to(tl.float16)
    a_rows = a_ptr + rows[:, None] * (3 * D) + offs_d[None, :]
    tl.store(a_rows, hi, mask=ok)
    tl.store(a_rows + D, hi, mask=ok)
    tl.store(a_rows + 2 * D, lo, mask=ok)


def _addmm_f32(bias, a16, b16, out, alpha):
    """out = bias + alpha a16 @ b16 with float32 accumulation and output: cuBLAS on CUDA; on the CPU
    (Triton's interpreter, for the tests) the same products in float32 (float16 products are exact there)."""
    if a16.is_cuda:
        return torch.addmm(bias, a16, b16, alpha=alpha, out_dtype=torch.float32, out=out)
    return torch.addmm(bias, a16.float(), b16.float(), alpha=alpha, out=out)


def available(x: torch.Tensor) -> bool:
    """Whether split_linear runs for this tensor (float32; CUDA with out_dtype support, or the CPU)."""
    if x.dtype != torch.float32:
        return False
    return float32_out_products() if x.is_cuda else True


def _log2_max(t: torch.Tensor) -> torch.Tensor:
    return torch.log2(torch.linalg.vector_norm(t, float("inf")))


def _ln_log2_max(ln, D: int) -> torch.Tensor:
    """log2 of a bound on |LayerNorm(x)| with ln = (weight, bias, eps): sqrt(D) max|weight| + max|bias|."""
    return torch.log2(math.sqrt(D) * torch.linalg.vector_norm(ln[0].float(), float("inf"))
                      + torch.linalg.vector_norm(ln[1].float(), float("inf")))


def _operands(weight: torch.Tensor, log2_max_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows' exponent k (one float32: x is scaled by 2**k) and the weight (K, D) scaled and split into
    float16 halves, (K, 3D) [w_hi | w_lo | w_hi]; both maxima at sqrt(max|x| max|W|) times
    2**(PRODUCT_SHIFT / 2). Device tensors only: no host synchronization."""
    w = weight.float()
    shift = torch.round(0.5 * (_log2_max(w) - log2_max_x))
    shift = torch.where(torch.isfinite(shift), shift, 0.0).clamp(-_SHIFT_CLAMP, _SHIFT_CLAMP).reshape(1)
    w_scaled = w * torch.exp2(PRODUCT_SHIFT / 2 - shift)
    w_hi = w_scaled.half()
    return shift + PRODUCT_SHIFT / 2, torch.cat([w_hi, (w_scaled - w_hi.float()).half(), w_hi], dim=1)


def fused_rows(D: int) -> bool:
    """Whether split_ln_linear takes rows of width D."""
    return max(16, next_pow2(D)) <= MAX_BLOCK_D


def split_ln_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                    ln: tuple[torch.Tensor, torch.Tensor, float], mask: torch.Tensor | None, scale: torch.Tensor,
                    slot: int, amax: torch.Tensor | None = None) -> torch.Tensor:
    """(LayerNorm(x) @ weight.T + bias) * mask[..., None] * scale in float32 to ~2**-22 relative, in one
    pass over the rows: `_ln_linear_kernel` normalizes a tile of rows, splits it into float16 halves
    (scaled as in split_linear) and makes the three products on chip (no float16 copy of the rows, no
    intermediate output; ~20 fewer launches than split_linear's blocks of rows and the rescaling after).

    x (B, S, N, D) float32, any strides, fused_rows(D); weight (K, D), bias (K,); ln = (weight (D,),
    bias (D,), eps); mask (B, S, N) float32 or None; scale a one-element float32 tensor. Returns
    (K // slot, B, S, N, slot) float32, contiguous (slot divides K). Limits as split_linear's, with
    max|x| read as sqrt(D) max|ln weight| + max|ln bias|. `amax` ((K // slot,) int32 zeros, slot a power of
    two) receives each slot's max |output| as float32 bits (no pass over the output after).
    """
    B, S, N, D = x.shape
    K = weight.shape[0]
    if amax is not None and slot & (slot - 1):
        raise ValueError(f"split_ln_linear gives maxima for slots of a power of two, got {slot}")
    shift, w16 = _operands(weight, _ln_log2_max(ln, D))
    y = empty(K // slot, B, S, N, slot, dtype=torch.float32, device=x.device)
    if y.numel():
        launch_ln_linear(x, w16, bias.float(), ln[0], ln[1], mask, y, slot, ln[2],
                         split=(shift, scale.reshape(1), 2.0 ** -PRODUCT_SHIFT), amax=amax)
    return y


def split_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                 ln: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> torch.Tensor:
    """(LayerNorm(x) if ln else x) @ weight.T + bias in float32 to ~2**-22 relative.

    x (rows, D) float32 with unit channel stride; weight (K, D), bias (K,), ln = (weight (D,), bias (D,),
    eps). Returns (rows, K) float32, contiguous. Needs available(x).
    """
    rows, D = x.shape
    K = weight.shape[0]
    if ln is not None:
        lnw, lnb, eps = ln[0].float(), ln[1].float(), ln[2]
        shift, w16 = _operands(weight, _ln_log2_max(ln, D))
    else:
        lnw, lnb, eps = bias, bias, 0.0  # unused
        shift, w16 = _operands(weight, _log2_max(x))
    b16 = w16.t()  # (3D, K)
    out = empty(rows, K, dtype=torch.float32, device=x.device)
    block_d = max(16, next_pow2(D))
    block_rows = max(1, min(rows, BLOCK_BYTES // (3 * D * 2)))
    a16 = torch.empty(block_rows, 3 * D, dtype=torch.float16, device=x.device)
    kernel_rows = max(1, 4096 // block_d)
    for r0 in range(0, rows, block_rows):
        n = min(block_rows, rows - r0)
        xb = x[r0:r0 + n]
        cached_launch(_split_rows_kernel)(
            (cdiv(n, kernel_rows),), xb, xb.stride(0), xb.stride(1), lnw, lnb, shift, a16, n, D, eps,
            HAS_LN=ln is not None, BLOCK_ROWS=kernel_rows, BLOCK_D=block_d)
        _addmm_f32(bias.float(), a16[:n], b16, out[r0:r0 + n], 2.0 ** -PRODUCT_SHIFT)
    return out

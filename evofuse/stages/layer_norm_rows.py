"""A LayerNorm's arithmetic on rows held on chip, shared by the kernels that normalize rows: `centred_rows` (the
rows less their mean, and their variance), `layer_norm_rows` (the standardized rows, 1 / std and the
LayerNorm's output rounded as the reference's), `normalized` (whole rows' LayerNorm output, from moments shifted as
`row_moments`') and `row_moments` (mean and 1 / std of rows read in chunks)."""

import triton
import triton.language as tl


@triton.jit
def centred_rows(x, ok, D, EXACT_SUMS: tl.constexpr):
    """(xc, var): rows x [rows, BLOCK_D] float32 less their mean, zero where not ok, and their variance, [rows].
    Unless EXACT_SUMS (rows of a 16-bit dtype, whose sums float32 holds exactly where the rows are nearly
    constant), the mean's rounding is taken back from the centred rows' sum: otherwise a float32 row of equal
    channels would centre to its mean's rounding error, which 1 / sqrt(var + eps) magnifies up to 316 times."""
    xc = tl.where(ok, x - (tl.sum(x, axis=1) / D)[:, None], 0.0)
    if not EXACT_SUMS:
        xc = tl.where(ok, xc - (tl.sum(xc, axis=1) / D)[:, None], 0.0)
    return xc, tl.sum(xc * xc, axis=1) / D


@triton.jit
def layer_norm_rows(x, p_ok, P, eps, lnw, lnb, dtype: tl.constexpr):
    """(xhat, rstd, xn) of rows x [rows, BLOCK_P] float32 (padding channels zero): the standardized rows, their
    1 / std and LayerNorm(x) rounded to `dtype` (as the reference's LayerNorm output is), back in float32 (zero in
    the padding channels where lnw and lnb are): `pair_heads`' backward and pair-weighted averaging's LayerNorm of
    the MSA rows that its gate is made from."""
    xc, var = centred_rows(x, p_ok[None, :], P, dtype != tl.float32)
    rstd = 1.0 / tl.sqrt(var + eps)
    xhat = xc * rstd[:, None]
    return xhat, rstd, (xhat * lnw[None, :] + lnb[None, :]).to(dtype).to(tl.float32)


@triton.jit
def row_moments(x_rows, m_ok, stride_xd, D, eps, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """The mean and 1 / sqrt(variance + eps) in float32 of the rows at x_rows [BLOCK_M, 1] (channels stride_xd
    apart), over chunks of BLOCK_D (the variance about the mean, in a second pass, which also takes back the mean's
    rounding: see `centred_rows`)."""
    mean = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        x = tl.load(x_rows + offs_d.to(tl.int64)[None, :] * stride_xd, mask=m_ok[:, None] & (offs_d < D)[None, :], other=0.0)
        mean += tl.sum(x.to(tl.float32), axis=1)
    mean = mean / D
    var = tl.zeros((BLOCK_M,), dtype=tl.float32)
    shift = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        ok = m_ok[:, None] & (offs_d < D)[None, :]
        x = tl.load(x_rows + offs_d.to(tl.int64)[None, :] * stride_xd, mask=ok, other=0.0)
        xc = tl.where(ok, x.to(tl.float32) - mean[:, None], 0.0)  # [BLOCK_M, BLOCK_D]
        var += tl.sum(xc * xc, axis=1)
        shift += tl.sum(xc, axis=1)
    shift = shift / D
    return mean + shift, 1.0 / tl.sqrt(tl.maximum(var / D - shift * shift, 0.0) + eps)


@triton.jit
def normalized(x, ok, lnw_ptr, lnb_ptr, D, eps, dtype: tl.constexpr, BLOCK_D: tl.constexpr):
    """LayerNorm of whole rows already read, [BLOCK_M, BLOCK_D] in `dtype`, zero in the padding channels: x
    [BLOCK_M, BLOCK_D] float32, zero where not `ok` (the padding channels, rows past the last); `layer_norm_glu`'s
    `normalized_rows` and its pass through tensor descriptors."""
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    mean = tl.sum(x, axis=1) / D
    xc = tl.where(ok, x - mean[:, None], 0.0)
    shift = tl.sum(xc, axis=1) / D
    rstd = 1.0 / tl.sqrt(tl.maximum(tl.sum(xc * xc, axis=1) / D - shift * shift, 0.0) + eps)
    xhat = (x - (mean + shift)[:, None]) * rstd[:, None]
    lnw = tl.load(lnw_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    return tl.where(d_ok[None, :], xhat * lnw[None, :] + lnb[None, :], 0.0).to(dtype)

"""A LayerNorm's arithmetic on rows held on chip, shared by the kernels that normalize rows: `centred_rows` (the
rows less their mean, and their variance) and `layer_norm_rows` (the standardized rows, 1 / std and the
LayerNorm's output rounded as the reference's)."""

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

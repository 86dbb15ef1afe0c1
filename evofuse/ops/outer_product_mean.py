"""Fused Outer Product Mean forward (SPEC 1) in Triton.

Two stages:
1. LayerNorm, the two projections and the mask in one pass (`layer_norm_linear`): a, b (B, S, N, c).
2. `_opm_kernel`: per batch element and tile of residues (i, j), the outer products contracted over
   the MSA rows, X[(i p), (j q)] = sum_s a[s, i, p] b[s, j, q], accumulate in fp32 on chip; the tile is
   rearranged to X[(i j), (p q)], scaled by the normalization and contracted with out_proj's weight
   in the epilogue, and only the (B, N, N, pair_dim) output is written. No N*N*c*c tensor exists.
   Its operands are 16-bit: bfloat16/float16 inputs as they are, float32 inputs at the "fast"
   precision as float16. float32 at the default precision runs stage 2 as cuBLAS IEEE products on
   blocks of output rows (`_outer_product_mean_blocks`).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..reference import AF2_EPS, LAYER_NORM_EPS, NORMALIZATIONS, outer_product_mean_projections, outer_product_mean_rows
from ._common import bucket, empty, ieee_fp32_matmul, launch
from .layer_norm_linear import fits, ln_linear

FAST_HIDDEN_DIMS = (8, 16, 32)
_NORM_CODE = {name: k for k, name in enumerate(NORMALIZATIONS)}  # seed 0, af2 1, boltz 2


@triton.jit
def _opm_kernel(
    a_ptr, stride_ab, stride_as, stride_ai,  # a: (B, S, N, C), masked; channel stride 1
    b_ptr, stride_bb, stride_bs, stride_bj,  # b: (B, S, N, C), masked; channel stride 1
    m_ptr, stride_mb, stride_ms, stride_mi,  # mask: (B, S, N) float32 (af2 / boltz only)
    rden_ptr, stride_rb, stride_ri,  # 1 / max(sum_s mask, 1): (B, N) float32 (seed only)
    w_ptr, stride_wr, stride_wk,  # out_proj weight: (R, C*C)
    wb_ptr,  # out_proj bias: (R,)
    o_ptr, stride_ob, stride_oi, stride_oj, stride_or,  # out: (B, N, N, R)
    S, N, R,
    S_BUCKET, N_BUCKET,  # autotuning keys only
    C: tl.constexpr,
    NORM: tl.constexpr,  # 0 seed, 1 af2, 2 boltz
    EPS: tl.constexpr,
    TILE_ROWS: tl.constexpr,  # BLOCK_I * C, rows of the first product
    COLS_FACTOR: tl.constexpr,  # BLOCK_J = COLS_FACTOR * BLOCK_I
    BLOCK_S: tl.constexpr,
    BLOCK_R: tl.constexpr,
    GROUP_I: tl.constexpr,
):
    BLOCK_I: tl.constexpr = TILE_ROWS // C
    BLOCK_J: tl.constexpr = BLOCK_I * COLS_FACTOR
    pid = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    n_i = tl.cdiv(N, BLOCK_I)
    n_j = tl.cdiv(N, BLOCK_J)
    # grouped ordering: programs that run together share a rows and b columns in L2
    group = pid // (GROUP_I * n_j)
    first_i = group * GROUP_I
    group_size = tl.minimum(n_i - first_i, GROUP_I)
    blk_i = first_i + (pid % (GROUP_I * n_j)) % group_size
    blk_j = (pid % (GROUP_I * n_j)) // group_size

    # rows of the first product are (i, p), columns (j, q)
    rows = tl.arange(0, BLOCK_I * C)
    cols = tl.arange(0, BLOCK_J * C)
    row_i = blk_i * BLOCK_I + rows // C  # [BLOCK_I*C]
    col_j = blk_j * BLOCK_J + cols // C  # [BLOCK_J*C]
    row_off = row_i.to(tl.int64) * stride_ai + rows % C
    col_off = col_j.to(tl.int64) * stride_bj + cols % C
    offs_s = tl.arange(0, BLOCK_S)
    a_base = a_ptr + pid_b * stride_ab
    b_base = b_ptr + pid_b * stride_bb

    offs_i = blk_i * BLOCK_I + tl.arange(0, BLOCK_I)  # [BLOCK_I]
    offs_j = blk_j * BLOCK_J + tl.arange(0, BLOCK_J)  # [BLOCK_J]
    acc = tl.zeros((BLOCK_I * C, BLOCK_J * C), dtype=tl.float32)
    norm = tl.zeros((BLOCK_I, BLOCK_J), dtype=tl.float32)
    for s0 in range(0, S, BLOCK_S):
        s = s0 + offs_s
        s_ok = s < S
        s64 = s.to(tl.int64)
        a_t = tl.load(  # [BLOCK_I*C, BLOCK_S]
            a_base + row_off[:, None] + s64[None, :] * stride_as,
            mask=(row_i < N)[:, None] & s_ok[None, :], other=0.0)
        b_t = tl.load(  # [BLOCK_S, BLOCK_J*C]
            b_base + s64[:, None] * stride_bs + col_off[None, :],
            mask=s_ok[:, None] & (col_j < N)[None, :], other=0.0)
        acc = tl.dot(a_t, b_t, acc)  # 16-bit operands, fp32 accumulator
        if NORM != 0:
            m_base = m_ptr + pid_b * stride_mb + s64 * stride_ms
            m_i = tl.load(m_base[:, None] + offs_i[None, :] * stride_mi,
                          mask=s_ok[:, None] & (offs_i < N)[None, :], other=0.0)  # [BLOCK_S, BLOCK_I]
            m_j = tl.load(m_base[:, None] + offs_j[None, :] * stride_mi,
                          mask=s_ok[:, None] & (offs_j < N)[None, :], other=0.0)  # [BLOCK_S, BLOCK_J]
            norm += tl.sum(m_i[:, :, None] * m_j[:, None, :], axis=0)  # [BLOCK_I, BLOCK_J]

    # per-(i, j) scale of the outer products, and of the bias (af2 divides after the linear)
    if NORM == 0:
        rden = tl.load(rden_ptr + pid_b * stride_rb + offs_i * stride_ri, mask=offs_i < N, other=1.0)
        scale = tl.broadcast_to(rden[:, None], (BLOCK_I, BLOCK_J))
    elif NORM == 1:
        scale = 1.0 / (EPS + norm)
    else:
        scale = 1.0 / tl.maximum(norm, 1.0)
    scale = tl.reshape(scale, (BLOCK_I * BLOCK_J,))

    x = tl.reshape(acc, (BLOCK_I, C, BLOCK_J, C))
    x = tl.permute(x, (0, 2, 1, 3))
    x = tl.reshape(x, (BLOCK_I * BLOCK_J, C * C))  # [(i j), (p q)]
    x = (x * scale[:, None]).to(w_ptr.dtype.element_ty)

    pair = tl.arange(0, BLOCK_I * BLOCK_J)
    out_i = blk_i * BLOCK_I + pair // BLOCK_J
    out_j = blk_j * BLOCK_J + pair % BLOCK_J
    pair_ok = (out_i < N) & (out_j < N)
    o_base = o_ptr + pid_b * stride_ob + out_i.to(tl.int64) * stride_oi + out_j.to(tl.int64) * stride_oj
    offs_k = tl.arange(0, C * C)
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        r_ok = offs_r < R
        w_t = tl.load(w_ptr + offs_k[:, None] * stride_wk + offs_r[None, :] * stride_wr,
                      mask=r_ok[None, :], other=0.0)  # [C*C, BLOCK_R]
        out = tl.dot(x, w_t)  # [(i j), BLOCK_R]
        wb = tl.load(wb_ptr + offs_r, mask=r_ok, other=0.0).to(tl.float32)
        if NORM == 1:
            out += scale[:, None] * wb[None, :]
        else:
            out += wb[None, :]
        tl.store(o_base[:, None] + offs_r[None, :] * stride_or, out.to(o_ptr.dtype.element_ty),
                 mask=pair_ok[:, None] & r_ok[None, :])


def _configs() -> list[triton.Config]:
    """Candidate tiles; the first that survives pruning is the default (EVOFUSE_AUTOTUNE=0)."""
    out = []
    for tile_rows, cols_factor, block_s, block_r, warps, stages in (
        (128, 1, 32, 16, 8, 2), (128, 1, 64, 32, 8, 3), (128, 1, 32, 32, 8, 3), (128, 1, 64, 16, 8, 3),
        (128, 2, 32, 16, 8, 2), (128, 2, 64, 32, 8, 3), (128, 1, 64, 64, 8, 3), (128, 1, 32, 32, 4, 3),
        (64, 1, 64, 32, 4, 3), (64, 2, 64, 32, 8, 3), (64, 1, 32, 16, 4, 2),
    ):
        out.append(triton.Config({"TILE_ROWS": tile_rows, "COLS_FACTOR": cols_factor, "BLOCK_S": block_s,
                                  "BLOCK_R": block_r, "GROUP_I": 8}, num_warps=warps, num_stages=stages))
    return out


def _prune(configs, named_args, **kwargs):
    """Keeps tiles with at least 16 (i, j) pairs (tl.dot's smallest M) and at most 128 x 256 outer
    products (the fp32 accumulator lives in registers)."""
    C = kwargs["C"]
    kept = []
    for cfg in configs:
        bi = cfg.kwargs["TILE_ROWS"] // C
        bj = bi * cfg.kwargs["COLS_FACTOR"]
        if bi >= 1 and bi * bj >= 16 and bi * C * bj * C <= 128 * 256:
            kept.append(cfg)
    return kept


@functools.lru_cache(maxsize=None)
def _tuned_kernel():
    """The kernel autotuned on c, the output width, the normalization and power-of-two buckets of S and
    N (GPU only; built on first use so that importing needs no device)."""
    return triton.autotune(configs=_configs(), key=["C", "R", "S_BUCKET", "N_BUCKET", "NORM"],
                           prune_configs_by={"early_config_prune": _prune})(_opm_kernel)


def _interpret_meta(C: int) -> dict:
    """In Triton's interpreter (CI): one small config (16 (i, j) pairs a tile, 16 rows of S a step),
    so that the awkward test shapes cross tile edges."""
    return {"TILE_ROWS": 4 * C, "COLS_FACTOR": 1, "BLOCK_S": 16, "BLOCK_R": 16, "GROUP_I": 2}


def project(msa_repr, mask, layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias, proj_b_weight,
            proj_b_bias, precision):
    """LayerNorm, both projections and the mask (float32 (B, S, N) or None): a, b (B, S, N, c) contiguous.

    One fused pass where the weight fits on chip (no normalized copy of the MSA in memory); wider
    representations go through the reference's first half, a block of MSA rows at a time.
    """
    B, S, N, D = msa_repr.shape
    c = proj_a_weight.shape[0]
    dtype = msa_repr.dtype
    if fits(D, 2 * c, dtype):
        w = torch.cat([proj_a_weight, proj_b_weight]).to(dtype)
        bias = torch.cat([proj_a_bias, proj_b_bias]).to(dtype)
        ab = ln_linear(msa_repr, w, bias, layer_norm_weight, layer_norm_bias, mask, slot=c, eps=LAYER_NORM_EPS,
                       precision=precision)
        return ab[0], ab[1]
    ab = torch.empty(2, B, S, N, c, dtype=dtype, device=msa_repr.device)
    params = [p.to(dtype) for p in (layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias, proj_b_weight,
                                    proj_b_bias)]
    rows = max(1, (32 << 20) // max(1, B * N * D * msa_repr.element_size()))  # ~32 MiB of normalized MSA at a time
    for s0 in range(0, S, rows):
        block_mask = None if mask is None else mask[:, s0:s0 + rows]
        ab[0, :, s0:s0 + rows], ab[1, :, s0:s0 + rows], _ = outer_product_mean_projections(
            msa_repr[:, s0:s0 + rows], block_mask, *params)
    return ab[0], ab[1]


def outer_product_mean_triton(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, proj_a_weight,
                              proj_a_bias, proj_b_weight, proj_b_bias, out_proj_weight, out_proj_bias,
                              normalization="seed", precision="default"):
    """Fused forward; arguments as `evofuse.functional.outer_product_mean` (already validated)."""
    B, S, N, _ = msa_repr.shape
    c = proj_a_weight.shape[0]
    R = out_proj_weight.shape[0]
    dtype = msa_repr.dtype
    device = msa_repr.device
    if B * N * N * R == 0:
        return empty(B, N, N, R, dtype=dtype, device=device)
    mask = None if msa_mask is None else msa_mask.to(torch.float32)
    a, b = project(msa_repr, mask, layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias,
                   proj_b_weight, proj_b_bias, precision)
    if mask is None:
        mask = torch.ones(1, 1, 1, dtype=torch.float32, device=device).expand(B, S, N)
    if dtype == torch.float32 and precision == "default":
        return _outer_product_mean_blocks(a, b, mask, out_proj_weight, out_proj_bias, normalization)
    if dtype == torch.float32:  # "fast": float16 operands (11-bit mantissa), float32 accumulation and output
        a, b = a.half(), b.half()
    out = empty(B, N, N, R, dtype=dtype, device=device)
    rden = 1.0 / mask.sum(1).clamp(min=1.0)  # (B, N), used by the seed normalization
    w = out_proj_weight.to(a.dtype)
    wb = out_proj_bias.to(torch.float32)
    args = (a, *a.stride()[:3], b, *b.stride()[:3], mask, *mask.stride(), rden, *rden.stride(),
            w, *w.stride(), wb, out, *out.stride(), S, N, R, bucket(S), bucket(N))
    consts = {"C": c, "NORM": _NORM_CODE[normalization], "EPS": AF2_EPS}

    def grid(meta):
        bi = meta["TILE_ROWS"] // c
        return (triton.cdiv(N, bi) * triton.cdiv(N, bi * meta["COLS_FACTOR"]), B)

    launch(_opm_kernel, _tuned_kernel, _configs, _prune, grid, args, consts, _interpret_meta(c))
    return out


FP32_BLOCK_BYTES = 16 << 20


def _outer_product_mean_blocks(a, b, counts, out_proj_weight, out_proj_bias, normalization):
    """float32 at the default precision: the reference's second half on blocks of output rows, in
    cuBLAS IEEE float32 (~16 MiB of outer products a block).

    Measured on the H200, 2026-11-29: the 3xTF32 Triton kernel ran opm-af2-main in 59.7 ms (only one
    tile fits shared memory with float32 operands) where eager float32 cuBLAS took 5.4 ms, so float32
    at the default precision takes cuBLAS on bounded blocks instead.
    """
    B, S, N, c = a.shape
    R = out_proj_weight.shape[0]
    out = empty(B, N, N, R, dtype=a.dtype, device=a.device)
    rows = max(1, FP32_BLOCK_BYTES // (B * N * c * c * a.element_size()))
    with ieee_fp32_matmul():
        for i0 in range(0, N, rows):
            out[:, i0:i0 + rows] = outer_product_mean_rows(a[:, :, i0:i0 + rows], b, counts[:, :, i0:i0 + rows],
                                                           counts, out_proj_weight, out_proj_bias, normalization)
    return out

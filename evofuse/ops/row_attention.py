"""Fused MSA row attention with pair bias, forward (SPEC 2), in Triton.

Three stages:
1. LayerNorm and the query/key/value/gate projections as one GEMM over the concatenated weights:
   qkvg (B, S, N, 4D), read in place by the kernel (no head permutes).
2. The pair bias, computed once per batch element (not per MSA row): (B, h, N, N).
3. `_row_attention_kernel`: flash-style, one program per (b, h, block of query rows i, s), streaming
   blocks of keys j with an online softmax; the key mask replaces logits by -1e9 (a fully masked
   row is the mean of v over all keys, never NaN); the sigmoid gate is applied in the epilogue and
   the merged-heads layout (B, S, N, D) is written over the queries, so out_proj is one GEMM on a
   strided view. No S*h*N*N tensor, and no buffer beyond qkvg, the pair bias and the output.
4. out_proj, one GEMM reading the strided (rows, D) view of qkvg in place.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..reference import LAYER_NORM_EPS, MASK_LOGIT
from ._common import bucket, dot_precision, ieee_fp32_matmul, launch

MAX_HEAD_DIM = 128
_LOG2E = 1.4426950408889634


@triton.jit
def _row_attention_kernel(
    x_ptr, stride_xb, stride_xs, stride_xi,  # qkvg: (B, S, N, 4D); channel 0*D + h*d + e is q, 1*D.. k, 2*D.. v, 3*D.. gate
    z_ptr, stride_zb, stride_zh, stride_zi, stride_zj,  # pair bias: (B, h, N, N)
    m_ptr, stride_mb, stride_ms, stride_mj,  # key mask: (B, S, N) int8, 0 = masked
    S, N, H, D, HEAD_DIM, qk_scale,  # qk_scale = log2(e) / sqrt(d)
    N_BUCKET,  # autotuning key only
    HAS_MASK: tl.constexpr,
    LOG2E: tl.constexpr,
    MASKED_LOGIT: tl.constexpr,  # -1e9 in log2 units
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    # s varies fastest so that programs running together share the (b, h) pair-bias tile in L2
    s = pid % S
    rest = pid // S
    n_blk = tl.cdiv(N, BLOCK_M)
    blk_i = rest % n_blk
    rest = rest // n_blk
    h = rest % H
    b = rest // H

    offs_i = blk_i * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_e = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    i_ok = offs_i < N
    e_ok = offs_e < HEAD_DIM
    row_base = x_ptr + b * stride_xb + s * stride_xs
    q_ptrs = row_base + offs_i.to(tl.int64)[:, None] * stride_xi + (h * HEAD_DIM + offs_e)[None, :]
    q = tl.load(q_ptrs, mask=i_ok[:, None] & e_ok[None, :], other=0.0)  # [BLOCK_M, BLOCK_D]
    z_base = z_ptr + b * stride_zb + h * stride_zh + offs_i.to(tl.int64)[:, None] * stride_zi
    m_base = m_ptr + b * stride_mb + s * stride_ms

    m_run = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_run = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for j0 in range(0, N, BLOCK_N):
        offs_j = j0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
        j_ok = offs_j < N
        kv_ptrs = row_base + offs_j.to(tl.int64)[:, None] * stride_xi + (h * HEAD_DIM + offs_e)[None, :]
        kv_mask = j_ok[:, None] & e_ok[None, :]
        k = tl.load(kv_ptrs + D, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        v = tl.load(kv_ptrs + 2 * D, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        z = tl.load(z_base + offs_j[None, :] * stride_zj, mask=i_ok[:, None] & j_ok[None, :], other=0.0)
        logit = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + z.to(tl.float32) * LOG2E
        if HAS_MASK:
            key_on = tl.load(m_base + offs_j * stride_mj, mask=j_ok, other=0) != 0  # [BLOCK_N]
            logit = tl.where(key_on[None, :], logit, MASKED_LOGIT)  # replaced, not added
        logit = tl.where(j_ok[None, :], logit, float("-inf"))  # [BLOCK_M, BLOCK_N], log2 units
        m_new = tl.maximum(m_run, tl.max(logit, axis=1))
        p = tl.math.exp2(logit - m_new[:, None])
        alpha = tl.math.exp2(m_run - m_new)
        l_run = l_run * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_run = m_new

    g = tl.load(q_ptrs + 3 * D, mask=i_ok[:, None] & e_ok[None, :], other=0.0).to(tl.float32)
    out = acc / l_run[:, None] * tl.sigmoid(g)
    # the output overwrites this program's own queries (read above, by no other program): no race,
    # and the merged-heads output needs no buffer of its own
    tl.store(q_ptrs, out.to(x_ptr.dtype.element_ty), mask=i_ok[:, None] & e_ok[None, :])


def _configs() -> list[triton.Config]:
    """Candidate tiles; the first that survives pruning is the default (EVOFUSE_AUTOTUNE=0)."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st)
            for bm, bn, w, st in ((64, 64, 4, 2), (64, 32, 4, 2), (32, 32, 4, 2), (64, 64, 4, 3),
                                  (64, 128, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 2),
                                  (64, 128, 8, 2), (128, 32, 4, 3), (32, 64, 4, 3), (128, 32, 8, 3),
                                  (128, 64, 8, 2), (64, 32, 8, 3))]


def _prune(configs, named_args, **kwargs):
    """Drops tiles far larger than the sequence and register-heavy tiles for wide heads."""
    n = kwargs["N_BUCKET"]
    block_d = kwargs["BLOCK_D"]
    kept = [c for c in configs
            if c.kwargs["BLOCK_M"] <= max(n, 32) and c.kwargs["BLOCK_N"] <= max(n, 32)
            and not (block_d >= 128 and c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] > 64 * 128)]
    return kept or configs[:1]


@functools.lru_cache(maxsize=None)
def _tuned_kernel():
    """Autotuned on the head width, the precision and a power-of-two bucket of N (GPU only). The kernel
    writes over its queries, so the tuner restores qkvg after each trial run."""
    return triton.autotune(configs=_configs(), key=["N_BUCKET", "HEAD_DIM", "BLOCK_D", "PRECISION", "HAS_MASK"],
                           prune_configs_by={"early_config_prune": _prune}, restore_value=["x_ptr"])(_row_attention_kernel)


# In Triton's interpreter (CI): small tiles, so that the awkward test shapes cross tile edges.
_INTERPRET_META = {"BLOCK_M": 16, "BLOCK_N": 16}


def project(msa_repr, layer_norm_weight, layer_norm_bias, weights, biases):
    """LayerNorm, then the q, k, v, gate projections as one cuBLAS product: (B, S, N, 4D).

    (The fused LayerNorm-linear kernel ran this 0.61 ms against these two passes' 0.44 ms on
    att-af2-main bf16 on the H200.) float32 products are IEEE, whatever the global TF32 setting."""
    D = msa_repr.shape[-1]
    dtype = msa_repr.dtype
    x = F.layer_norm(msa_repr, (D,), layer_norm_weight.to(dtype), layer_norm_bias.to(dtype), LAYER_NORM_EPS)
    with ieee_fp32_matmul():
        return F.linear(x, torch.cat(weights).to(dtype), torch.cat(biases).to(dtype))


def out_projection(qkvg, weight, bias):
    """out_proj on the gated attention output, which sits in the first D channels of qkvg: one cuBLAS
    product on the strided (rows, D) view, row stride 4D (F.linear on the 4-D view copied it first:
    0.14 ms on att-af2-main bf16)."""
    B, S, N, D4 = qkvg.shape
    D = D4 // 4
    x = qkvg.view(B * S * N, D4)[:, :D]
    with ieee_fp32_matmul():
        return torch.addmm(bias.to(qkvg.dtype), x, weight.to(qkvg.dtype).t()).view(B, S, N, D)


def msa_row_attention_triton(msa_repr, pair_repr, msa_mask, layer_norm_weight, layer_norm_bias,
                             query_weight, query_bias, key_weight, key_bias, value_weight, value_bias,
                             gate_weight, gate_bias, out_proj_weight, out_proj_bias, pair_bias_weight,
                             pair_bias_bias, num_heads, precision="default"):
    """Fused forward; arguments as `evofuse.functional.msa_row_attention` (already validated)."""
    B, S, N, D = msa_repr.shape
    h = num_heads
    d = D // h
    dtype = msa_repr.dtype
    if msa_repr.numel() == 0:
        return torch.empty(B, S, N, D, dtype=dtype, device=msa_repr.device)
    qkvg = project(msa_repr, layer_norm_weight, layer_norm_bias,
                   (query_weight, key_weight, value_weight, gate_weight),
                   (query_bias, key_bias, value_bias, gate_bias))
    z = F.linear(pair_repr.to(dtype), pair_bias_weight.to(dtype), pair_bias_bias.to(dtype))
    z = z.permute(0, 3, 1, 2).contiguous()  # (B, h, N, N)
    if msa_mask is None:
        mask = torch.ones(1, 1, 1, dtype=torch.int8, device=msa_repr.device).expand(B, S, N)
    else:
        mask = (msa_mask != 0).to(torch.int8)
    args = (qkvg, *qkvg.stride()[:3], z, *z.stride(), mask, *mask.stride(), S, N, h, D, d, _LOG2E / math.sqrt(d))
    consts = {"N_BUCKET": bucket(N), "HAS_MASK": msa_mask is not None, "LOG2E": _LOG2E,
              "MASKED_LOGIT": MASK_LOGIT * _LOG2E, "BLOCK_D": max(16, triton.next_power_of_2(d)),
              "PRECISION": dot_precision(dtype, precision)}
    launch(_row_attention_kernel, _tuned_kernel, _configs, _prune,
           lambda meta: (B * h * triton.cdiv(N, meta["BLOCK_M"]) * S,), args, consts, _INTERPRET_META)
    return out_projection(qkvg, out_proj_weight, out_proj_bias)

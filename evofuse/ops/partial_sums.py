"""Partial sums finished: float32 buffers of per-program partial sums added over their rows in a fixed order and
rounded once to the gradients' dtype, up to four buffers in one launch.

The backward kernels that sum a parameter's gradient over many rows (every (b, s, i) or pair (b, i, j)) write one
float32 partial sum per program, never atomics, so that the sums' order is fixed (bit-reproducible gradients).
`sum_partials` ends them: where PyTorch took a sum and a cast for each (~23 us of the lent H200 hosts' time an
op, four to seven ops an Outer Product Mean backward), one launch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import cached_launch, cdiv, empty, next_pow2

MAX_BUFFERS = 4  # buffers a launch
TILE = 4096  # elements of a program's [BLOCK_K, BLOCK_M] tile (32 float32 registers a thread at 4 warps)


@triton.jit
def _sum_rows(p_ptr, stride_pk, K, M, out_ptr, block, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr):
    """out[m] = sum over k of p[k, m] for the columns m of `block`: [BLOCK_K, BLOCK_M] tiles added in order, then
    the tile's rows summed (an order fixed by the block sizes)."""
    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    m_ok = offs_m < M
    acc = tl.zeros((BLOCK_K, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)  # [BLOCK_K]
        ptrs = p_ptr + offs_k[:, None].to(tl.int64) * stride_pk + offs_m[None, :]  # [BLOCK_K, BLOCK_M]
        acc += tl.load(ptrs, mask=(offs_k < K)[:, None] & m_ok[None, :], other=0.0)
    tl.store(out_ptr + offs_m, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=m_ok)


@triton.jit
def _sum_partials_kernel(
    p0_ptr, stride_p0k, K0, M0, out0_ptr,  # buffer 0: partial sums (K0, M0) float32, column stride 1; out (M0,)
    p1_ptr, stride_p1k, K1, M1, out1_ptr,  # buffers 1-3 alike (BUFFERS of them are read)
    p2_ptr, stride_p2k, K2, M2, out2_ptr,
    p3_ptr, stride_p3k, K3, M3, out3_ptr,
    END0, END1, END2,  # the programs of buffers 0, 0-1, 0-2 (program_id(0) below END0: buffer 0's column blocks)
    BUFFERS: tl.constexpr,
    BLOCK_K0: tl.constexpr, BLOCK_M0: tl.constexpr, BLOCK_K1: tl.constexpr, BLOCK_M1: tl.constexpr,
    BLOCK_K2: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_K3: tl.constexpr, BLOCK_M3: tl.constexpr,
):
    """Each program sums the rows of one block of columns of one buffer (its block sizes its own)."""
    pid = tl.program_id(0)
    if pid < END0:
        _sum_rows(p0_ptr, stride_p0k, K0, M0, out0_ptr, pid, BLOCK_K0, BLOCK_M0)
    if BUFFERS > 1:
        if (pid >= END0) & (pid < END1):
            _sum_rows(p1_ptr, stride_p1k, K1, M1, out1_ptr, pid - END0, BLOCK_K1, BLOCK_M1)
    if BUFFERS > 2:
        if (pid >= END1) & (pid < END2):
            _sum_rows(p2_ptr, stride_p2k, K2, M2, out2_ptr, pid - END1, BLOCK_K2, BLOCK_M2)
    if BUFFERS > 3:
        if pid >= END2:
            _sum_rows(p3_ptr, stride_p3k, K3, M3, out3_ptr, pid - END2, BLOCK_K3, BLOCK_M3)


def _blocks(K: int, M: int) -> tuple[int, int]:
    """(BLOCK_K, BLOCK_M) of a (K, M) buffer: narrow column blocks for long columns (more programs share them),
    wide ones for short columns, a tile of at most TILE elements."""
    block_m = max(16, min(1024, TILE // min(next_pow2(K), 256), next_pow2(M)))
    return min(next_pow2(K), TILE // block_m), block_m


def sum_partials(parts: list[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """Each of `parts`, float32 (K, M) with unit column stride (any row stride; K = 0 sums to 0), summed over its
    rows in a fixed order (bit-reproducible) and rounded once to `dtype`: a list of (M,) tensors. MAX_BUFFERS
    buffers a launch."""
    if any(p.dim() != 2 or p.dtype != torch.float32 or (p.stride(1) != 1 and p.shape[1] > 1) for p in parts):
        raise ValueError("sum_partials takes float32 (K, M) buffers with unit column stride")
    outs = [empty(p.shape[1], dtype=dtype, device=p.device) for p in parts]
    for first in range(0, len(parts), MAX_BUFFERS):
        group = [(p, o) for p, o in zip(parts[first:first + MAX_BUFFERS], outs[first:first + MAX_BUFFERS])
                 if p.shape[1]]
        if not group:
            continue
        args, consts, ends = [], {}, []
        for k in range(MAX_BUFFERS):
            p, o = group[min(k, len(group) - 1)]  # (unused slots repeat the last buffer: never read)
            block_k, block_m = _blocks(*p.shape)
            args += [p, p.stride(0), p.shape[0], p.shape[1], o]
            consts[f"BLOCK_K{k}"], consts[f"BLOCK_M{k}"] = block_k, block_m
            ends.append((ends[-1] if ends else 0) + (cdiv(p.shape[1], block_m) if k < len(group) else 0))
        cached_launch(_sum_partials_kernel)((ends[-1],), *args, *ends[:3], BUFFERS=len(group), **consts)
    return outs

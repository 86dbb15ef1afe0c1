"""The attention core's gate backward in Triton: from the gated output and its gradient, the un-gated output's
gradient, the gate's and the rows' delta in one pass (the first step of `core.core_backward`)."""

import triton
import triton.language as tl


@triton.jit
def gate_backward_kernel(
    dgated_ptr, gated_ptr, stride_m,  # the gated output's gradient and the gated output: (M, D) rows, channel stride 1
    g_ptr, dg_ptr, stride_g,  # the gate's pre-activation and, out, its gradient: rows of stride_g
    do_ptr,  # out: the un-gated output's gradient, (M, D) like the gated output (may be dgated_ptr: in place)
    delta_ptr, stride_dm,  # out: rowsum(do * o) per head, (M, h) float32
    M, H,
    HEAD_DIM: tl.constexpr,  # (a constant: the compiler sees a head's channels as one aligned run)
    BLOCK_M: tl.constexpr,
    BLOCK_H: tl.constexpr,  # the heads rounded up to a power of two
    BLOCK_D: tl.constexpr,  # the head dimension rounded up to a power of two
):
    """For a block of whole rows (every head), from gated = o * sigmoid(g): do = dgated * sigmoid(g), the
    gate's gradient dgated * o * sigmoid'(g) = dgated * gated * (1 - sigmoid(g)) and delta, the per-head row
    sum of do * o = dgated * gated, all in one pass over the rows (the un-gated output o is never kept)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_h = tl.arange(0, BLOCK_H)
    offs_e = tl.arange(0, BLOCK_D)
    channels = (offs_h[:, None] * HEAD_DIM + offs_e[None, :])[None, :, :]  # [1, BLOCK_H, BLOCK_D]
    head_ok = (offs_h < H)[:, None] & (offs_e < HEAD_DIM)[None, :]
    ok = (offs_m < M)[:, None, None] & head_ok[None, :, :]  # [BLOCK_M, BLOCK_H, BLOCK_D]
    rows = offs_m.to(tl.int64)[:, None, None]
    tile = rows * stride_m + channels
    dgated = tl.load(dgated_ptr + tile, mask=ok, other=0.0).to(tl.float32)
    gated = tl.load(gated_ptr + tile, mask=ok, other=0.0).to(tl.float32)
    sg = tl.sigmoid(tl.load(g_ptr + rows * stride_g + channels, mask=ok, other=0.0).to(tl.float32))
    tl.store(do_ptr + tile, (dgated * sg).to(do_ptr.dtype.element_ty), mask=ok)
    tl.store(dg_ptr + rows * stride_g + channels, (dgated * gated * (1.0 - sg)).to(dg_ptr.dtype.element_ty), mask=ok)
    tl.store(delta_ptr + offs_m.to(tl.int64)[:, None] * stride_dm + offs_h[None, :], tl.sum(dgated * gated, axis=2),
             mask=(offs_m < M)[:, None] & (offs_h < H)[None, :])  # [BLOCK_M, BLOCK_H]


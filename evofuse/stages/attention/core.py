"""The attention core that row, triangle and column attention share: gated attention of rows whose projections hold
q, k, v and the gate, with a bias (B, h, N, N) and a key mask, in one kernel (`kernels.attention_forward_kernel`);
its backward (the gate's pass, then dq, dk and dv, and the bias's gradient summed over the rows in a fixed order) as
a custom op of its own, `evofuse::msa_row_attention_core_backward`, so that torch.compile traces around its Triton
kernels. No (S, h, N, N) tensor exists."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..._runtime import autotuned, bucket, cdiv, custom_op, dot_precision, multiprocessors, next_pow2
from ...reference import MASK_LOGIT
from ..matmul import matmul
from . import configs
from .gate import gate_backward_kernel
from .kernels import (
    attention_dkdv_kernel,
    attention_dq_kernel,
    attention_dz_kernel,
    attention_forward_kernel,
)

MAX_HEAD_DIM = 128


def fused(head_dim: int, dtype: torch.dtype) -> bool:
    """Whether the fused kernels take this head_dim and dtype (else the reference runs)."""
    return head_dim <= MAX_HEAD_DIM and dtype in (torch.float16, torch.bfloat16, torch.float32)


KEY = ["N_BUCKET", "HEAD_DIM", "HAS_MASK", "PRECISION"]  # what the autotuner's choices are kept by


def tuned_kernels():
    """The four kernels under Triton's autotuner (`_runtime.autotuned`: built on their first launch)."""
    forward, backward = (lambda: configs.FORWARD_CONFIGS), (lambda: configs.BACKWARD_CONFIGS)
    # the dq kernel makes delta exact in place: each of its timing runs starts from the rounded one
    dq = autotuned(attention_dq_kernel, backward, KEY, configs.prune, restore_value=("delta_ptr",))
    return (autotuned(attention_forward_kernel, forward, KEY, configs.prune), dq,
            autotuned(attention_dkdv_kernel, backward, KEY, configs.prune),
            autotuned(attention_dz_kernel, backward, KEY + ["SPLITS"], configs.prune))  # (its grid grows with them)


def no_bias(rows: Tensor, num_heads: int) -> Tensor:
    """The core's bias (B, h, N, N) for attention without one: a zero of zero strides."""
    B, _, N, _ = rows.shape
    return rows.new_zeros(()).expand(B, num_heads, N, N)


def mask_args(mask: Tensor | None, like: Tensor) -> tuple:
    """The key mask's pointer and strides as the kernels take them (`like` and zeros without one)."""
    return (like, 0, 0, 0) if mask is None else (mask, *mask.stride())


def launch_constants(dtype: torch.dtype, mask: Tensor | None, head_dim: int, precision: str) -> dict:
    """The kernels' constexpr arguments for a call: the masked logit, whether there is a mask, the padded head width
    and the products' precision."""
    return dict(MASKED=max(MASK_LOGIT, torch.finfo(dtype).min), HAS_MASK=mask is not None,
                BLOCK_D=max(16, next_pow2(head_dim)), PRECISION=dot_precision(dtype, precision))


def attention(qkvg: Tensor, z: Tensor, mask: Tensor | None, H: int, num_heads: int, mask_mode: str, precision: str,
              train: bool) -> tuple[Tensor, Tensor]:
    """(gated (B, S, N, H), lse (2, B, S, N, h) float32, empty unless `train`): the attention core of rows whose
    projections qkvg (B, S, N, W) hold q, k, v and the gate in their first 4H channels (W >= 4H, the channels
    unit-strided), with the bias z (B, h, N, N) (any strides) and the mask (B, S, N) or None: the gated output and
    the rows' softmax statistics (their largest logit and log2 of their sum, base 2)."""
    B, S, N, _ = qkvg.shape
    h = num_heads
    d = H // h
    gated = torch.empty(B, S, N, H, dtype=qkvg.dtype, device=qkvg.device)
    lse = torch.empty(2, B, S, N, h if train else 0, dtype=torch.float32, device=qkvg.device)
    if gated.numel():
        consts = launch_constants(qkvg.dtype, mask, d, precision)

        def grid(meta):
            return B * h * cdiv(N, meta["BLOCK_M"]) * S,

        stats = (lse, *lse.stride()[1:], lse.stride(0)) if train else (gated, 0, 0, 0, 0, 0)
        tuned_kernels()[0][grid](qkvg, *qkvg.stride()[:3], z, *z.stride(), *mask_args(mask, qkvg), gated,
                            *gated.stride()[:3], *stats, S, N, h, H, d, math.log2(math.e) / math.sqrt(d), bucket(N),
                            TRAIN=train, ADDITIVE_MASK=mask_mode == "add", **consts)
    return gated, lse


def core_backward(qkvg: Tensor, z: Tensor, msa_mask: Tensor | None, grad_out: Tensor, out_proj_weight: Tensor,
                  gated: Tensor, lse: Tensor, num_heads: int, mask_mode: str,
                  precision: str, bias_grad: bool = True) -> tuple[Tensor, Tensor]:
    """(d_qkvg (B, S, N, W), dz (B, h, N, N) float32): the gradients of the projections and of the pair bias for
    the output's gradient grad_out (B, S, N, D), from out_proj's weight (D, H), the forward's projections qkvg
    (B, S, N, W) contiguous (q, k, v and the gate in its first 4H channels; d_qkvg's channels past them are left
    unwritten), gated output (B, S, N, H) and statistics lse (2, B, S, N, h). dz is written in z's strides: with
    `bias_grad`, z must be contiguous. Without it (attention without a bias: z of zero strides) dz is empty and its
    kernel does not run."""
    B, S, N, W = qkvg.shape
    D = out_proj_weight.shape[1]  # the inner width H
    h = num_heads
    d = D // h
    M = B * S * N
    d_qkvg = torch.empty_like(qkvg)
    # the gated output's gradient, overwritten in place by the un-gated one's
    do = matmul(grad_out.reshape(M, -1), out_proj_weight, precision).view(B, S, N, D)
    delta = torch.empty(B, S, N, h, dtype=torch.float32, device=gated.device)  # rowsum(do * o) per head
    gate = configs.gate_launch(h, d)
    gate_backward_kernel[(cdiv(M, gate["BLOCK_M"]),)](
        do, gated, D, qkvg[..., 3 * D:], d_qkvg[..., 3 * D:], W, do, delta, h, M, h, **gate)
    dz = launch_backward(qkvg, z, msa_mask, do, lse, delta, d_qkvg, h, D, mask_mode, precision, bias_grad)
    if not bias_grad:
        return d_qkvg, dz
    # every row of the exact dz sums to 0 (a softmax ignores a constant added to its logits), so its mean over the
    # keys is rounding alone; taking it out (an orthogonal projection onto
    # what the exact gradient satisfies) cannot enlarge dz's error, and keeps the gradient of a bias the softmax
    # ignores at float32's rounding (in bf16 it had carried 2-3x PyTorch's own rounding). The mean of the finite
    # entries: a NaN or Inf stays where the reference has it, and spreads nowhere else
    return d_qkvg, dz.sub_(dz.nan_to_num(0.0, 0.0, 0.0).mean(-1, keepdim=True))


def launch_backward(rows: Tensor, z: Tensor, mask: Tensor | None, do: Tensor, stats: Tensor, delta: Tensor,
                    d_rows: Tensor, h: int, D: int, mask_mode: str, precision: str, bias_grad: bool,
                    exact_delta: bool = True) -> Tensor:
    """The core's three backward kernels: dq into d_rows's channels 0 .. D, dk and dv into D .. 3D (d_rows (B, S, N,
    W) like rows, whose q, k and v are at channels 0, D and 2D), and with `bias_grad` the bias's gradient (B, h, N,
    N) float32 summed over the rows (z contiguous: it is written in z's strides; else an empty tensor), from the
    un-gated output's gradient do (B, S, N, D), the rows' statistics (2, B, S, N, h) and delta (B, S, N, h).
    exact_delta: the dq kernel makes delta exact for whole rows and stores it for the kernels after it."""
    B, S, N, _ = rows.shape
    d = D // h
    consts = dict(launch_constants(rows.dtype, mask, d, precision), ADDITIVE_MASK=mask_mode == "add")
    common = (rows, *rows.stride()[:3], z, *z.stride(), *mask_args(mask, rows), do, *do.stride()[:3], stats, delta,
              *stats.stride()[1:], stats.stride(0))
    sizes = (S, N, h, D, d, math.log2(math.e) / math.sqrt(d))
    _, dq_kernel, dkdv_kernel, dz_kernel = tuned_kernels()
    dq_kernel[lambda meta: (B * h * cdiv(N, meta["BLOCK_M"]) * S,)](
        *common, d_rows, *d_rows.stride()[:3], *sizes, 1 / math.sqrt(d), bucket(N), EXACT_DELTA=exact_delta, **consts)
    dkdv_kernel[lambda meta: (B * h * cdiv(N, meta["BLOCK_N"]) * S,)](
        *common, d_rows[..., D:], *d_rows.stride()[:3], *sizes, 1 / math.sqrt(d), bucket(N), **consts)
    if not bias_grad:
        return delta.new_empty(0)
    splits = dz_splits(B * h * cdiv(N, DZ_TILE) ** 2, S, z.device)
    dz = torch.empty(splits, *z.shape, dtype=torch.float32, device=z.device)
    dz_kernel[lambda meta: (B * h * cdiv(N, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]) * splits,)](
        *common, dz, dz.stride(0), S, N, h, D, splits, *sizes[4:], bucket(N), **consts)
    return dz[0] if splits == 1 else dz.sum(0)


DZ_TILE = 64  # residues a side of the pair bias gradient's tiles, as the splits of the MSA rows count them
DZ_WAVES = 8  # the splits fill the multiprocessors this many times over with DZ_TILE tiles
DZ_MAX_SPLITS = 4


def dz_splits(tiles: int, S: int, device: torch.device) -> int:
    """Parts of the MSA rows that the pair bias's gradient sums in programs of their own: 1 where its tiles
    fill the GPU DZ_WAVES times over, else up to DZ_MAX_SPLITS (and no more than S); deterministic, the parts added
    in order afterwards. att-af2-main (8 heads, N 384): 288 tiles, 4 splits."""
    return max(1, min(DZ_MAX_SPLITS, S, cdiv(DZ_WAVES * multiprocessors(device), max(1, tiles))))


def _core_backward_fake(qkvg, z, msa_mask, grad_out, out_proj_weight, gated, lse, num_heads, mask_mode, precision,
                        bias_grad=True):
    return torch.empty_like(qkvg), z.new_empty(z.shape if bias_grad else (0,), dtype=torch.float32)


core_backward_op = custom_op("msa_row_attention_core_backward", core_backward, _core_backward_fake)

"""Pair-weighted averaging as a torch.library custom op: `evofuse::pair_weighted_averaging`, its fake and its
backward, registered with `register_autograd`; the backward's Triton part is a custom op of its own,
`evofuse::pair_weighted_averaging_core_backward`, so that torch.compile traces around it.

Layout: the values v are written head major, (h, B, N, S, C) (each head's (residue j, MSA row s, channel) block
contiguous), so that u = w v is one cuBLAS product a (head, batch), (N, N) x (N, S*C), and the backward's
products read whole rows of K. The gate g is never written: the gated projection and its backward make it on
chip from the MSA rows (c_m channels read a row, against h*C written and read twice: at pwa-boltz 50 MB in
place of 400).
Forward: LayerNorm + the v projection of the MSA (`layer_norm_linear`, written head major, in the input's
dtype); LayerNorm + the head projection of the pair (`pair_heads`, head major); the mask term and the
softmax over j once per (b, h, i), (h, B, N, N) (`kernels.masked_softmax_kernel`, float32 for the backward and a
copy in the input's dtype for the product); u = w v by cuBLAS (head major, kept for the backward); the gate
(LayerNorm + proj_g) and proj_o in one kernel (`kernels.gated_projection_kernel`; the gate and the gated sums
made on chip, never written). No float32
(B, S, N, h, C) tensor and no (B, h, S, N, N) tensor exists.
Backward: d(gated) = grad_out W_o on chip, with the gate's gradient, du (head major) and per-program sums of
W_o's gradient grad_out^T gated, the gate and the gated sums made again from the MSA rows and u
(`kernels.gated_projection_backward_kernel`;
the sums added by torch.sum); dv = w^T du (`weighted_sum_kernel` on w transposed, written as the MSA's rows) and
dw = du v^T, one cuBLAS product a (head, batch) in float32 (deterministic: no atomics, one order of the sums for
a shape on a device); the softmax's gradient (`masked_softmax_backward_kernel`); the MSA's LayerNorm +
projection's by `layer_norm_linear_backward`, the pair's by `pair_heads_backward` (one pass: nothing of the
pair's size but dz is made).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import (
    autotuned,
    bucket,
    cdiv,
    custom_op,
    dot_precision,
    keep_for_backward,
    l2_cache_bytes,
    multiprocessors,
    next_pow2,
    operation,
    traced,
)
from ...reference import LAYER_NORM_EPS
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.layer_norm_linear import layer_norm_linear
from ...stages.matmul import float32_products, matmul
from ...stages.pair_heads import pair_heads, pair_heads_backward
from . import configs
from .kernels import (
    gated_projection_backward_kernel,
    gated_projection_kernel,
    masked_softmax_backward_kernel,
    masked_softmax_kernel,
    weighted_sum_kernel,
)

MAX_HEAD_WIDTH = 128
MAX_MSA_WIDTH = 128  # c_m: the gated projection and its backward take whole MSA rows (the models': 64)


def fused(head_width: int, msa_width: int, dtype: torch.dtype) -> bool:
    """Whether the fused kernels take this head width, MSA width c_m and dtype (else the reference runs)."""
    return (head_width <= MAX_HEAD_WIDTH and msa_width <= MAX_MSA_WIDTH
            and dtype in (torch.float16, torch.bfloat16, torch.float32))


def _kernels():
    """The kernels under Triton's autotuner (`_runtime.autotuned`: built on their first launch): the weighted sum (the
    backward's dv) and the gated projection's backward."""
    return (autotuned(weighted_sum_kernel, lambda: configs.CONFIGS, ["N_BUCKET", "C", "PRECISION"], configs.prune),
            autotuned(gated_projection_backward_kernel, lambda: configs.PROJECTION_CONFIGS,
                      ["HC", "C_OUT", "S_BUCKET", "C"], configs.prune_projection))


# Residues j a step of the softmax kernels (a program a row (b, h, i), not a pair row with every head: as fast
# forward and faster in training at long N); the backward's rows of 2048 and more with 8 warps.
SOFTMAX_BLOCK_J = 2048
SOFTMAX_WARPS = 4


def _softmax_tiles(N: int) -> dict:
    """BLOCK_J of the softmax kernels: a row at once up to SOFTMAX_BLOCK_J residues (ONE_BLOCK), longer rows in
    passes of SOFTMAX_BLOCK_J."""
    block_j = max(16, min(next_pow2(N), SOFTMAX_BLOCK_J))
    return dict(BLOCK_J=block_j, ONE_BLOCK=N <= block_j)


def _weights(logits: Tensor, pair_mask: Tensor | None, inf: float, mask_mode: str, keep: bool) -> tuple[Tensor, Tensor]:
    """(w, w in the logits' dtype): w = softmax_j(logits + (1 - mask) * -inf), (h, B, N, N) float32, from the
    head logits (B, h, N, N), any strides (`kernels.masked_softmax_kernel`); "relative": the mask term taken
    relative to the row's smallest (a constant of the row: the same softmax, and a row whose pairs are all
    masked keeps its logits' precision); "add": added in float32 as the models do. The second is w itself for
    float32 logits. Without `keep` (inference) 16-bit logits give only the second, and the first is empty."""
    B, h, N, _ = logits.shape
    shape = (h, B, N, N)
    low = torch.empty(shape, dtype=logits.dtype, device=logits.device)
    w = low if logits.dtype == torch.float32 else torch.empty(shape if keep else (0,), dtype=torch.float32,
                                                              device=logits.device)
    if low.numel():
        mask_args = (logits, 0, 0, 0) if pair_mask is None else (pair_mask, *pair_mask.stride())
        store_w = w.numel() > 0
        strides = low.transpose(0, 1).stride()  # (b, h, i, j)
        masked_softmax_kernel[(B * h * N,)](logits, *logits.stride(), *mask_args, w if store_w else low, *strides,
                                            low, N, h, inf, HAS_MASK=pair_mask is not None,
                                            RELATIVE=mask_mode == "relative", STORE_W=store_w, STORE_LOW=low is not w,
                                            num_warps=SOFTMAX_WARPS, **_softmax_tiles(N))
    return w, low


def _weights_backward(w: Tensor, dw: Tensor, dtype: torch.dtype) -> Tensor:
    """The head logits' gradient (B, h, N, N) in `dtype`, contiguous (head major, as `pair_heads` writes the
    logits), for the weights w and their gradient dw, (B, h, N, N) float32 (`kernels.masked_softmax_backward_kernel`)."""
    B, h, N, _ = w.shape
    d_logits = torch.empty(B, h, N, N, dtype=dtype, device=w.device)
    if w.numel():
        warps = 8 if N >= SOFTMAX_BLOCK_J else SOFTMAX_WARPS
        masked_softmax_backward_kernel[(B * h * N,)](w, *w.stride(), dw, *dw.stride(), d_logits, *d_logits.stride(), N,
                                                     h, num_warps=warps, **_softmax_tiles(N))
    return d_logits


def _heads(t: Tensor) -> Tensor:
    """(h, B, N, S, C) head-major storage -> the (B, h, S, N, C) view the weighted-sum kernels take."""
    return t.permute(1, 0, 3, 2, 4)


def _row_heads(t: Tensor, num_heads: int) -> Tensor:
    """(B, S, N, h*C) -> the (B, h, S, N, C) view the weighted-sum kernels take."""
    return t.unflatten(-1, (num_heads, t.shape[-1] // num_heads)).permute(0, 3, 1, 2, 4)


# The weighted sum's programs take heads fastest where all heads' w of a batch element fit this share of L2 (they
# then share w's reads there); where w is larger, heads fastest would push it out of L2
W_L2_SHARE = 4


def _weighted_sum(w: Tensor, v: Tensor, out: Tensor, precision: str) -> None:
    """out[b, h, s, i] = sum_j w[b, h, i, j] v[b, h, s, j] for (B, h, S, N, C) views with channel stride 1,
    w (B, h, N, N)."""
    B, H, S, N, C = v.shape

    def grid(meta):
        return B * H * cdiv(N, meta["BLOCK_I"]) * cdiv(S, meta["COLS"] // next_pow2(C)),

    heads_fastest = H * N * N * w.element_size() <= l2_cache_bytes(w.device) // W_L2_SHARE
    _kernels()[0][grid](w, *w.stride(), v, *v.stride()[:4], out, *out.stride()[:4], S, N, H, C, bucket(N),
                        BLOCK_C=next_pow2(C), HEADS_FASTEST=heads_fastest,
                        PRECISION=dot_precision(v.dtype, precision))


def _head_major(t: Tensor) -> tuple:
    """The (b, h, i, s) strides of a (h, B, N, S, C) head-major tensor."""
    return t.stride(1), t.stride(0), t.stride(2), t.stride(3)


def pair_weighted_averaging_forward(msa_repr: Tensor, pair_repr: Tensor, pair_mask: Tensor | None, norm_m_weight: Tensor,
                                    norm_m_bias: Tensor, norm_z_weight: Tensor, norm_z_bias: Tensor, proj_mg_weight: Tensor,
                                    proj_z_weight: Tensor, proj_o_weight: Tensor, inf: float, mask_mode: str,
                                    precision: str, train: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out (B, S, N, c_m), v (h, B, N, S, C), u (h, B, N, S, C), w (h, B, N, N) float32): the output, then
    what the backward takes: the values (head major), the weighted sums u = w v and the weights; the last two
    empty unless `train`. proj_mg_weight (2hC, c_m) is proj_m's weight over proj_g's, stacked outside the op
    (one weight for the backward's LayerNorm + projection, and fewer schema arguments for a traced call;
    autograd hands each weight its share of the stacked gradient). Every tensor argument has msa_repr's dtype;
    c_m is at most MAX_MSA_WIDTH. `train` is a bool typed int, as the Outer Product Mean's (DTensor's cache key)."""
    B, S, N, c_m = msa_repr.shape
    inner = proj_mg_weight.shape[0] // 2
    H = proj_z_weight.shape[0]  # the heads (the op takes no count: one schema argument fewer)
    C = inner // H
    v = msa_repr.new_empty(H, B, N, S, C)
    # rows taken (b, i, s), so that a block of them is one run of each head's storage
    layer_norm_linear(msa_repr.transpose(1, 2), norm_m_weight, norm_m_bias, proj_mg_weight[:inner], None, None,
                      precision, out=v.permute(1, 2, 3, 0, 4))  # (B, N, S, h, C)
    logits = pair_heads(pair_repr, norm_z_weight, norm_z_bias, proj_z_weight, None)  # (B, h, N, N)
    w, w_low = _weights(logits, pair_mask, inf, mask_mode, train)
    del logits
    u = matmul(w_low.view(H * B, N, N), v.view(H * B, N, S * C), precision).view(H, B, N, S, C)
    del w_low  # (the peak: v, w, its copy and u)
    out = msa_repr.new_empty(B, S, N, c_m)
    if out.numel():
        w_g = proj_mg_weight[inner:]
        tiles = _projection_tiles(S, H, C, c_m)
        gated_projection_kernel[(B * N * cdiv(S, tiles["BLOCK_S"]), cdiv(c_m, tiles["BLOCK_O"]))](
            u, *_head_major(u), msa_repr, *msa_repr.stride(), norm_m_weight, norm_m_bias, w_g, *w_g.stride(),
            proj_o_weight, *proj_o_weight.stride(), out, out.stride(0), out.stride(1), out.stride(2), S, N, H, c_m,
            LAYER_NORM_EPS, C, PRECISION=dot_precision(msa_repr.dtype, precision), **tiles)
    # (empty but two-dimensional unless train: a sharding rule places them by their head-major batch dimension 1)
    return out, v, u if train else u.new_empty(0, 0), w if train else w.new_empty(0, 0)


def _fake(msa_repr, pair_repr, pair_mask, norm_m_weight, norm_m_bias, norm_z_weight, norm_z_bias, proj_mg_weight,
          proj_z_weight, proj_o_weight, inf, mask_mode, precision, train):
    B, S, N, _ = msa_repr.shape
    inner, H = proj_mg_weight.shape[0] // 2, proj_z_weight.shape[0]
    u = msa_repr.new_empty(H, B, N, S, inner // H) if train else msa_repr.new_empty(0, 0)
    return (msa_repr.new_empty(B, S, N, proj_o_weight.shape[0]),
            msa_repr.new_empty(H, B, N, S, inner // H), u,
            msa_repr.new_empty((H, B, N, N) if train else (0, 0), dtype=torch.float32))


PROJECTION_ROWS = 64  # MSA rows s a program of the forward's gated projection
PROJECTION_WARPS = 4
PROJECTION_STEP = 16  # (head, channel) columns a step of the forward's gated projection for heads narrower than 16


def _projection_tiles(S: int, H: int, C: int, c_m: int) -> dict:
    """The forward gated projection's tile: BLOCK_S rows, up to 128 output channels a program, a head a step
    (its channels padded to a power of two, at least 16: the product's) or, for heads narrower than 16 channels,
    the PROJECTION_STEP columns of several heads a step: narrow heads padded one at a time waste most of each
    product, and more than one wide head a step costs registers."""
    block_c = next_pow2(C)
    heads = min(next_pow2(H), PROJECTION_STEP // block_c) if block_c < 16 else 1
    return dict(BLOCK_S=max(16, min(PROJECTION_ROWS, next_pow2(S))), HEADS_A_STEP=heads,
                BLOCK_C=max(block_c, 16 // heads), BLOCK_D=max(16, next_pow2(c_m)), BLOCK_O=max(16, min(128, next_pow2(c_m))),
                num_warps=PROJECTION_WARPS)


# The gated projection backward's programs along the MSA rows, a multiprocessor (each sums proj_o's weight
# gradient over its rows; the programs' sums, (programs, c_m, hC) float32, added by torch.sum)
PROJECTION_BACKWARD_PROGRAMS_PER_SM = 2


def core_backward(v: Tensor, w: Tensor, grad_out: Tensor, msa_repr: Tensor, norm_m_weight: Tensor,
                  norm_m_bias: Tensor, proj_mg_weight: Tensor, proj_o_weight: Tensor, u: Tensor,
                  precision: str) -> tuple[Tensor, Tensor, Tensor]:
    """(d_vg (B, S, N, 2hC), d_logits (B, h, N, N), both in v's dtype, d_wo (c_m, hC) float32): the
    projections' (v's, then g's), the head logits' and proj_o's weight's gradients for the output's gradient
    grad_out (B, S, N, c_m), from the forward's values v (h, B, N, S, C), weights w (h, B, N, N) float32 and
    weighted sums u (h, B, N, S, C), the MSA (B, S, N, c_m) with its LayerNorm's weight and bias (c_m,) and the
    stacked proj_m, proj_g weight (2hC, c_m), from which the gate is made again, and proj_o's weight (c_m, hC)."""
    H, B, N, S, C = v.shape
    inner, c_m = H * C, grad_out.shape[-1]
    d_vg = v.new_empty(B, S, N, 2 * inner)
    du = torch.empty_like(v)  # (h, B, N, S, C)
    w_g = proj_mg_weight[inner:]
    d_g = d_vg[..., inner:]
    # (no MSA rows: no programs, and the sum over none is zero)
    programs = min(B * N * S, PROJECTION_BACKWARD_PROGRAMS_PER_SM * multiprocessors(v.device))
    part = torch.empty(programs, c_m, inner, dtype=torch.float32, device=v.device)
    if du.numel():
        def projection_grid(meta):  # (the blocks of columns fastest: they read the same MSA rows)
            return cdiv(inner, meta["BLOCK_K"]), programs

        _kernels()[1][projection_grid](grad_out, *grad_out.stride(), proj_o_weight, *proj_o_weight.stride(), u,
                                       *_head_major(u), msa_repr, *msa_repr.stride(), norm_m_weight, norm_m_bias, w_g,
                                       *w_g.stride(), du, *_head_major(du), d_g, d_g.stride(0), d_g.stride(1),
                                       d_g.stride(2), part, part.stride(0), part.stride(1), B, S, N, inner, c_m,
                                       LAYER_NORM_EPS, programs, bucket(S), C, BLOCK_O=max(16, next_pow2(c_m)),
                                       PRECISION=dot_precision(v.dtype, precision))
    w_bh = w.transpose(0, 1)  # (B, h, N, N)
    _weighted_sum(w_bh.to(v.dtype).transpose(2, 3), _heads(du), _row_heads(d_vg[..., :inner], H), precision)
    # dw[h, b] = du v^T over each head's (MSA row, channel) pairs: one cuBLAS product a (head, batch element)
    dw = float32_products(du.view(H * B, N, S * C), v.view(H * B, N, S * C).transpose(1, 2), precision)
    return d_vg, _weights_backward(w_bh, dw.view(H, B, N, N).transpose(0, 1), v.dtype), part.sum(0)


def _core_backward_fake(v, w, grad_out, msa_repr, norm_m_weight, norm_m_bias, proj_mg_weight, proj_o_weight, u, precision):
    H, B, N, S, C = v.shape
    return (v.new_empty(B, S, N, 2 * H * C), v.new_empty(B, H, N, N),
            v.new_empty(grad_out.shape[-1], H * C, dtype=torch.float32))


core_backward_op = custom_op("pair_weighted_averaging_core_backward", core_backward, _core_backward_fake)


def _setup_context(ctx, inputs, output):
    msa_repr, pair_repr, pair_mask, *params, inf, mask_mode, precision, _ = inputs
    keep_for_backward(ctx, [msa_repr, pair_repr, *params], list(output[1:]), precision=precision)


def _backward(ctx, needs, grad_out, *_):
    msa_repr, pair_repr, nmw, nmb, nzw, nzb, wmg, wz, wo, v, u, w = ctx.saved_tensors
    backward = core_backward_op if traced(grad_out) else core_backward
    d_vg, d_logits, d_wo = backward(v, w, grad_out, msa_repr, nmw, nmb, wmg, wo, u, ctx.precision)
    # the pair's LayerNorm + projection (the mask term has no gradient; the projection has no bias)
    pair = ("pair_repr", "norm_z_weight", "norm_z_bias", "proj_z_weight")
    *pair_grads, _ = pair_heads_backward(pair_repr, nzw, nzb, wz, d_logits, [needs[n] for n in pair] + [False])
    msa = ("msa_repr", "norm_m_weight", "norm_m_bias", "proj_mg_weight")
    *msa_grads, _ = layer_norm_linear_backward(msa_repr, nmw, nmb, wmg, d_vg, [needs[n] for n in msa] + [False],
                                               ctx.precision)
    return dict(zip(pair, pair_grads)) | dict(zip(msa, msa_grads)) | dict(
        proj_o_weight=d_wo.to(wo.dtype) if needs["proj_o_weight"] else None)


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
pair_weighted_averaging_op, pair_weighted_averaging = operation("pair_weighted_averaging",
                                                                pair_weighted_averaging_forward, _fake,
                                                                _setup_context, _backward)

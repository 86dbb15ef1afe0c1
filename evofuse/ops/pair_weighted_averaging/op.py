"""Pair-weighted averaging as a torch.library custom op: `evofuse::pair_weighted_averaging`, its fake and its
backward, registered with `register_autograd`; the backward's Triton part is a custom op of its own,
`evofuse::pair_weighted_averaging_core_backward`, so that torch.compile traces around it.

Forward: LayerNorm + the v and g projections of the MSA in one kernel (`layer_norm_linear`, (B, S, N, 2hC) in
the input's dtype); LayerNorm + the head projection of the pair, head major (`pair_heads`); the mask term and the
softmax over j once per (b, i, h), (B, h, N, N) (`kernels.masked_softmax_kernel`, float32 for the backward and
a copy in the input's dtype for the sums); `kernels.weighted_sum_kernel` for u = w v, gated in its
epilogue; proj_o by cuBLAS. No float32 (B, S, N, h, C) tensor and no (B, h, S, N, N) tensor exists.
Backward: d(gated) = grad_out W_o by cuBLAS; the gate's gradient and du from the saved gated sums (row
attention's gate kernel); dv = w^T du (`weighted_sum_kernel` on w transposed) and dw = du v^T summed over the
MSA rows in order (`weight_grad_kernel`); the softmax's gradient (`masked_softmax_backward_kernel`), head major;
the MSA's LayerNorm + projection's by `layer_norm_linear_backward`, the pair's by `pair_heads_backward` (one pass:
nothing of the pair's size but dz is made).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
import triton
from torch import Tensor

from ..._runtime import bucket, cdiv, dot_precision, next_pow2, traced
from ..layer_norm_linear import layer_norm_linear, layer_norm_linear_backward
from ..pair_heads import pair_heads, pair_heads_backward
from ..row_attention.configs import gate_launch
from ..row_attention.kernels import gate_backward_kernel
from . import configs
from .kernels import masked_softmax_backward_kernel, masked_softmax_kernel, weight_grad_kernel, weighted_sum_kernel

MAX_HEAD_WIDTH = 128


def fused(head_width: int, dtype: torch.dtype) -> bool:
    """Whether the fused kernels take this head width and dtype (else the reference runs)."""
    return head_width <= MAX_HEAD_WIDTH and dtype in (torch.float16, torch.bfloat16, torch.float32)


def _autotuned(kernel):
    return triton.autotune(configs.CONFIGS, key=["N_BUCKET", "C", "PRECISION"],
                           prune_configs_by={"early_config_prune": configs.prune})(kernel)


@functools.cache
def _kernels():
    """The two kernels under Triton's autotuner (built on first use)."""
    return _autotuned(weighted_sum_kernel), _autotuned(weight_grad_kernel)


SOFTMAX_TILE = 2048  # elements (residues j x heads) a step of the softmax kernels


def _softmax_tiles(N: int, num_heads: int) -> dict:
    """BLOCK_J and BLOCK_H of the softmax kernels: every head of a row at once, SOFTMAX_TILE elements a step."""
    block_h = next_pow2(num_heads)
    return dict(BLOCK_J=max(16, min(next_pow2(N), SOFTMAX_TILE // block_h)), BLOCK_H=block_h)


def _weights(logits: Tensor, pair_mask: Tensor | None, inf: float, mask_mode: str, keep: bool) -> tuple[Tensor, Tensor]:
    """(w, w in the logits' dtype): w = softmax_j(logits + (1 - mask) * -inf), (B, h, N, N) float32, from the
    head logits (B, N, N, h), any strides (`kernels.masked_softmax_kernel`); "relative": the mask term taken relative to the
    row's smallest (a constant of the row: the same softmax, and a row whose pairs are all masked keeps its
    logits' precision); "add": added in float32 as the models do. The second is w itself for float32 logits.
    Without `keep` (inference) 16-bit logits give only the second, and the first is empty."""
    B, N, _, h = logits.shape
    shape = (B, h, N, N)
    low = torch.empty(shape, dtype=logits.dtype, device=logits.device)
    w = low if logits.dtype == torch.float32 else torch.empty(shape if keep else (0,), dtype=torch.float32,
                                                              device=logits.device)
    if low.numel():
        mask_args = (logits, 0, 0, 0) if pair_mask is None else (pair_mask, *pair_mask.stride())
        store_w = w.numel() > 0
        masked_softmax_kernel[(B * N,)](logits, *logits.stride(), *mask_args, w if store_w else low, *low.stride(),
                                        low, N, h, inf, HAS_MASK=pair_mask is not None,
                                        RELATIVE=mask_mode == "relative", STORE_W=store_w, STORE_LOW=low is not w,
                                        **_softmax_tiles(N, h))
    return w, low


def _weights_backward(w: Tensor, dw: Tensor, dtype: torch.dtype) -> Tensor:
    """The head logits' gradient (B, h, N, N) in `dtype`, contiguous (head major, as `pair_heads` writes the
    logits), for the weights w and their gradient dw, (B, h, N, N) float32 (`kernels.masked_softmax_backward_kernel`)."""
    B, h, N, _ = w.shape
    d_logits = torch.empty(B, h, N, N, dtype=dtype, device=w.device)
    if w.numel():
        strides = d_logits.stride()  # the kernel's (b, i, j, h) order
        masked_softmax_backward_kernel[(B * N,)](w, *w.stride(), dw, *dw.stride(), d_logits, strides[0], strides[2],
                                                 strides[3], strides[1], N, h,
                                                 **_softmax_tiles(N, h))
    return d_logits


def _weighted_sum(w: Tensor, v: Tensor, g: Tensor | None, out: Tensor, num_heads: int, C: int, precision: str) -> None:
    """out[b, s, i, h] = (sigmoid(g) *) sum_j w[b, h, i, j] v[b, s, j, h] for (B, S, N, .) views with channel
    stride 1 (head h at channels h*C ..)."""
    B, S, N = v.shape[:3]

    def grid(meta):
        return B * num_heads * cdiv(N, meta["BLOCK_I"]) * cdiv(S, meta["COLS"] // next_pow2(C)),

    gate = v if g is None else g
    _kernels()[0][grid](w, *w.stride(), v, *v.stride()[:3], gate, *gate.stride()[:3], out, *out.stride()[:3],
                        S, N, num_heads, C, bucket(N), GATE=g is not None, BLOCK_C=next_pow2(C),
                        PRECISION=dot_precision(v.dtype, precision))


@torch.library.custom_op("evofuse::pair_weighted_averaging", mutates_args=())
def pair_weighted_averaging_op(msa_repr: Tensor, pair_repr: Tensor, pair_mask: Tensor | None, norm_m_weight: Tensor,
                               norm_m_bias: Tensor, norm_z_weight: Tensor, norm_z_bias: Tensor, proj_m_weight: Tensor,
                               proj_g_weight: Tensor, proj_z_weight: Tensor, proj_o_weight: Tensor, num_heads: int,
                               inf: float, mask_mode: str, precision: str, train: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out (B, S, N, c_m), vg (B, S, N, 2hC), gated (B, S, N, hC), w (B, h, N, N) float32): the output, then what
    the backward takes: the projections, the gated sums (proj_o's input) and the weights; the last two empty unless
    `train`. Every tensor argument has msa_repr's dtype."""
    B, S, N, _ = msa_repr.shape
    inner = proj_m_weight.shape[0]
    C = inner // num_heads
    vg = layer_norm_linear(msa_repr, norm_m_weight, norm_m_bias, torch.cat([proj_m_weight, proj_g_weight]),
                           None, None, precision)
    logits = pair_heads(pair_repr, norm_z_weight, norm_z_bias, proj_z_weight, None).permute(0, 2, 3, 1)  # (B, N, N, h)
    w, w_low = _weights(logits, pair_mask, inf, mask_mode, train)
    del logits  # (the peak: the projections, w, its copy and the gated sums; then the output instead of the copy)
    gated = torch.empty(B, S, N, inner, dtype=msa_repr.dtype, device=msa_repr.device)
    if gated.numel():
        _weighted_sum(w_low, vg[..., :inner], vg[..., inner:], gated, num_heads, C, precision)
    del w_low
    return F.linear(gated, proj_o_weight), vg, gated if train else gated.new_empty(0), w if train else w.new_empty(0)


@pair_weighted_averaging_op.register_fake
def _(msa_repr, pair_repr, pair_mask, norm_m_weight, norm_m_bias, norm_z_weight, norm_z_bias, proj_m_weight,
      proj_g_weight, proj_z_weight, proj_o_weight, num_heads, inf, mask_mode, precision, train):
    B, S, N, c_m = msa_repr.shape
    inner = proj_m_weight.shape[0]
    gated = msa_repr.new_empty(B, S, N, inner) if train else msa_repr.new_empty(0)
    return (msa_repr.new_empty(B, S, N, c_m), msa_repr.new_empty(B, S, N, 2 * inner), gated,
            msa_repr.new_empty((B, num_heads, N, N) if train else (0,), dtype=torch.float32))


def core_backward(vg: Tensor, w: Tensor, grad_out: Tensor, proj_o_weight: Tensor, gated: Tensor, num_heads: int,
                  precision: str) -> tuple[Tensor, Tensor]:
    """(d_vg (B, S, N, 2hC), d_logits (B, h, N, N), both in vg's dtype): the projections' and the head logits'
    gradients for the output's gradient grad_out (B, S, N, c_m), from proj_o's weight (c_m, hC), the forward's
    projections vg, weights w (B, h, N, N) float32 and gated sums (B, S, N, hC)."""
    B, S, N, inner2 = vg.shape
    inner = inner2 // 2
    C = inner // num_heads
    M = B * S * N
    d_vg = torch.empty_like(vg)
    du = grad_out @ proj_o_weight  # the gated sums' gradient, overwritten in place by the un-gated sums'
    unused = torch.empty(M, num_heads, dtype=torch.float32, device=vg.device)  # the gate kernel's row sums
    gate = gate_launch(num_heads, C)
    gate_backward_kernel[(cdiv(M, gate["BLOCK_M"]),)](
        du, gated, inner, vg[..., inner:], d_vg[..., inner:], 2 * inner, du, unused, num_heads, M, num_heads, **gate)
    w_t = w.to(vg.dtype).transpose(2, 3)  # dv[s, j] = sum_i w[i, j] du[s, i]
    _weighted_sum(w_t, du, None, d_vg[..., :inner], num_heads, C, precision)
    dw = torch.empty(w.shape, dtype=torch.float32, device=w.device)

    def grid(meta):
        return B * num_heads * cdiv(N, meta["BLOCK_I"]) * cdiv(N, meta["BLOCK_J"]),

    _kernels()[1][grid](du, *du.stride()[:3], vg, *vg.stride()[:3], dw, *dw.stride(), S, N, num_heads, C, bucket(N),
                        BLOCK_C=next_pow2(C), PRECISION=dot_precision(vg.dtype, precision))
    return d_vg, _weights_backward(w, dw, vg.dtype)


core_backward_op = torch.library.custom_op("evofuse::pair_weighted_averaging_core_backward", mutates_args=())(core_backward)


@core_backward_op.register_fake
def _(vg, w, grad_out, proj_o_weight, gated, num_heads, precision):
    B, h, N, _ = w.shape
    return torch.empty_like(vg), vg.new_empty(B, h, N, N)


def _setup_context(ctx, inputs, output):
    msa_repr, pair_repr, pair_mask, *params, num_heads, inf, mask_mode, precision, _ = inputs
    _, vg, gated, w = output
    ctx.save_for_backward(msa_repr, pair_repr, *params, vg, gated, w)
    ctx.set_materialize_grads(False)  # the outputs kept for the backward get no zero-filled gradients
    ctx.num_heads = num_heads
    ctx.precision = precision


def _backward(ctx, grad_out, *_):
    msa_repr, pair_repr, nmw, nmb, nzw, nzb, wm, wg, wz, wo, vg, gated, w = ctx.saved_tensors
    needs = ctx.needs_input_grad
    inner = wm.shape[0]
    backward = core_backward_op if traced(grad_out) else core_backward
    d_vg, d_logits = backward(vg, w, grad_out, wo, gated, ctx.num_heads, ctx.precision)
    d_wo = grad_out.reshape(-1, grad_out.shape[-1]).t() @ gated.reshape(-1, inner) if needs[10] else None
    # the pair's LayerNorm + projection (the mask term has no gradient)
    dz, dnzw, dnzb, dwz, _ = pair_heads_backward(pair_repr, nzw, nzb, wz, d_logits,
                                                 (needs[1], needs[5], needs[6], needs[9], False))
    dm, dnmw, dnmb, dw_mg, _ = layer_norm_linear_backward(msa_repr, nmw, nmb, torch.cat([wm, wg]), d_vg,
                                                          (needs[0], needs[3], needs[4], needs[7] or needs[8], False),
                                                          ctx.precision)
    dwm, dwg = (None, None) if dw_mg is None else dw_mg.split(inner)
    return (dm, dz, None, dnmw, dnmb, dnzw, dnzb, dwm if needs[7] else None, dwg if needs[8] else None, dwz, d_wo,
            None, None, None, None, None)


pair_weighted_averaging_op.register_autograd(_backward, setup_context=_setup_context)

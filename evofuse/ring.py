"""Ring-attention entry points (context parallelism): the attention core of row attention, triangle attention and
attention with pair bias on one tile of keys, for a ring of processes that each hold one tile of residues and pass
the keys and values around (as Boltz's context-parallel engine asks of its backends).

`attention_tile_forward` gives one tile's un-gated output and log-sum-exp; the caller merges the tiles
(`merge_tiles`), applies its gate, and for the backward calls `attention_tile_backward` once per tile with the merged
output and log-sum-exp. Triangle attention is this core on the pair's rows (S = N rows of the pair, the bias one
per head); row attention on the MSA's rows. A key tile holds as many residues as the queries' tile, or fewer (the
last of a ring whose N is not a multiple of the tile: that tile runs in PyTorch).

Both run the core's Triton kernels where they take the call (head width up to 128, 16- and 32-bit floats, on a CUDA
device or in Triton's interpreter) and the plain-PyTorch definition otherwise (`impl` as everywhere in evofuse). Traced
(torch.compile, torch.export), the kernels' calls are the custom ops `evofuse::attention_tile_forward` and
`evofuse::attention_tile_backward`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import reference as ref
from ._dispatch import resolve_impl, triton_available
from ._runtime import traced
from ._validation import check_floating, check_shapes
from .front.parts import check_options

__all__ = ["attention_tile_backward", "attention_tile_forward", "merge_tiles"]

def _check(q, k, v, bias, mask, mask_mode, precision, impl) -> None:
    check_options(precision, impl, mask_mode, ref.MASK_MODES)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_floating(name, t)
    if q.dim() != 5:
        raise ValueError(f"q must have rank 5 (B, S, N, h, d), got shape {tuple(q.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.dim() != 5 or t.shape[:2] + t.shape[3:] != q.shape[:2] + q.shape[3:] or t.shape[2] < 1:
            raise ValueError(f"{name} must have shape (B, S, M, h, d) with q's B, S, h and d {tuple(q.shape)} and M "
                             f">= 1 keys, got {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} must have q's dtype and device ({q.dtype}, {q.device}), got ({t.dtype}, "
                             f"{t.device})")
    B, S, N, h, _ = q.shape
    if bias is not None:
        check_floating("bias", bias)
        check_shapes({"bias": bias}, {"bias": "B h N M"}, {"B": B, "h": h, "N": N, "M": k.shape[2]})
    if mask is not None:
        if not isinstance(mask, Tensor):
            raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
        check_shapes({"mask": mask}, {"mask": "B S M"}, {"B": B, "S": S, "M": k.shape[2]})
    for name, t in (("bias", bias), ("mask", mask)):
        if t is not None and t.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")


def _fused(q: Tensor, k: Tensor, impl: str | None) -> bool:
    """Whether the kernels take a tile: as many keys as queries (a shorter key tile runs in PyTorch)."""
    if resolve_impl(impl, q) == "torch" or not triton_available() or k.shape != q.shape:
        return False
    from .stages.attention.core import fused

    return fused(q.shape[-1], q.dtype)


def attention_tile_forward(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, mask: Tensor | None = None,
                           *, mask_mode: str = "replace", precision: str = "default",
                           impl: str | None = None) -> tuple[Tensor, Tensor]:
    """One key tile of the attention core.

    Args:
        q: (B, S, N, h, d) queries of N residues in S rows (an MSA's rows; the pair's rows for triangle attention),
            float16, bfloat16, float32 or float64, scaled by 1/sqrt(d) inside.
        k, v: (B, S, M, h, d) the tile's keys and values, as q; M = N (the kernels) or fewer (PyTorch).
        bias: (B, h, N, M) the bias between the queries' and the keys' residues, or None.
        mask: (B, S, M) the keys' mask, 0/1 of any dtype, or None: a masked key's logit is -1e9 ("replace": no
            gradient; "add": the logit's gradient passes on, as the models' additive -inf mask).
        precision: "default" or "fast", as the operations'.
        impl: "auto", "triton" or "torch"; None follows EVOFUSE_IMPL.
    Returns:
        (o (B, S, N, h, d) in q's dtype, lse (B, S, N, h) float64): the softmax over this tile's keys times v
        (un-gated), and the natural log of the sum of exp(logit) over them (float64: see `merge_tiles`).
    """
    _check(q, k, v, bias, mask, mask_mode, precision, impl)
    if not _fused(q, k, impl):
        with torch.no_grad():
            o, lse = ref.attention_tile_reference(q, k, v, bias, mask, mask_mode)
        return o, lse.double()
    from .stages.attention.tile import tile_forward, tile_forward_op

    return (tile_forward_op if traced(q) else tile_forward)(q, k, v, bias, mask, mask_mode, precision)


def merge_tiles(outputs: list[Tensor], lses: list[Tensor]) -> tuple[Tensor, Tensor]:
    """The tiles' outputs (B, S, N, h, d) and log-sum-exps (B, S, N, h) merged: (o, lse) of the whole rows, o in the
    outputs' dtype, lse float64 (a row whose keys are all masked has lse -1e9 + log N: float32 would lose the
    second term, and with it each tile's share)."""
    lse = torch.logsumexp(torch.stack([t.double() for t in lses]), 0)
    acc = torch.promote_types(outputs[0].dtype, torch.float32)
    o = sum(torch.exp(t.double() - lse).to(acc)[..., None] * x.to(acc) for t, x in zip(lses, outputs))
    return o.to(outputs[0].dtype), lse


def _backward_reference(grad_out, q, k, v, bias, mask, out, lse, mask_mode, bias_grad):
    """The tile's gradients by their formulas in PyTorch: p from the merged lse, ds = p (do v^T - delta)."""
    logit = torch.einsum("bsihd,bsjhd->bshij", q, k) / math.sqrt(q.shape[-1])
    if bias is not None:
        logit = logit + bias[:, None]
    keep = None if mask is None else (mask[:, :, None, None, :] != 0)
    if keep is not None:
        logit = logit.masked_fill(~keep, max(ref.MASK_LOGIT, torch.finfo(q.dtype).min))
    # (B, S, h, N, N), in float64: a masked key's logit less lse is -log N, which float32 would lose
    p = torch.exp(logit.double() - lse.double().transpose(2, 3)[..., None]).to(q.dtype)
    do = grad_out.to(q.dtype)
    acc = torch.promote_types(q.dtype, torch.float32)
    delta = (grad_out.to(acc) * out.to(acc)).sum(-1).to(q.dtype).transpose(2, 3)[..., None]
    ds = p * (torch.einsum("bsihd,bsjhd->bshij", do, v) - delta)
    if keep is not None and mask_mode == "replace":
        ds = ds.masked_fill(~keep, 0.0)
    scale = 1 / math.sqrt(q.shape[-1])
    dq = torch.einsum("bshij,bsjhd->bsihd", ds, k) * scale
    dk = torch.einsum("bshij,bsihd->bsjhd", ds, q) * scale
    dv = torch.einsum("bshij,bsihd->bsjhd", p, do)
    dz = ds.sum(1).float() if bias_grad else q.new_empty(0, dtype=torch.float32)
    return dq, dk, dv, dz


def attention_tile_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
                            mask: Tensor | None, out: Tensor, lse: Tensor, *, bias_grad: bool = True,
                            mask_mode: str = "replace", precision: str = "default",
                            impl: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One key tile's share of the attention core's gradients.

    Args:
        grad_out: (B, S, N, h, d) the gradient of the merged (un-gated) output.
        q, k, v, bias, mask, mask_mode, precision, impl: as `attention_tile_forward` was called for this tile.
        out: (B, S, N, h, d) the merged output; lse: (B, S, N, h) the merged log-sum-exp (`merge_tiles`).
        bias_grad: whether to make the bias's gradient (needs a bias).
    Returns:
        (dq (B, S, N, h, d), dk, dv (B, S, M, h, d)) in q's dtype and dbias (B, h, N, M) float32 (empty without
        bias_grad): dq is this tile's term of the queries' gradient (the terms of every tile sum to it); dk, dv and
        dbias are this tile's keys', values' and bias's.
    """
    _check(q, k, v, bias, mask, mask_mode, precision, impl)
    for name, t, shape in (("grad_out", grad_out, q.shape), ("out", out, q.shape), ("lse", lse, q.shape[:4])):
        check_floating(name, t)
        if t.shape != shape or t.device != q.device:
            raise ValueError(f"{name} must have shape {tuple(shape)} on {q.device}, got {tuple(t.shape)} on "
                             f"{t.device}")
    if bias_grad and bias is None:
        raise ValueError("bias_grad needs a bias: bias is None")
    if not _fused(q, k, impl):
        with torch.no_grad():
            return _backward_reference(grad_out, q, k, v, bias, mask, out, lse, mask_mode, bias_grad)
    from .stages.attention.tile import tile_backward, tile_backward_op

    return (tile_backward_op if traced(q) else tile_backward)(grad_out, q, k, v, bias, mask, out, lse, mask_mode,
                                                              precision, bias_grad)

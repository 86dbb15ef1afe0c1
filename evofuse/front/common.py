"""What the operations' declarations and the integrations share: the casts, autocast's dtype, the device guard and
the column view of the MSA."""

from __future__ import annotations

import contextlib

import torch


def on_device(t: torch.Tensor):
    """Triton launches on the current CUDA device: the input's is made current for an eager call (a compiled
    graph guards its devices itself)."""
    if t.is_cuda and not torch.compiler.is_compiling():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


JOINED_CAST_MAX = 1 << 20  # elements: tensors of at most this many that change dtype are cast together


def cast(tensors, dtype: torch.dtype) -> list:
    """The tensors in dtype, vectors (LayerNorm weights, biases) with unit stride, which the kernels take without
    strides (None stays None); one that is so already is passed as it is, without the dispatcher call of a no-op
    `.to` (a call's host time counts at small sizes). Where several parameters change dtype (float32 weights under
    autocast), they are joined and cast by one `.to`: two kernels a call and two in the backward, in place of two a
    parameter; each comes back as a view of the joined copy, those whose size is a multiple of 16 elements first, so
    that they start 16-element aligned as an allocation would."""
    tensors = list(tensors)
    joined = sorted((k for k, t in enumerate(tensors) if t is not None and t.dtype != dtype
                     and t.numel() <= JOINED_CAST_MAX), key=lambda k: tensors[k].numel() % 16 != 0)
    out = [t if t is None or (t.dtype == dtype and (t.dim() != 1 or t.stride(0) == 1))
           else t.to(dtype).contiguous() if t.dim() == 1 else t.to(dtype)
           for k, t in enumerate(tensors) if len(joined) < 2 or k not in joined]
    if len(joined) < 2:
        return out
    pieces = torch.cat([tensors[k].reshape(-1) for k in joined]).to(dtype).split([tensors[k].numel() for k in joined])
    for k, piece in sorted(zip(joined, pieces), key=lambda kp: kp[0]):
        out.insert(k, piece.view(tensors[k].shape))
    return out


# the device types whose autocast state is asked (torch.compile of torch 2.11 cannot trace is_autocast_available)
AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu", "mtia")


def autocast_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype torch's own layers compute in for an input x: autocast's where autocast is on for x's device and x
    is floating and not float64 (which autocast leaves as it is), else x's. The functional forms and the
    integrations' replacements (as the models' linear layers) both follow it."""
    device_type = x.device.type
    if (device_type in AUTOCAST_DEVICES and torch.is_autocast_enabled(device_type) and x.is_floating_point()
            and x.dtype != torch.float64):
        return torch.get_autocast_dtype(device_type)
    return x.dtype


def columns(msa_repr: torch.Tensor, msa_mask: torch.Tensor | None) -> tuple:
    """(x, mask): each residue's column a row, (B, N, S, D) and (B, N, S) (views: the kernels take strides)."""
    return msa_repr.transpose(1, 2), None if msa_mask is None else msa_mask.transpose(1, 2)

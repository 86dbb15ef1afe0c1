"""What every functional form shares: the operations' packages (the one place where operations are listed, so that
`import evofuse` registers their torch.library ops), the option checks, the folding of leading dimensions, the casts,
autocast and the device guard."""

from __future__ import annotations

import contextlib
import functools
import inspect

import torch

from .. import reference as ref
from .._dispatch import resolve_impl, triton_available, warn_once
from .._runtime import PRECISIONS
from .._validation import check_params, check_shapes

if triton_available():  # the operations' torch.library ops, registered here: `import evofuse` makes torch.ops.evofuse.*
    from ..ops import attention_pair_bias as apb
    from ..ops import msa_column_attention as col
    from ..ops import msa_column_global_attention as gcol
    from ..ops import outer_product_mean as opm
    from ..ops import pair_weighted_averaging as pwa
    from ..ops import row_attention as att
    from ..ops import transition as trans
    from ..ops import triangle_attention as tri
    from ..ops import triangle_multiplication as trimul
else:  # (no Triton: every call takes the reference; `resolve_impl` refuses impl="triton")
    opm = pwa = att = tri = trimul = col = gcol = trans = apb = None


def parameters(x: torch.Tensor, source: str, params: dict[str, torch.Tensor | None], shapes: dict[str, str],
               optional: tuple[str, ...] = (), sizes: dict[str, int] | None = None) -> dict[str, int]:
    """The sizes the parameters' shape letters take (`_validation.check_shapes`), each parameter checked a real
    floating tensor on the device of the input `source` (x), those in `optional` allowed None."""
    check_params(x.device, params, optional=optional, source=source)
    return check_shapes(params, shapes, sizes)


def check_heads(num_heads: object, width: int, what: str = "the inner width") -> None:
    if not isinstance(num_heads, int) or num_heads < 1 or width % num_heads != 0:
        raise ValueError(f"num_heads must be a positive integer dividing {what} {width}, got {num_heads!r}")


def check_last(x: torch.Tensor, name: str, shape: str, size: int, source: str) -> None:
    """x's last dimension must be `size`, the size of the parameter `source`; shape: x's, as the message spells it."""
    if x.shape[-1] != size:
        raise ValueError(f"{name} must have shape ({shape}, {size}) ({size}: the size of {source}): last dimension is "
                         f"{x.shape[-1]}, expected {size}")


def dispatch(label: str, x: torch.Tensor, tensors, impl: str | None, reference, fused, unsupported: str | None = None):
    """The call's path: `reference()` where impl resolves to "torch" (`_dispatch.resolve_impl`), and with a one-time
    warning where the kernels do not take the call (`unsupported` says why: "float64", "head_dim=48, ..."); else
    `fused(train)` on x's device, train whether autograd records the call (any of `tensors`, the input and the cast
    parameters, requiring a gradient), so that the op keeps what its backward takes."""
    if resolve_impl(impl, x) == "torch":
        return reference()
    if unsupported is not None:
        warn_once(f"{label}-{unsupported}", f"evofuse: no fused {label} for {unsupported}; running the PyTorch "
                  "reference")
        return reference()
    train = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    with on_device(x):
        return fused(train)


def check_options(precision: str, normalization: str | None = None) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if normalization is not None and normalization not in ref.NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {ref.NORMALIZATIONS}, got {normalization!r}")


def leading(msa_repr: object) -> tuple[int, ...] | None:
    """msa_repr's dimensions before (S, N, D) when they are not one batch dimension (None when they are, or when
    msa_repr is no tensor of rank >= 3: the checks then name what is wrong)."""
    if not isinstance(msa_repr, torch.Tensor) or msa_repr.dim() < 3 or msa_repr.dim() == 4:
        return None
    return tuple(msa_repr.shape[:-3])


def batched(lead: tuple[int, ...], **tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Each tensor with the leading dimensions `lead` (checked) folded into one batch dimension."""
    out = []
    for name, t in tensors.items():
        if t is not None:
            if not isinstance(t, torch.Tensor) or tuple(t.shape[:len(lead)]) != lead:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must have the leading dimensions {lead} of msa_repr, got {shape}")
            t = t.reshape(-1, *t.shape[len(lead):]) if lead else t[None]
        out.append(t)
    return out


def unbatched(out: torch.Tensor, lead: tuple[int, ...]) -> torch.Tensor:
    return out.reshape(*lead, *out.shape[1:]) if lead else out[0]


def folds_leading(*names: str):
    """A functional form of the MSA (its first argument (B, S, N, D)) taking any leading dimensions in place of B
    (none: an unbatched (S, N, D)): where they are not one batch dimension, the arguments `names` (the input first;
    each checked to share them) are folded into one and the output is given them back."""

    def wrap(form):
        signature = inspect.signature(form)

        @functools.wraps(form)
        def call(*args, **kwargs):
            lead = leading(args[0] if args else kwargs.get(names[0]))
            if lead is None:
                return form(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            folded = batched(lead, **{name: bound.arguments.get(name) for name in names})
            bound.arguments.update((name, t) for name, t in zip(names, folded) if name in bound.arguments)
            return unbatched(form(*bound.args, **bound.kwargs), lead)

        return call

    return wrap


def pair_batched(pair_repr: torch.Tensor, pair_mask: torch.Tensor | None):
    """(pair (B, N, N, c), mask (B, N, N) or None, restore): the pair stack's checked input with its leading
    dimensions folded into one batch dimension (as it is, no views, where it has one), and the function that gives
    an output its leading dimensions back."""
    lead = pair_repr.shape[:-3]
    if len(lead) == 1:
        return pair_repr, pair_mask, lambda out: out
    z, mask = batched(lead, pair_repr=pair_repr, pair_mask=pair_mask)
    return z, mask, lambda out: unbatched(out, lead)


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


def follows_autocast(form):
    """`form` (a functional form whose first argument is its input, to whose dtype it casts every other input) as
    torch's own layers run under `torch.autocast`: where autocast is on for the input's device, a floating input of
    another dtype than autocast's (float64 aside, as autocast leaves it) computes in autocast's dtype and returns it.
    The form itself runs with autocast off, so that its reference path rounds as the kernels do."""

    name = next(iter(inspect.signature(form).parameters))

    @functools.wraps(form)
    def call(*args, **kwargs):
        first = args[0] if args else kwargs.get(name)
        if (not isinstance(first, torch.Tensor) or first.device.type not in AUTOCAST_DEVICES
                or not torch.is_autocast_enabled(first.device.type)):
            return form(*args, **kwargs)
        dtype = autocast_dtype(first)
        if dtype != first.dtype:
            args, kwargs = ((first.to(dtype), *args[1:]), kwargs) if args else (args, {**kwargs, name: first.to(dtype)})
        with torch.autocast(first.device.type, enabled=False):
            return form(*args, **kwargs)

    return call


def autocast_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype torch's own layers compute in for an input x: autocast's where autocast is on for x's device and x
    is floating and not float64 (which autocast leaves as it is), else x's. The functional forms and the
    integrations' replacements (as the models' linear layers) both follow it."""
    device_type = x.device.type
    if (device_type in AUTOCAST_DEVICES and torch.is_autocast_enabled(device_type) and x.is_floating_point()
            and x.dtype != torch.float64):
        return torch.get_autocast_dtype(device_type)
    return x.dtype

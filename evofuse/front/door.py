"""The front door every functional form goes through: a form's declaration (`Form`: its inputs' layout, its
parameters' shape letters, its options' rules, its reference, its fused call and the kernels' limits) and the one
function that reads it (`door`): autocast, the option checks, the inputs' and parameters' checks (errors naming the
argument), the folding of leading dimensions, the casts, the choice of path and the call."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import reference as ref
from .._dispatch import resolve_impl, warn_once
from .._runtime import PRECISIONS
from .._validation import (
    check_mask,
    check_msa,
    check_pair,
    check_pair_input,
    check_pair_mask,
    check_params,
    check_rows_input,
    check_shapes,
    check_width,
)
from .common import AUTOCAST_DEVICES, autocast_dtype, cast, on_device


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


def dispatch(label: str, x: torch.Tensor, tensors, impl: str | None, reference, fused, supports=lambda: None):
    """The call's path: `reference()` where impl resolves to "torch" (`_dispatch.resolve_impl`), and with a one-time
    warning where the kernels do not take the call (`supports()` says why: "float64", "head_dim=48, ..."; asked only
    where the kernels could run, as it may ask them); else `fused(train)` on x's device, train whether autograd
    records the call (any of `tensors`, the input and the cast parameters, requiring a gradient), so that the op
    keeps what its backward takes."""
    if resolve_impl(impl, x) == "torch":
        return reference()
    unsupported = supports()
    if unsupported is not None:
        warn_once(f"{label}-{unsupported}", f"evofuse: no fused {label} for {unsupported}; running the PyTorch "
                  "reference")
        return reference()
    train = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    with on_device(x):
        return fused(train)


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


# the layouts whose leading dimensions are folded once checked, and the dimensions after them
FOLDED_RANK = {"pair": 3, "single": 2}


@dataclass(frozen=True)
class Rule:
    """An option's rule: `test(value)` true for the values it takes, `phrase` what the error says they must be."""

    phrase: str
    test: Callable[[object], bool]


POSITIVE = Rule("> 0", lambda v: v > 0)
ROWS = Rule("a positive integer or None", lambda v: v is None or (isinstance(v, int) and v >= 1))


def one_of(values: tuple) -> Rule:
    return Rule(f"one of {values}", lambda v: v in values)


def masked_inf(inf: float, mask: torch.Tensor | None) -> str | None:
    """Why the kernels do not take a masked call whose mask's magnitude `inf` is below the models' (triangle and
    column attention's masked logit is -1e9 in the kernels), or None."""
    if inf < ref.TRIANGLE_MIN_INF and mask is not None:
        return f"inf={inf} (the kernels' masked logit is -1e9, equal for inf >= {ref.TRIANGLE_MIN_INF:g})"
    return None


class Call:
    """One call as a form's reference, fused call and checks see it: every argument by name (the tensor inputs
    folded to one batch dimension and, but the masks, cast to the call's dtype; the parameters cast to it; the
    options), `sizes` (the parameters' shape letters' sizes) and `dtype`."""

    def __init__(self, args: dict, sizes: dict, dtype: torch.dtype):
        for name, value in args.items():  # (attribute by attribute: what torch.compile traces)
            setattr(self, name, value)
        self.sizes, self.dtype = sizes, dtype


@dataclass(frozen=True)
class Form:
    """One operation's functional form as `door` reads it.

    label: its name in warnings. layout: the first input's: "msa" (B, S, N, D), any leading dimensions folded into B
    before anything is checked, the other inputs by name: msa_mask (B, S, N), pair_repr (B, N, N, P), pair_mask
    (B, N, N); "pair" ((..., N, N, c) with pair_mask); "single" ((..., N, c) with a pair and a token mask); or "rows"
    ((..., D) with a mask of its leading shape). inputs: the tensor inputs in the reference's order, the layout's
    first, the masks named "*mask". params: each parameter in the reference's order with its shape letters
    (`_validation.check_shapes`). optional: those that may be None (or a function of the arguments giving them).
    width: the first input's channels as (letter, the parameter that gives it); pair: the msa layout's pair_repr
    channels likewise; heads: the letter of the width num_heads must divide, and how the error calls it. later:
    shapes checked once more with h = num_heads (where there are heads) and the letters `letters(sizes)` adds (c*c).
    rules: the options' rules (precision's is every form's). check(args): the form's own checks of the raw
    arguments, before any other; checked(args, sizes): once the letters' sizes are known. reference: the
    definition, called with the inputs by position and the parameters and the options it names by keyword.
    fused(call, train): the op's call, returning the output in the folded layout. supports(call): why the kernels
    do not take the call (None where they do)."""

    label: str
    layout: str
    inputs: tuple[str, ...]
    params: dict[str, str]
    reference: Callable
    fused: Callable[[Call, bool], torch.Tensor]
    optional: tuple[str, ...] | Callable[[dict], tuple[str, ...]] = ()
    width: tuple[str, str] = ("D", "layer_norm_weight")
    pair: tuple[str, str] | None = None
    heads: tuple[str, str] | None = None
    later: dict[str, str] = field(default_factory=dict)
    letters: Callable[[dict], dict] | None = None
    rules: dict[str, Rule] = field(default_factory=dict)
    check: Callable[[dict], None] | None = None
    checked: Callable[[dict, dict], None] | None = None
    supports: Callable[[Call], str | None] = lambda call: None

    def __post_init__(self):
        # computed once here, not as cached properties: torch.compile cannot trace a cached property's first read
        taken = (*self.inputs, *self.params)
        object.__setattr__(self, "tensors", taken)  # every tensor argument's name: the inputs, then the parameters
        # what is cast to the call's dtype: the inputs after the first but the masks, and the parameters
        object.__setattr__(self, "cast_names", (*(n for n in self.inputs[1:] if not n.endswith("mask")), *self.params))
        parts = {}  # each part's (weight's name, bias's name or ""), in the parameters' order
        for name in self.params:
            part, _, kind = name.rpartition("_")
            parts.setdefault(part, ["", ""])[kind == "bias"] = name
        object.__setattr__(self, "parts", {part: tuple(names) for part, names in parts.items()})
        # the names the reference takes by keyword beyond the inputs and parameters (its options)
        object.__setattr__(self, "reference_options", tuple(
            name for name in inspect.signature(self.reference).parameters if name not in taken))

    def weights(self, **layers) -> dict[str, torch.Tensor | None]:
        """The parameters by name from a model's layers: each part (a parameter's name less `_weight` or `_bias`:
        `layer_norm`, `query`, ...) as a layer with `weight` and `bias` (nn.Linear, nn.LayerNorm), a (weight, bias)
        pair, or None where the part is optional and absent. Every part of the form is given, and a bias only where
        the form takes one: an adapter that names a layer wrongly or drops a bias fails at its first call."""
        if len(layers) != len(self.parts) or any(part not in self.parts for part in layers):
            unknown = [part for part in layers if part not in self.parts]
            if unknown:
                raise TypeError(f"{self.label} has no parameter {unknown[0]}_weight or {unknown[0]}_bias")
            missing = [name for part, names in self.parts.items() if part not in layers for name in names if name]
            raise TypeError(f"{self.label}: {', '.join(missing)} not given")
        out = {}
        for part, (weight_name, bias_name) in self.parts.items():
            layer = layers[part]
            weight, bias = (None, None) if layer is None else layer if type(layer) is tuple else (
                layer.weight, layer.bias)
            if weight_name:
                out[weight_name] = weight
            if bias_name:
                out[bias_name] = bias
            elif bias is not None:
                raise ValueError(f"{self.label}: {part} has a bias, which it does not take")
        return out


def front(form: Form):
    """The public functional form declared by the decorated function's signature and docstring (its body is the
    docstring alone): a call binds its arguments by name as Python does and goes through `door` with `form`. The
    binding is plain tuples and dicts, which torch.compile traces (it traces neither `locals()` nor
    `inspect.Signature.bind`); a call Python would refuse gets Python's own TypeError."""

    def declare(fn):
        signature = inspect.signature(fn)
        names = tuple(signature.parameters)
        positional = tuple(n for n, p in signature.parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD)
        defaults = {n: p.default for n, p in signature.parameters.items() if p.default is not p.empty}

        @functools.wraps(fn)
        def call(*args, **kwargs):
            given = dict(zip(positional, args))
            values = {**defaults, **given, **kwargs}
            if len(args) > len(positional) or len(values) != len(names) or any(
                    n not in names or n in given for n in kwargs):
                signature.bind(*args, **kwargs)  # raises the TypeError Python would
            return door(form, values)

        call.form = form  # (what adapters read the parameters' names from: `form.weights`)
        return call

    return declare


def door(form: Form, args: dict):
    """A functional form's call: `args`, its arguments by name (bound by `front`), through `form`. Under
    `torch.autocast` a floating input computes in autocast's dtype as torch's own layers do, and the form runs with
    autocast off, so that its reference path rounds as the kernels do."""
    x = args[form.inputs[0]]
    if (isinstance(x, torch.Tensor) and x.device.type in AUTOCAST_DEVICES
            and torch.is_autocast_enabled(x.device.type)):
        dtype = autocast_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            return _checked_call(form, args if dtype == x.dtype else {**args, form.inputs[0]: x.to(dtype)})
    return _checked_call(form, args)


# (form label, `_signature`) -> the parameters' letters' sizes: the signatures whose checks have passed
_CHECKED: dict = {}
CHECKED_MAX = 4096  # signatures kept before the table starts again (inference over many lengths)


def _signature(args: dict) -> tuple | None:
    """What the checks read of a call: each argument's name with, for a tensor, its type, shape, dtype and device,
    else its type and value; None where a value cannot be a key (the call is then checked in full)."""
    key = []
    for name, value in args.items():
        if isinstance(value, torch.Tensor):
            key.append((name, type(value), value.shape, value.dtype, value.device))
        elif value is None or isinstance(value, (bool, int, float, str)):
            key.append((name, type(value), value))
        else:
            return None
    return tuple(key)


def _checked_call(form: Form, args: dict):
    """The checks of a call, once for each signature (`_signature`: the checks read shapes, dtypes, devices and
    option values, never tensor values), then `_call`. torch.compile traces them every time: its guards stand for
    the table there."""
    key = None if torch.compiler.is_compiling() else _signature(args)
    sizes = None if key is None else _CHECKED.get((form.label, key))
    if sizes is None:
        args, sizes, restore = _checks(form, args)
        if key is not None:
            if len(_CHECKED) >= CHECKED_MAX:
                _CHECKED.clear()
            _CHECKED[form.label, key] = dict(sizes)
        return _call(form, args, sizes, restore)
    restore = None
    if form.layout == "msa":  # (the checked signature's fold, without its checks)
        lead = leading(args[form.inputs[0]])
        if lead is not None:
            args = {**args, **dict(zip(form.inputs, batched(lead, **{n: args[n] for n in form.inputs})))}
            restore = lead
    return _call(form, args, dict(sizes), restore)


def _checks(form: Form, args: dict) -> tuple[dict, dict, tuple | None]:
    """(args, the parameters' letters' sizes, the leading dimensions folded or None): every check of a call, errors
    naming the argument, and the MSA layout's folding of its leading dimensions."""
    precision = args["precision"]
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    for name, rule in form.rules.items():
        if not rule.test(args[name]):
            raise ValueError(f"{name} must be {rule.phrase}, got {args[name]!r}")
    if form.check is not None:
        form.check(args)
    first, restore = form.inputs[0], None
    if form.layout == "msa":  # (folded before anything is checked: the checks see (B, S, N, D))
        lead = leading(args[first])
        if lead is not None:
            args = {**args, **dict(zip(form.inputs, batched(lead, **{n: args[n] for n in form.inputs})))}
            restore = lead
        args[first] = check_msa(args[first])
    elif form.layout == "pair":
        check_pair_input(args[first], args["pair_mask"])
    else:
        check_rows_input(args[first], args["mask"], first)
    x = args[first]
    params = {name: args[name] for name in form.params}
    optional = form.optional(args) if callable(form.optional) else form.optional
    sizes = parameters(x, first, params, form.params, optional=optional)
    if form.heads is not None:
        check_heads(args["num_heads"], sizes[form.heads[0]], form.heads[1])
    if form.later:  # (h: num_heads, where the form has heads)
        more = {} if form.letters is None else form.letters(sizes)
        sizes.update(check_shapes(params, form.later, {**sizes, **more, **(
            {"h": args["num_heads"]} if form.heads is not None else {})}))
    _check_layout(form, args, x, sizes)
    if form.checked is not None:
        form.checked(args, sizes)
    return args, sizes, restore


def _check_layout(form: Form, args: dict, x: torch.Tensor, sizes: dict) -> None:
    """The first input's channels and the other inputs' shapes and devices against it."""
    letter, source = form.width
    if form.layout == "msa":
        B, S, N = check_width(x, sizes[letter], source)
        if "pair_repr" in args:
            check_pair(args["pair_repr"], B, N, sizes[form.pair[0]], form.pair[1], x.device)
        if "msa_mask" in args:
            check_mask(args["msa_mask"], B, S, N, x.device)
        if "pair_mask" in args:
            check_pair_mask(args["pair_mask"], B, N, x.device)
    else:
        shape = {"pair": "..., N, N", "single": "..., N", "rows": "..."}[form.layout]
        check_last(x, form.inputs[0], shape, sizes[letter], source)


def _call(form: Form, args: dict, sizes: dict, restore):
    """The checked call folded (the pair's and the single representation's leading dimensions), cast and
    dispatched."""
    x = args[form.inputs[0]]
    rank = FOLDED_RANK.get(form.layout)
    if rank is not None and x.dim() != rank + 1:
        restore = x.shape[:-rank]
        for name in form.inputs:
            t = args[name]
            if t is not None:
                args[name] = t.reshape(-1, *t.shape[len(restore):]) if restore else t[None]
        x = args[form.inputs[0]]
    args.update(zip(form.cast_names, cast([args[n] for n in form.cast_names], x.dtype)))
    call = Call(args, sizes, x.dtype)

    def reference():
        return form.reference(*[args[n] for n in form.inputs], **{n: args[n] for n in form.params},
                              **{n: args[n] for n in form.reference_options})

    out = dispatch(form.label, x, [args[n] for n in form.tensors], args["impl"], reference,
                   lambda train: form.fused(call, train), lambda: form.supports(call))
    return out if restore is None else unbatched(out, tuple(restore))

"""The checks that every operation's tests share, so that a new operation gets them by describing its module and
inputs: each input's and parameter's gradient alone against float64 (every branch its backward takes on what needs
a gradient), masks in every form, strided and broadcast inputs, the reference's pattern of NaN and Inf in the
outputs and gradients, and bad arguments named in the error."""

from __future__ import annotations

import inspect
from typing import Callable

import pytest
import torch

from .helpers import assert_contract, compare, grads

MASK_FORMS = ("float", "bool", "int")


def mask_form(mask: torch.Tensor | None, form: str) -> torch.Tensor | None:
    """A 0/1 mask as float, bool or int32."""
    if mask is None or form == "float":
        return mask
    return mask.bool() if form == "bool" else mask.to(torch.int32)


def strided(t: torch.Tensor) -> torch.Tensor:
    """The same values, differentiably, in storage of other strides: dimensions 1 and 2 swapped in memory (rank >= 3)
    and every other element of the last dimension (its stride 2)."""
    doubled = torch.stack([t, torch.zeros_like(t)], -1)  # (..., D, 2): the last dimension's stride 2 once sliced
    if t.dim() >= 3:
        doubled = doubled.transpose(1, 2).contiguous().transpose(1, 2)
    return doubled[..., 0]


def strided_parameters(mod: torch.nn.Module) -> torch.nn.Module:
    """Every parameter of `mod` replaced, in place, by one of the same values whose storage is transposed (matrices)
    and every other element (its last stride 2)."""
    for name, p in list(mod.named_parameters()):
        owner = mod.get_submodule(name.rpartition(".")[0])
        data = p.detach()
        if data.dim() == 2:
            data = data.t().contiguous().t()
        buffer = torch.zeros(*data.shape[:-1], 2 * data.shape[-1], dtype=data.dtype, device=data.device)
        if data.dim() == 2:
            buffer = buffer.t().contiguous().t()
        buffer[..., ::2] = data
        setattr(owner, name.rpartition(".")[2], torch.nn.Parameter(buffer[..., ::2]))
    return mod


def check_gradients(mod, inputs, dtype, device, differentiable=None, views=None, strided_weights=False, alone=False):
    """The fused path's output and every gradient (each input's, each parameter's) against float64 under the contract;
    16-bit: against twice the error of PyTorch's own path in that dtype. inputs: CPU tensors or None, the first
    `differentiable` (default: the floating 4-D ones) go in `dtype`, the masks as they are; views(k, leaf) makes
    input k from its leaf (strided or broadcast views); strided_weights: every parameter in strided storage; alone:
    then each leaf's gradient again with no other leaf needing one, so that every branch the backward takes on what
    needs a gradient runs. Returns the fused path's gradients."""
    if differentiable is None:
        differentiable = sum(1 for t in inputs if t is not None and t.is_floating_point() and t.dim() == 4)
    exact_out, exact = grads(mod.double(), [None if t is None else t.double() for t in inputs], "torch",
                             differentiable=differentiable, views=views)
    fused = mod.to(device, dtype)
    if strided_weights:
        strided_parameters(fused)
    on = [None if t is None else t.to(device, dtype) if k < differentiable else t.to(device)
          for k, t in enumerate(inputs)]
    lowp = None
    if dtype != torch.float32:
        lowp_out, lowp = grads(fused, on, "torch", differentiable=differentiable, views=views)
        lowp = {"output": lowp_out.cpu(), **{k: v.cpu() for k, v in lowp.items()}}
    out, got = grads(fused, on, "triton", differentiable=differentiable, views=views)
    got = {k: v.cpu() for k, v in got.items()}
    compare({"output": out.cpu(), **got}, {"output": exact_out, **exact}, dtype, lowp)
    for name in exact if alone else ():
        _, single = grads(fused, on, "triton", differentiable=differentiable, views=views, only=name)
        assert set(single) == {name}, (name, sorted(single))
        compare({name: single[name].cpu()}, exact, dtype, lowp, names=[name])
    return got


def _nonfinite_pattern(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return t.isnan(), t.isposinf(), t.isneginf()


def assert_same_nonfinite(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    for a, b, kind in zip(_nonfinite_pattern(got), _nonfinite_pattern(expected), ("NaN", "+Inf", "-Inf")):
        assert torch.equal(a.cpu(), b.cpu()), f"{what}: {kind} at {a.sum()} places, the reference's at {b.sum()}"


def check_nonfinite(mod, inputs, device, differentiable, target: str, index: tuple, value: float):
    """`value` (NaN or +-Inf) put at `index` of `target` (input k as "inputk", or a parameter's name): the fused
    path's output and every gradient have NaN and Inf exactly where the reference's (float32, same device) do."""
    mod = mod.to(device)
    inputs = [None if t is None else t.to(device).clone() for t in inputs]
    with torch.no_grad():
        if target.startswith("input"):
            inputs[int(target[5:])][index] = value
        else:
            mod.get_parameter(target)[index] = value
    ref_out, ref = grads(mod, inputs, "torch", differentiable=differentiable)
    out, got = grads(mod, inputs, "triton", differentiable=differentiable)
    assert not torch.isfinite(ref_out).all() or any(not torch.isfinite(g).all() for g in ref.values()), \
        "the reference shows no NaN or Inf: the case tests nothing"
    assert_same_nonfinite(out, ref_out, "output")
    for name, g in got.items():
        assert_same_nonfinite(g, ref[name], name)


def nonfinite_cases(mod, differentiable) -> list[tuple[str, float]]:
    """(target, value) for `check_nonfinite`: NaN in every input and parameter, +-Inf in every input."""
    inputs = [f"input{k}" for k in range(differentiable)]
    return ([(t, float("nan")) for t in inputs + [n for n, _ in mod.named_parameters()]]
            + [(t, v) for t in inputs for v in (float("inf"), float("-inf"))])


# (N, mask form, layout) of the awkward-shape gradient cases: N = 1, 17 (past one block of the interpreter's tiles)
# and, in the full tier, 97 (past one block of the GPU's); float, bool and int masks; strided and broadcast inputs
AWKWARD_CASES = [(1, "float", "plain"), (17, "bool", "strided"), (17, "int", "broadcast"),
                 pytest.param(97, "float", "plain", marks=pytest.mark.full)]


def gated_attention_arguments(mod, prefix: str, layer_norm: str, **inputs) -> dict:
    """The functional form's arguments from a module with OpenFold's gated attention (`<prefix>mha.linear_{q,k,v,g,o}`,
    the LayerNorm `<prefix><layer_norm>`), its other parameters named as `<name>_<weight or bias>`, and `inputs`."""
    names = {f"{prefix}{layer_norm}.weight": "layer_norm_weight", f"{prefix}{layer_norm}.bias": "layer_norm_bias",
             f"{prefix}mha.linear_g.bias": "gate_bias", f"{prefix}mha.linear_o.bias": "out_bias",
             **{f"{prefix}mha.linear_{k}.weight": f"{name}_weight" for k, name in
                (("q", "query"), ("k", "key"), ("v", "value"), ("g", "gate"), ("o", "out"))}}
    return {**inputs, **{names.get(name, name.replace(".", "_")): p.detach() for name, p in mod.named_parameters()}}


def argument_id(value) -> str | None:
    """The test id of a `bad_arguments` case: its argument's name."""
    return value if isinstance(value, str) else None


def _with(args: dict, name: str, value) -> dict:
    return {**args, name: value}


def bad_arguments(args: dict, masks: tuple[str, ...], optional: tuple[str, ...] = (),
                  leading: str = "msa_repr") -> list[tuple[str, object, type]]:
    """(argument, bad value, the exception it must raise) for every tensor argument of a call `args` (the valid
    arguments by name): not a tensor, on another device (meta), of a wrong dtype, of a wrong rank, of a wrong last
    dimension, and, for one not in `optional`, None. `masks` are the mask arguments (bool, integer and real
    floating allowed: complex is wrong), `leading` the argument whose leading dimensions may be any (rank 2 is
    wrong for it)."""
    cases = []
    for name, t in args.items():
        if not isinstance(t, torch.Tensor):
            continue
        wrong_dtype = torch.complex64 if name in masks else torch.int32
        cases += [(name, [[1.0]], TypeError), (name, t.to("meta"), ValueError), (name, t.to(wrong_dtype), TypeError),
                  (name, t.reshape(-1, t.shape[-1])[:1] if name == leading else t[None], ValueError),
                  (name, torch.cat([t, t[..., :1]], -1), ValueError)]
        if name not in optional and name not in masks:
            cases.append((name, None, TypeError))
    return cases


def check_bad_argument(fn: Callable, args: dict, name: str, value, exc: type, **options) -> None:
    """fn(**args with `name` replaced by `value`, **options) raises `exc` whose message names `name`."""
    signature = inspect.signature(fn)
    call = signature.bind_partial(**_with(args, name, value), **options)
    with pytest.raises(exc) as caught:
        fn(*call.args, **call.kwargs)
    assert name in str(caught.value), f"{name}: {caught.value}"


def expanded(shapes: list) -> Callable:
    """views(k, leaf) that expands leaf k, of size 1 in some dimensions, to shapes[k] (stride-0 dimensions)."""
    return lambda k, t: t.expand(shapes[k])


LAYOUTS = ("plain", "strided", "broadcast")


def layout_case(inputs: tuple, layout: str, broadcast_dims: list) -> tuple[tuple, Callable | None]:
    """(leaves, views) for inputs laid out as `layout`: "plain" as they are, "strided" through `strided` views,
    "broadcast" with each input k of size 1 in broadcast_dims[k] (None: as it is) and expanded there (stride 0)."""
    if layout == "plain":
        return inputs, None
    if layout == "strided":
        return inputs, lambda k, t: strided(t)
    leaves = tuple(t if t is None or dim is None else t.narrow(dim, 0, 1).contiguous()
                   for t, dim in zip(inputs, broadcast_dims))
    return leaves, expanded([None if t is None else t.shape for t in inputs])


def check_msa_leading_dimensions(mod, m: torch.Tensor, mask: torch.Tensor, device) -> None:
    """An MSA operation's module on m (6, S, N, D) and its mask (6, S, N) viewed as (2, 3, ...): the leading dimensions
    folded, and an unbatched MSA, give the batched result; float32 within the contract against float64."""
    mod = mod.to(device)
    m, mask = m.to(device).view(2, 3, *m.shape[1:]), mask.to(device).view(2, 3, *mask.shape[1:])
    flat = mod(m.flatten(0, 1), mask.flatten(0, 1), impl="triton")
    torch.testing.assert_close(mod(m, mask, impl="triton"), flat.view(2, 3, *flat.shape[1:]))
    torch.testing.assert_close(mod(m[1, 2], mask[1, 2], impl="triton"), flat[5])
    exact = mod.double()(m.double(), mask.double(), impl="torch")
    assert_contract(mod.float()(m, mask, impl="triton").cpu(), exact.cpu(), torch.float32)

"""Public functional API: the two operations with their weights passed explicitly.

Both validate their inputs (SPEC 4), choose the path (SPEC 5: the fused Triton kernels for CUDA
tensors, the PyTorch reference in `evofuse.reference` otherwise) and return a tensor in msa_repr's
dtype. `impl` ("auto", "triton", "torch") overrides the EVOFUSE_IMPL environment variable for one
call; `precision` ("default", "fast") chooses the float32 contract of SPEC 3.
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch

from . import reference as ref
from ._checks import check_mask, check_msa, check_pair, check_param_shapes, check_params
from ._dispatch import resolve_impl, warn_once
from ._library import (
    OuterProductMeanFunction,
    RowAttentionFunction,
    msa_row_attention_op,
    msa_row_attention_train_op,
    outer_product_mean_op,
    outer_product_mean_train_op,
)
from .ops._common import PRECISIONS, Replays


@functools.lru_cache(maxsize=64)
def _opm_shapes(D: int, c: int, R: int) -> dict[str, tuple[int, ...]]:
    """The shapes of the Outer Product Mean's parameters (layer_norm_weight's defines D)."""
    return dict(layer_norm_bias=(D,), proj_a_weight=(c, D), proj_a_bias=(c,), proj_b_weight=(c, D), proj_b_bias=(c,),
                out_proj_weight=(R, c * c), out_proj_bias=(R,))


@functools.lru_cache(maxsize=64)
def _att_shapes(D: int, P: int, h: int) -> dict[str, tuple[int, ...]]:
    """The shapes of row attention's parameters (layer_norm_weight's defines D, pair_bias_weight's P)."""
    shapes = {f"{name}_{kind}": (D, D) if kind == "weight" else (D,)
              for name in ("query", "key", "value", "gate", "out_proj") for kind in ("weight", "bias")}
    return dict(layer_norm_bias=(D,), **shapes, pair_bias_weight=(h, P), pair_bias_bias=(h,))


def _path(*tensors: torch.Tensor | None) -> str:
    """How the fused forward runs: "direct" (eager, no gradient to record), "function" (eager, recording
    gradients: a plain autograd Function) or "op" (under torch.compile: the custom op, an opaque node with
    a registered backward). The custom op's dispatch costs ~20-40 us of host time a call, more than the
    whole kernel on small problems."""
    if torch.compiler.is_compiling():
        return "op"
    return "function" if _records_grad(*tensors) else "direct"


def _records_grad(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


_REPLAYS = Replays()


def _replay_key(tag: str, options: tuple, tensors: tuple) -> tuple[tuple | None, list[int] | None]:
    """The key under which a direct call (eager, CUDA tensors, no gradient recorded) may be replayed
    (`evofuse.ops._common.Replays`): the options, EVOFUSE_IMPL, the current device and each tensor's
    shape, strides, dtype, device and address modulo 16; and the tensors' addresses (0 for None), which
    a replay launches with. (None, None) for any other call, or for an argument that is not a tensor (the
    checks then name it)."""
    msa = tensors[0]
    if type(msa) is not torch.Tensor or not msa.is_cuda or torch.compiler.is_compiling():
        return None, None
    current = torch.cuda.current_device()
    if msa.device.index != current:  # launched under a device guard (`_on_device`): not recorded
        return None, None
    try:
        if _records_grad(*tensors):
            return None, None
        ptrs = [0 if t is None else t.data_ptr() for t in tensors]
        return (tag, options, os.environ.get("EVOFUSE_IMPL"), current,
                *[None if t is None else (t.shape, t.stride(), t.dtype, t.device, p % 16)
                  for t, p in zip(tensors, ptrs)]), ptrs
    except AttributeError:
        return None, None


def _on_device(msa_repr: torch.Tensor, path: str):
    """The context the fused kernels launch in: msa_repr's GPU made current when it is not (Triton and
    the launchers launch on the current device, so tensors on another GPU would otherwise be handed to
    kernels running on the current one). Under torch.compile ("op") the compiled graph guards devices."""
    if path != "op" and msa_repr.is_cuda and msa_repr.device.index != torch.cuda.current_device():
        return torch.cuda.device(msa_repr.device)
    return contextlib.nullcontext()


def clear_replays() -> None:
    """Forgets every replayable call and tape (after changing a launcher's module settings, as tests do)."""
    from .ops._tape import TAPES

    _REPLAYS.clear()
    TAPES.clear()


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def outer_product_mean(
    msa_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    proj_a_weight: torch.Tensor,
    proj_a_bias: torch.Tensor,
    proj_b_weight: torch.Tensor,
    proj_b_bias: torch.Tensor,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor,
    *,
    normalization: str = "seed",
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """Outer Product Mean (SPEC 1).

    Args:
        msa_repr: (B, S, N, D) float16, bfloat16, float32 or float64.
        msa_mask: (B, S, N) 0/1 of any real dtype (bool, int, float), or None for all ones.
        layer_norm_weight, layer_norm_bias: (D,).
        proj_a_weight, proj_b_weight: (c, D); proj_a_bias, proj_b_bias: (c,).
        out_proj_weight: (pair_dim, c*c), flat index p*c + q; out_proj_bias: (pair_dim,).
        normalization: "seed" (divide by max(sum_s mask[s, i], 1) before out_proj), "af2"
            (divide out_proj's output, bias included, by 1e-3 + sum_s mask[s, i] mask[s, j]) or
            "boltz" (divide by max(sum_s mask[s, i] mask[s, j], 1) before out_proj).
    Returns:
        (B, N, N, pair_dim) in msa_repr's dtype; parameters are cast to it. 16-bit inputs
        accumulate in float32.
    """
    tensors = (msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias, proj_b_weight,
               proj_b_bias, out_proj_weight, out_proj_bias)
    key, ptrs = _replay_key("opm", (normalization, precision, impl), tensors)
    plan = _REPLAYS.get(key)
    if plan is not None:
        return plan(ptrs)
    with _REPLAYS.record(key, tensors):
        if normalization not in ref.NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {ref.NORMALIZATIONS}, got {normalization!r}")
        _check_precision(precision)
        D = layer_norm_weight.shape[0] if isinstance(layer_norm_weight, torch.Tensor) else -1
        B, S, N = check_msa(msa_repr, D)
        check_mask(msa_mask, B, S, N, msa_repr.device)
        params = dict(layer_norm_weight=layer_norm_weight, layer_norm_bias=layer_norm_bias,
                      proj_a_weight=proj_a_weight, proj_a_bias=proj_a_bias, proj_b_weight=proj_b_weight,
                      proj_b_bias=proj_b_bias, out_proj_weight=out_proj_weight, out_proj_bias=out_proj_bias)
        check_params(msa_repr.device, params)
        c = proj_a_weight.shape[0]
        R = out_proj_weight.shape[0]
        check_param_shapes(params, _opm_shapes(D, c, R))

        def reference(*t):
            return ref.outer_product_mean_reference(*t, normalization=normalization)

        inputs = (msa_repr, msa_mask, *params.values())
        if resolve_impl(impl, msa_repr) == "torch":  # every tensor is on msa_repr's device (checked above)
            return reference(*inputs)
        if S == 0 or N == 0:  # no MSA row or no residue (outside SPEC 4's sizes): nothing to fuse
            return reference(*inputs)
        from .ops.outer_product_mean import FAST_HIDDEN_DIMS

        if c not in FAST_HIDDEN_DIMS or msa_repr.dtype == torch.float64:
            warn_once(f"opm-{c}-{msa_repr.dtype}",
                      f"evofuse: no fused Outer Product Mean for hidden_dim={c}, dtype={msa_repr.dtype} "
                      f"(fused: hidden_dim in {FAST_HIDDEN_DIMS}, 16/32-bit floats); using the PyTorch reference")
            return reference(*inputs)

        path = _path(msa_repr, *params.values())
        with _on_device(msa_repr, path):
            if path == "direct":
                from .ops.outer_product_mean import outer_product_mean_triton

                return outer_product_mean_triton(*inputs, normalization=normalization, precision=precision)
            if path == "function":
                return OuterProductMeanFunction.apply(msa_repr, msa_mask, normalization, precision, *params.values())
            if _records_grad(msa_repr, *params.values()):  # keeps what the backward would recompute
                return outer_product_mean_train_op(msa_repr, msa_mask, list(params.values()), normalization,
                                                   precision)[0]
            return outer_product_mean_op(msa_repr, msa_mask, list(params.values()), normalization, precision)


def msa_row_attention(
    msa_repr: torch.Tensor,
    pair_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    query_weight: torch.Tensor,
    query_bias: torch.Tensor,
    key_weight: torch.Tensor,
    key_bias: torch.Tensor,
    value_weight: torch.Tensor,
    value_bias: torch.Tensor,
    gate_weight: torch.Tensor,
    gate_bias: torch.Tensor,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor,
    pair_bias_weight: torch.Tensor,
    pair_bias_bias: torch.Tensor,
    *,
    num_heads: int,
    dropout: float = 0.0,
    training: bool = False,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """MSA row attention with pair bias (SPEC 2).

    Args:
        msa_repr: (B, S, N, D) float16, bfloat16, float32 or float64; D divisible by num_heads.
        pair_repr: (B, N, N, P) real floating.
        msa_mask: (B, S, N) 0/1 of any real dtype, or None; a key j with mask 0 gets logit -1e9
            (replaced, not added), so a row with every key masked averages v over all N keys.
        query/key/value/gate/out_proj weights: (D, D), biases (D,); channel = head * d + e.
        pair_bias_weight: (num_heads, P); pair_bias_bias: (num_heads,).
        dropout, training: dropout on the attention probabilities (training and dropout > 0 take the
            reference path, with a one-time warning).
    Returns:
        (B, S, N, D) in msa_repr's dtype; 16-bit inputs accumulate in float32.
    """
    tensors = (msa_repr, pair_repr, msa_mask, layer_norm_weight, layer_norm_bias, query_weight, query_bias, key_weight,
               key_bias, value_weight, value_bias, gate_weight, gate_bias, out_proj_weight, out_proj_bias,
               pair_bias_weight, pair_bias_bias)
    key, ptrs = _replay_key("att", (num_heads, dropout, training, precision, impl), tensors)
    plan = _REPLAYS.get(key)
    if plan is not None:
        return plan(ptrs)
    with _REPLAYS.record(key, tensors):
        _check_precision(precision)
        D = layer_norm_weight.shape[0] if isinstance(layer_norm_weight, torch.Tensor) else -1
        if not isinstance(num_heads, int) or num_heads < 1 or D % num_heads != 0:
            raise ValueError(f"num_heads must be a positive integer dividing msa_dim={D}, got {num_heads!r}")
        B, S, N = check_msa(msa_repr, D)
        P = pair_bias_weight.shape[-1] if isinstance(pair_bias_weight, torch.Tensor) else -1
        check_pair(pair_repr, B, N, P, msa_repr.device)
        check_mask(msa_mask, B, S, N, msa_repr.device)
        params = dict(layer_norm_weight=layer_norm_weight, layer_norm_bias=layer_norm_bias,
                      query_weight=query_weight, query_bias=query_bias, key_weight=key_weight,
                      key_bias=key_bias, value_weight=value_weight, value_bias=value_bias,
                      gate_weight=gate_weight, gate_bias=gate_bias, out_proj_weight=out_proj_weight,
                      out_proj_bias=out_proj_bias, pair_bias_weight=pair_bias_weight,
                      pair_bias_bias=pair_bias_bias)
        check_params(msa_repr.device, params)
        check_param_shapes(params, _att_shapes(D, P, num_heads))

        def reference(*t):
            return ref.msa_row_attention_reference(*t, num_heads=num_heads, dropout=dropout, training=training)

        inputs = (msa_repr, pair_repr, msa_mask, *params.values())
        if resolve_impl(impl, msa_repr) == "torch":  # every tensor is on msa_repr's device (checked above)
            return reference(*inputs)
        from .ops.row_attention import MAX_HEAD_DIM

        d = D // num_heads
        if training and dropout > 0:
            warn_once("att-dropout", "evofuse: attention dropout in training mode runs the PyTorch reference "
                                     "(no fused dropout yet)")
            return reference(*inputs)
        if d > MAX_HEAD_DIM or msa_repr.dtype == torch.float64:
            warn_once(f"att-{d}-{msa_repr.dtype}",
                      f"evofuse: no fused row attention for head_dim={d}, dtype={msa_repr.dtype} (fused: "
                      f"head_dim <= {MAX_HEAD_DIM}, 16/32-bit floats); using the PyTorch reference")
            return reference(*inputs)

        path = _path(msa_repr, pair_repr, *params.values())
        with _on_device(msa_repr, path):
            if path == "direct":
                from .ops.row_attention import msa_row_attention_triton

                return msa_row_attention_triton(*inputs, num_heads=num_heads, precision=precision)
            if path == "function":
                return RowAttentionFunction.apply(msa_repr, pair_repr, msa_mask, num_heads, precision,
                                                  *params.values())
            if _records_grad(msa_repr, pair_repr, *params.values()):  # keeps what the backward would recompute
                return msa_row_attention_train_op(msa_repr, pair_repr, msa_mask, list(params.values()), num_heads,
                                                  precision)[0]
            return msa_row_attention_op(msa_repr, pair_repr, msa_mask, list(params.values()), num_heads, precision)

"""The fused forwards as torch.library custom ops, so that torch.compile sees one opaque node per
operation (no graph break), with a fake implementation (shapes and dtypes only) and a registered
backward (`evofuse._backward`). The backwards run autograd themselves for the projections, so they
are called from the registered backward directly rather than as ops of their own (inside which
autograd does not record); the Triton parts of the backwards are ops of their own
(`evofuse::msa_row_attention_core_backward`, `evofuse::ln_project`, `evofuse::layer_norm_backward`,
`evofuse::ln_linear_backward`, `evofuse::opm_project`, `evofuse::opm_outer_products`,
`evofuse::opm_outer_product_grad`, `evofuse::opm_weight_grad`, `evofuse::opm_normalized_grad`,
`evofuse::sum_partials`), so that torch.compile can trace around them; eager backwards call the functions behind
them directly (`evofuse._backward._kernels`).

Eager calls that record gradients take `OuterProductMeanFunction` and `RowAttentionFunction` instead:
plain autograd Functions with the same forward, setup and backward, without the custom ops' dispatch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._backward import msa_row_attention_backward, outer_product_mean_backward
from .ops._tape import TAPES


@torch.library.custom_op("evofuse::outer_product_mean", mutates_args=())
def outer_product_mean_op(msa_repr: Tensor, msa_mask: Tensor | None, params: list[Tensor], normalization: str,
                          precision: str) -> Tensor:
    from .ops.outer_product_mean import outer_product_mean_triton

    return outer_product_mean_triton(msa_repr, msa_mask, *params, normalization=normalization, precision=precision)


@outer_product_mean_op.register_fake
def _(msa_repr, msa_mask, params, normalization, precision):
    B, _, N, _ = msa_repr.shape
    return msa_repr.new_empty((B, N, N, params[6].shape[0]))


def _opm_setup(ctx, inputs, output):
    msa_repr, msa_mask, params, normalization, _ = inputs
    saved = output[1:] if isinstance(output, tuple) else ()  # the training op's projections and per-pair scale
    ctx.save_for_backward(msa_repr, msa_mask, *saved, *params)
    ctx.num_saved = len(saved)
    ctx.normalization = normalization


# the Outer Product Mean's training calls replayed from tapes (`ops._tape`): 16-bit only (float32's backward runs
# autograd inside, which a tape does not repeat; its forward was never replayed on the GPU)
_TAPED_DTYPES = (torch.float16, torch.bfloat16)


def _opm_grads(ctx, grad_out, need_msa, need_params):
    """(msa_repr's gradient, None, then the eight parameters') from what `_opm_setup` kept. Eager 16-bit
    backwards are replayed from a tape after their first calls (`ops._tape`: at opm-af2-main 9 PyTorch ops, 8
    launches and 14 allocations a call, without the Python that decides them; session 20)."""
    msa_repr, msa_mask, *rest = ctx.saved_tensors
    saved, params = rest[:ctx.num_saved], rest[ctx.num_saved:]
    ab, scale = (t if t.numel() else None for t in saved) if saved else (None, None)  # empty: not kept
    needs = [need_msa, False, *need_params]
    normalization = ctx.normalization

    def backward(*t):
        return outer_product_mean_backward(t[:10], needs, t[10], normalization, t[11], t[12])

    tensors = (msa_repr, msa_mask, *params, grad_out, ab, scale)
    if msa_repr.dtype not in _TAPED_DTYPES:
        return backward(*tensors)
    return TAPES.call(("opm-backward", normalization, tuple(needs)), backward, tensors)


def _opm_backward(ctx, grad_out, *_):
    need_msa, _, need_params = ctx.needs_input_grad[:3]  # a list argument gets a list of flags
    grads = _opm_grads(ctx, grad_out, need_msa, need_params)
    return grads[0], None, list(grads[2:]), None, None


outer_product_mean_op.register_autograd(_opm_backward, setup_context=_opm_setup)


@torch.library.custom_op("evofuse::outer_product_mean_train", mutates_args=())
def outer_product_mean_train_op(msa_repr: Tensor, msa_mask: Tensor | None, params: list[Tensor], normalization: str,
                                precision: str) -> tuple[Tensor, Tensor, Tensor]:
    """The forward when gradients are recorded: (out, ab, scale), ab the masked projections
    (2, B, S, N, c) where the backward takes them (else empty) and scale the per-pair factor (B, N, N)
    float32 (empty for an empty output), which the backward takes instead of recomputing them."""
    from .ops.outer_product_mean import outer_product_mean_triton

    return outer_product_mean_triton(msa_repr, msa_mask, *params, normalization=normalization, precision=precision,
                                     save=True)


@outer_product_mean_train_op.register_fake
def _(msa_repr, msa_mask, params, normalization, precision):
    from .ops.layer_norm_linear import ln_linear_backward_fits

    B, S, N, D = msa_repr.shape
    c, R = params[2].shape[0], params[6].shape[0]
    out = msa_repr.new_empty((B, N, N, R))
    ab = msa_repr.new_empty((2, B, S, N, c) if ln_linear_backward_fits(msa_repr.dtype, D, c) else (0,))
    return out, ab, msa_repr.new_empty((B, N, N) if B * N * N * R else (0,), dtype=torch.float32)


outer_product_mean_train_op.register_autograd(_opm_backward, setup_context=_opm_setup)


@torch.library.custom_op("evofuse::msa_row_attention", mutates_args=())
def msa_row_attention_op(msa_repr: Tensor, pair_repr: Tensor, msa_mask: Tensor | None, params: list[Tensor],
                         num_heads: int, precision: str) -> Tensor:
    from .ops.row_attention import msa_row_attention_triton

    return msa_row_attention_triton(msa_repr, pair_repr, msa_mask, *params, num_heads=num_heads, precision=precision)


@msa_row_attention_op.register_fake
def _(msa_repr, pair_repr, msa_mask, params, num_heads, precision):
    return msa_repr.new_empty(msa_repr.shape)


def _att_setup(ctx, inputs, output):
    msa_repr, pair_repr, msa_mask, params, num_heads, precision = inputs
    saved = output[1:] if isinstance(output, tuple) else ()  # the training op's o and statistics
    ctx.save_for_backward(msa_repr, pair_repr, msa_mask, *saved, *params)
    ctx.num_saved = len(saved)
    ctx.num_heads = num_heads
    ctx.precision = precision


def _att_grads(ctx, grad_out, need_msa, need_pair, need_params):
    """(msa_repr's, pair_repr's gradient, None, then the fourteen parameters') from what `_att_setup` kept."""
    msa_repr, pair_repr, msa_mask, *rest = ctx.saved_tensors
    saved, params = rest[:ctx.num_saved], rest[ctx.num_saved:]
    return msa_row_attention_backward((msa_repr, pair_repr, msa_mask, *params),
                                      [need_msa, need_pair, False, *need_params], grad_out, ctx.num_heads,
                                      ctx.precision, *saved)


def _att_backward(ctx, grad_out, *_):
    need_msa, need_pair, _, need_params = ctx.needs_input_grad[:4]
    grads = _att_grads(ctx, grad_out, need_msa, need_pair, need_params)
    return grads[0], grads[1], None, list(grads[3:]), None, None


msa_row_attention_op.register_autograd(_att_backward, setup_context=_att_setup)


@torch.library.custom_op("evofuse::msa_row_attention_train", mutates_args=())
def msa_row_attention_train_op(msa_repr: Tensor, pair_repr: Tensor, msa_mask: Tensor | None, params: list[Tensor],
                               num_heads: int, precision: str) -> tuple[Tensor, Tensor, Tensor]:
    """The forward when gradients are recorded: (out, o, stats), o the un-gated attention output
    (B, S, N, D) and stats the softmax statistics (2, B, S, h, N) float32, which the backward takes
    instead of running the attention core again; both empty where the forward is a single launch."""
    from .ops.row_attention import msa_row_attention_triton

    return msa_row_attention_triton(msa_repr, pair_repr, msa_mask, *params, num_heads=num_heads, precision=precision,
                                    save=True)


@msa_row_attention_train_op.register_fake
def _(msa_repr, pair_repr, msa_mask, params, num_heads, precision):
    from .ops.row_attention import single_launch

    if single_launch(msa_repr, num_heads, params):  # o and the statistics not kept
        return (msa_repr.new_empty(msa_repr.shape), msa_repr.new_empty((0,)),
                msa_repr.new_empty((0,), dtype=torch.float32))
    B, S, N, _ = msa_repr.shape
    stats = msa_repr.new_empty((2, B, S, num_heads, N), dtype=torch.float32)
    return msa_repr.new_empty(msa_repr.shape), msa_repr.new_empty(msa_repr.shape), stats


msa_row_attention_train_op.register_autograd(_att_backward, setup_context=_att_setup)


@torch.library.custom_op("evofuse::msa_row_attention_core_backward", mutates_args=())
def msa_row_attention_core_backward_op(qkvg: Tensor, z: Tensor, msa_mask: Tensor | None, d_gated: Tensor,
                                       num_heads: int, precision: str, need_dz: bool, o: Tensor | None = None,
                                       stats: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The Triton part of row attention's backward (`ops.row_attention.attention_core_backward`)."""
    from .ops.row_attention import attention_core_backward

    return attention_core_backward(qkvg, z, msa_mask, d_gated, num_heads, precision, need_dz, o, stats)


@msa_row_attention_core_backward_op.register_fake
def _(qkvg, z, msa_mask, d_gated, num_heads, precision, need_dz, o=None, stats=None):
    dz = z.new_empty(z.shape if need_dz else (0,), dtype=torch.float32)
    return qkvg.new_empty(qkvg.shape), dz, d_gated.new_empty(d_gated.shape, dtype=qkvg.dtype)


@torch.library.custom_op("evofuse::opm_outer_products", mutates_args=())
def opm_outer_products_op(a_rows: Tensor, b: Tensor, scale: Tensor) -> Tensor:
    """The Outer Product Mean backward's recomputed, normalized outer products
    (`ops.outer_product_mean.outer_products`)."""
    from .ops.outer_product_mean import outer_products

    return outer_products(a_rows, b, scale)


@opm_outer_products_op.register_fake
def _(a_rows, b, scale):
    B, _, n, c = a_rows.shape
    return a_rows.new_empty((B, n * c, b.shape[2] * c))


@torch.library.custom_op("evofuse::opm_outer_product_grad", mutates_args=())
def opm_outer_product_grad_op(gs: Tensor, weight: Tensor, c: int) -> Tensor:
    """The Outer Product Mean backward's dX (`ops.outer_product_mean.outer_product_grad`)."""
    from .ops.outer_product_mean import outer_product_grad

    return outer_product_grad(gs, weight, c)


@opm_outer_product_grad_op.register_fake
def _(gs, weight, c):
    B, n, N, _ = gs.shape
    return gs.new_empty((B, n * c, N * c))


@torch.library.custom_op("evofuse::opm_weight_grad", mutates_args=("partials",))
def opm_weight_grad_op(g: Tensor, x: Tensor, c: int, partials: Tensor, accumulate: bool) -> None:
    """The Outer Product Mean backward's out_proj weight gradient of a block of rows, as partial sums written
    into (or added to) `partials` (`ops.outer_product_mean.outer_product_weight_grad`)."""
    from .ops.outer_product_mean import outer_product_weight_grad

    outer_product_weight_grad(g, x, c, partials, accumulate)


@opm_weight_grad_op.register_fake
def _(g, x, c, partials, accumulate):
    return None


@torch.library.custom_op("evofuse::opm_normalized_grad", mutates_args=())
def opm_normalized_grad_op(g: Tensor, scale: Tensor, scaled_sum: bool) -> tuple[Tensor, Tensor]:
    """The Outer Product Mean backward's normalized output gradient and the bias gradient's partial sums of a
    block of rows (`ops.outer_product_mean.normalized_grad`)."""
    from .ops.outer_product_mean import normalized_grad

    return normalized_grad(g, scale, scaled_sum)


@opm_normalized_grad_op.register_fake
def _(g, scale, scaled_sum):
    from .ops.outer_product_mean import gs_blocks

    B, n, N, R = g.shape
    return g.new_empty(g.shape), g.new_empty((gs_blocks(B * n * N), R), dtype=torch.float32)


@torch.library.custom_op("evofuse::sum_partials", mutates_args=())
def sum_partials_op(parts: list[Tensor], dtype: torch.dtype) -> list[Tensor]:
    """The backwards' float32 partial sums finished, rounded to `dtype` (`ops.partial_sums.sum_partials`)."""
    from .ops.partial_sums import sum_partials

    return sum_partials(parts, dtype)


@sum_partials_op.register_fake
def _(parts, dtype):
    return [p.new_empty((p.shape[1],), dtype=dtype) for p in parts]


@torch.library.custom_op("evofuse::layer_norm_backward", mutates_args=())
def layer_norm_backward_op(dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor,
                           need_x: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The backwards' LayerNorm gradients, 16-bit (`ops.layer_norm_linear.layer_norm_backward`); dx is empty
    without `need_x`."""
    from .ops.layer_norm_linear import layer_norm_backward

    dx, dw, db = layer_norm_backward(dy, x, mean, rstd, weight, need_x)
    return (dx if need_x else x.new_empty((0,))), dw, db


@layer_norm_backward_op.register_fake
def _(dy, x, mean, rstd, weight, need_x):
    D = x.shape[-1]
    dx = x.new_empty(x.shape) if need_x else x.new_empty((0,))
    return dx, x.new_empty((D,), dtype=torch.float32), x.new_empty((D,), dtype=torch.float32)


@torch.library.custom_op("evofuse::ln_linear_backward", mutates_args=())
def ln_linear_backward_op(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, weight: Tensor, mask: Tensor | None, dy0: Tensor,
                          dy1: Tensor, need_x: bool, out_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The Outer Product Mean backward's LayerNorm and projection gradients, 16-bit
    (`ops.layer_norm_linear.ln_linear_backward`); dx is empty without `need_x`."""
    from .ops.layer_norm_linear import ln_linear_backward
    from .reference import LAYER_NORM_EPS

    dx, *grads = ln_linear_backward(x, ln_weight, ln_bias, weight, mask, dy0, dy1, LAYER_NORM_EPS, need_x, out_dtype)
    return (dx if need_x else x.new_empty((0,))), *(g.clone() for g in grads)  # (views of one tensor: no aliases)


@ln_linear_backward_op.register_fake
def _(x, ln_weight, ln_bias, weight, mask, dy0, dy1, need_x, out_dtype):
    D = x.shape[-1]
    K = weight.shape[0]
    dx = x.new_empty(x.shape) if need_x else x.new_empty((0,))
    out = {"dtype": out_dtype}
    return dx, x.new_empty((D,), **out), x.new_empty((D,), **out), x.new_empty((K, D), **out), x.new_empty((K,), **out)


@torch.library.custom_op("evofuse::opm_project", mutates_args=())
def opm_project_op(x: Tensor, mask: Tensor | None, params: list[Tensor]) -> Tensor:
    """The Outer Product Mean backward's recomputed masked projections (2, B, S, N, c), 16-bit
    (`ops.outer_product_mean.project`), where the forward did not keep them."""
    from .ops.outer_product_mean import project

    return project(x, mask, *params)


@opm_project_op.register_fake
def _(x, mask, params):
    return x.new_empty((2, *x.shape[:3], params[2].shape[0]))


@torch.library.custom_op("evofuse::ln_project", mutates_args=())
def ln_project_op(x: Tensor, layer_norm_weight: Tensor, layer_norm_bias: Tensor, weights: list[Tensor],
                  biases: list[Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The backwards' recomputed LayerNorm + projection, 16-bit (`ops.layer_norm_linear.ln_project`)."""
    from .ops.layer_norm_linear import ln_project
    from .reference import LAYER_NORM_EPS

    return ln_project(x, layer_norm_weight, layer_norm_bias, weights, biases, LAYER_NORM_EPS)


@ln_project_op.register_fake
def _(x, layer_norm_weight, layer_norm_bias, weights, biases):
    B, S, N, D = x.shape
    stat = x.new_empty((B, S, N, 1), dtype=torch.float32)
    return x.new_empty((B, S, N, sum(w.shape[0] for w in weights))), x.new_empty((B, S, N, D)), stat, stat.clone()


class OuterProductMeanFunction(torch.autograd.Function):
    """The Outer Product Mean's eager training forward (outside torch.compile): `outer_product_mean_op`
    and its registered backward without the op's dispatch; both replayed from tapes after their first calls
    (`ops._tape`). apply(msa_repr, msa_mask, normalization, precision, *params)."""

    @staticmethod
    def forward(ctx, msa_repr, msa_mask, normalization, precision, *params):
        from .ops.outer_product_mean import outer_product_mean_triton

        def forward(msa, mask, *p):
            return outer_product_mean_triton(msa, mask, *p, normalization=normalization, precision=precision,
                                             save=True)

        tensors = (msa_repr, msa_mask, *params)
        if msa_repr.dtype in _TAPED_DTYPES:
            output = TAPES.call(("opm-forward", normalization, precision), forward, tensors)
        else:
            output = forward(*tensors)
        _opm_setup(ctx, (msa_repr, msa_mask, params, normalization, precision), output)
        return output[0]

    @staticmethod
    def backward(ctx, grad_out):
        needs = ctx.needs_input_grad
        grads = _opm_grads(ctx, grad_out, needs[0], needs[4:])
        return grads[0], None, None, None, *grads[2:]


class RowAttentionFunction(torch.autograd.Function):
    """Row attention's eager training forward (outside torch.compile): `msa_row_attention_train_op` and
    its registered backward without the op's dispatch. apply(msa_repr, pair_repr, msa_mask, num_heads,
    precision, *params)."""

    @staticmethod
    def forward(ctx, msa_repr, pair_repr, msa_mask, num_heads, precision, *params):
        from .ops.row_attention import msa_row_attention_triton

        output = msa_row_attention_triton(msa_repr, pair_repr, msa_mask, *params, num_heads=num_heads,
                                          precision=precision, save=True)
        _att_setup(ctx, (msa_repr, pair_repr, msa_mask, params, num_heads, precision), output)
        return output[0]

    @staticmethod
    def backward(ctx, grad_out):
        need_msa, need_pair, _, _, _, *need_params = ctx.needs_input_grad
        grads = _att_grads(ctx, grad_out, need_msa, need_pair, need_params)
        return grads[0], grads[1], None, None, None, *grads[3:]

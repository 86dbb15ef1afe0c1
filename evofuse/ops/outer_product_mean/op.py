"""The Outer Product Mean as a torch.library custom op: `evofuse::outer_product_mean`, its fake (shapes
only, for torch.compile) and its backward, registered with `register_autograd`.

Forward: LayerNorm, both projections and the mask in one kernel (`layer_norm_linear`), then the contraction,
by dtype: 16-bit inputs take the outer products X = a^T b from cuBLAS for a block of rows i at a time (at most
BLOCK_BYTES) and `kernels.opm_project_kernel` multiplies X, read pair by pair, by out_proj's weight; float32
inputs take the fused contraction (`kernels.opm_forward_kernel`) on float16 halves after power-of-two scales
(the float32 contract from three float16 products), with no N*N*c*c tensor. When training, the op also returns
the masked projections ab, which the backward takes instead of recomputing them.

Backward: the op `evofuse::outer_product_mean_core_backward`. Gs, the output's gradient times the per-pair
factor, and out_proj's bias gradient come from `backward_kernels.opm_grad_scale_kernel`; then, for blocks of output
rows i (each block's N*N*c*c products at most BLOCK_BYTES, so that the whole need not exist at long
sequences), the outer products' gradient dX = Gs W from `backward_kernels.opm_dx_kernel`, already in the layout
[(i p), (j q)], gives da = b dX^T and db = a dX as batched cuBLAS products, and out_proj's weight gradient
Gs^T X comes from `backward_kernels.opm_dw_kernel` on X = a^T b recomputed by cuBLAS. The projections' and the
LayerNorm's gradients come from `layer_norm_linear_backward`.
"""

from __future__ import annotations

import torch
import triton
from torch import Tensor

from ..._runtime import (
    autotuned,
    bucket,
    cdiv,
    custom_op,
    dot_precision,
    keep_for_backward,
    multiprocessors,
    next_pow2,
    operation,
    traced,
)
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.layer_norm_linear import joined_bias, layer_norm_linear
from ...stages.matmul import matmul, uses_tensor_cores
from . import backward_kernels, configs, kernels
from .kernels import float16_operands_kernel, operand_maxima_kernel, opm_forward_kernel

FUSED_HIDDEN_DIMS = (8, 16, 32, 64)
BLOCK_BYTES = 320 << 20  # the outer products (16-bit forward, backward) and their gradient, a block of rows i at a
# time (one block at opm-af2-main in 16 bits: every block costs its launches' host time)


def fused(hidden_dim: int, dtype: torch.dtype) -> bool:
    """Whether the fused kernels take this hidden_dim and dtype (else the reference runs); the config tables
    hold a fitting tile for each (a test says so)."""
    return hidden_dim in FUSED_HIDDEN_DIMS and dtype in (torch.float16, torch.bfloat16, torch.float32)


def counts_of(mask: Tensor | None, normalization: str) -> Tensor | None:
    """The counts the normalization divides by, (B, N, N) float32 (a broadcast view for "count_i", whose
    count depends on i alone), or None without a mask (every count is S). Exact for 0/1 masks."""
    if mask is None:
        return None
    if normalization == "count_i":
        rows = mask.sum(1, dtype=torch.float32)  # (B, N)
        return rows[:, :, None].expand(-1, -1, rows.shape[1])
    m = mask.to(torch.float32)
    return torch.bmm(m.transpose(1, 2), m)


def outer_product_mean_forward(msa_repr: Tensor, msa_mask: Tensor | None, layer_norm_weight: Tensor,
                               layer_norm_bias: Tensor, proj_a_weight: Tensor, proj_a_bias: Tensor | None,
                               proj_b_weight: Tensor, proj_b_bias: Tensor | None, out_proj_weight: Tensor,
                               out_proj_bias: Tensor, counts: Tensor | None, normalization: str, count_eps: float,
                               precision: str, train: int) -> tuple[Tensor, Tensor]:
    """(out (B, N, N, R), ab (B, S, N, 2c)): the output and, when `train`, the masked projections [a | b] that
    the backward takes (else an empty tensor), both in msa_repr's dtype. Every parameter already has
    msa_repr's dtype (the functional API casts them). counts (B, N, N) float32: what the normalization divides by,
    given where the MSA's rows are split over devices (the counts over every row; the output is then a partial sum
    over the rows, its bias given as zeros), or None: made from the mask. `train` is a bool typed int: DTensor keys
    its cache of an op's sharding on the arguments from the first int one on (`evofuse.sharding`), and the kept
    output's shape is train's."""
    B, S, N, _ = msa_repr.shape
    R = out_proj_weight.shape[0]
    ab = layer_norm_linear(msa_repr, layer_norm_weight, layer_norm_bias, torch.cat([proj_a_weight, proj_b_weight]),
                           joined_bias([proj_a_bias, proj_b_bias], [proj_a_weight, proj_b_weight]), msa_mask, precision)
    if B * N * N * R == 0:
        return torch.zeros(B, N, N, R, dtype=msa_repr.dtype, device=msa_repr.device), ab
    counts = counts_of(msa_mask, normalization) if counts is None else counts
    eps = count_eps if normalization == "count_ij_after" else 0.0
    if msa_repr.dtype != torch.float32:  # 16-bit: the outer products by cuBLAS, a block of rows i at a time
        out = torch.empty(B, N, N, R, dtype=msa_repr.dtype, device=msa_repr.device)
        project_blocks(*_split_operands(ab), counts, out_proj_weight, out_proj_bias, out, eps)
        return out, ab if train else ab.new_empty(0)
    # float32: one fused kernel on float16 halves of the operands, scaled by powers of two
    terms = 3 if precision == "default" else 1
    ab_h, w_h, inverse = _float16_operands(ab, out_proj_weight, terms)
    if not train:  # (its memory free before the output's is taken)
        ab = ab.new_empty(0)
    out = torch.empty(B, N, N, R, dtype=msa_repr.dtype, device=msa_repr.device)
    c = proj_a_weight.shape[0]
    count_args = (out, 0, 0, 0) if counts is None else (counts, *counts.stride())
    programs = multiprocessors(msa_repr.device)
    slot = configs.workspace_slot(R, c, terms)
    workspace = torch.empty(programs * slot, dtype=torch.float32, device=msa_repr.device)

    def grid(meta):
        return min(programs, B * cdiv(N, meta["BLOCK_I"]) * cdiv(N, meta["BLOCK_J"])),

    operands = ab_h[0].view(B, S, N, 2 * c)
    a, b = operands[..., :c], operands[..., c:]
    _tuned()[grid](
        a, b, *a.stride()[:3], ab_h.stride(0), *count_args, w_h[0], *w_h[0].stride(), w_h.stride(0), out_proj_bias,
        inverse, workspace, slot, out, *out.stride(), B, S, N, R, bucket(S), bucket(N), C=c,
        DIVIDE_BIAS=normalization == "count_ij_after", EPS=eps, HAS_COUNTS=counts is not None, TERMS=terms)
    return out, ab


def _block_rows(B: int, N: int, c: int, element_size: int) -> int:
    """Rows i a block of the outer products (B, rows*c, N*c) takes so that it holds at most BLOCK_BYTES."""
    return max(1, min(N, BLOCK_BYTES // max(1, B * N * c * c * element_size)))


def _split_operands(ab: Tensor) -> tuple[Tensor, Tensor]:
    """(a (B, S, N, c), b (B, S, N*c)), contiguous, from the masked projections ab = [a | b] (B, S, N, 2c)."""
    B, S, N, c2 = ab.shape
    return ab[..., :c2 // 2].contiguous(), ab[..., c2 // 2:].contiguous().view(B, S, N * c2 // 2)


def _outer_products_scale(S: int) -> float:
    """What cuBLAS's outer products over S MSA rows are multiplied by before their rounding: 1 / S rounded up to a
    power of two (exact to undo; keeps 16-bit sums of S products in float16's range)."""
    return 1.0 / next_pow2(S)


def _outer_products(a_rows: Tensor, b_flat: Tensor, scale: float, precision: str = "default") -> Tensor:
    """X[b, (i p), (j q)] = scale * sum_s a_rows[b, s, (i p)] b_flat[b, s, (j q)], (B, n*c, N*c) in their dtype, by
    cuBLAS (float32 sums, scaled, then rounded once); float32 by `matmul`'s three TF32 products."""
    if uses_tensor_cores(a_rows.dtype, precision):
        return matmul(a_rows.mT, b_flat, precision, scale)
    B, _, rows = a_rows.shape
    x = torch.empty(B, rows, b_flat.shape[-1], dtype=a_rows.dtype, device=a_rows.device)
    return x.baddbmm_(a_rows.mT, b_flat, beta=0.0, alpha=scale)


def project_blocks(a: Tensor, b_flat: Tensor, counts: Tensor | None, weight: Tensor, bias: Tensor, out: Tensor,
                   eps: float, precision: str = "default") -> None:
    """out (B, N_i, N, R) from the masked projections a (B, S, N_i, c) of the rows i and b_flat (B, S, N*c) of every
    residue j (`_split_operands`; N_i = N but where the MSA is split by residues): for each block of rows i, X =
    a_block^T b times 1 / (S rounded up to a power of two) by cuBLAS (float32 sums, rounded once to their dtype:
    the scale keeps float16's within range; float32 by `matmul`'s three TF32 products), then
    `kernels.opm_project_kernel` for X @ W^T with the normalization's factor (counts (B, N_i, N) float32, or None for
    S) and the bias (float32: three TF32 products at the default precision). (eps > 0: "count_ij_after".)"""
    B, S, N_i, c = a.shape
    N = b_flat.shape[-1] // c
    R = weight.shape[0]
    x_scale = _outer_products_scale(S)
    rows = _block_rows(B, N, c, a.element_size())
    for i0 in range(0, N_i, rows):
        n = min(rows, N_i - i0)
        x_block = _outer_products(a[:, :, i0:i0 + n].reshape(B, S, n * c), b_flat, x_scale, precision)
        o = out[:, i0:i0 + n]
        count_args = (o, 0, 0, 0) if counts is None else (counts[:, i0:i0 + n], *counts.stride())

        def grid(meta, n=n):
            return B * cdiv(n, meta["BLOCK_I"]) * cdiv(N, meta["BLOCK_J"]) * cdiv(R, meta["BLOCK_R"]),

        _tuned_project()[grid](x_block, *x_block.stride(), *count_args, weight, *weight.stride(), bias, o, *o.stride(),
                               n, N, R, S, x_scale, bucket(N), C=c, DIVIDE_BIAS=eps > 0, EPS=eps,
                               HAS_COUNTS=counts is not None, PRECISION=dot_precision(x_block.dtype, precision))
        del x_block  # (freed before the next block's is taken: one block of X at a time)


OPERAND_TILE = 4096  # float32 elements a program of the operand kernels takes a step
OPERAND_PROGRAMS = 512  # at most, for a and b (each over consecutive blocks of rows)


def _float16_operands(ab: Tensor, weight: Tensor, terms: int) -> tuple[Tensor, Tensor, Tensor]:
    """(ab_h (halves, M, 2c), w_h (halves, R, c*c), inverse (1,)): float16 halves (2 with terms 3, else 1) of a,
    b and out_proj's weight, each scaled by a power of two into float16's range (float16_halves.SCALE_TOP), and
    1 / the product of the three scales, all on the device (no synchronization), in two launches."""
    two_c = ab.shape[-1]
    rows = ab.reshape(-1, two_c)
    w = weight.reshape(-1)
    halves = 2 if terms == 3 else 1
    ab_h = torch.empty(halves, *rows.shape, dtype=torch.float16, device=ab.device)
    w_h = torch.empty(halves, *weight.shape, dtype=torch.float16, device=ab.device)
    block_m = OPERAND_TILE // two_c
    blocks = cdiv(rows.shape[0], block_m)
    per_program = max(1, cdiv(blocks, OPERAND_PROGRAMS))
    ab_programs = max(1, cdiv(blocks, per_program))
    programs = ab_programs + cdiv(w.numel(), OPERAND_TILE)
    partial = torch.empty(programs, 4, dtype=torch.float32, device=ab.device)
    inverse = torch.empty(1, dtype=torch.float32, device=ab.device)
    shape = dict(C=two_c // 2, BLOCK_M=block_m, BLOCK_W=OPERAND_TILE)
    operand_maxima_kernel[(programs,)](rows, rows.shape[0], w, w.numel(), partial, ab_programs, per_program, **shape)
    float16_operands_kernel[(programs,)](rows, rows.shape[0], w, w.numel(), partial, programs, ab_h, ab_h.stride(0),
                                         w_h, w_h.stride(0), inverse, ab_programs, per_program, TERMS=terms,
                                         BLOCK_P=256, **shape)
    return ab_h, w_h, inverse


def _tuned():
    """The float32 route's fused contraction kernel under Triton's autotuner (`_runtime.autotuned`)."""
    return autotuned(opm_forward_kernel, lambda: configs.ALL_CONFIGS,
                     ["C", "R", "S_BUCKET", "N_BUCKET", "DIVIDE_BIAS", "HAS_COUNTS", "TERMS"], configs.prune)


def _tuned_project():
    """The product with out_proj's weight (`project_blocks`: the 16-bit route's, and the split composition's in
    every dtype) under Triton's autotuner."""
    return autotuned(kernels.opm_project_kernel, lambda: configs.PROJECT_CONFIGS,
                     ["C", "R", "N_BUCKET", "DIVIDE_BIAS", "HAS_COUNTS", "PRECISION"], configs.project_prune)


def _tuned_dw():
    """The backward's dW kernel under Triton's autotuner (its partial sums restored after each timing run, since it
    may add to them)."""
    return autotuned(backward_kernels.opm_dw_kernel, lambda: configs.DW_CONFIGS, ["C", "R", "N_BUCKET", "PRECISION"],
                     configs.dw_prune, restore_value=("ws_ptr",))


def _tuned_dx():
    """The backward's dX kernel under Triton's autotuner."""
    return autotuned(backward_kernels.opm_dx_kernel, lambda: configs.DX_CONFIGS, ["C", "R", "N_BUCKET", "PRECISION"],
                     configs.dx_prune)


def _outer_products_grad(gs: Tensor, weight: Tensor, c: int, precision: str) -> Tensor:
    """dX[b, (i p), (j q)] = sum_r gs[b, i, j, r] weight[r, p*c + q]: (B, n*c, N*c) in gs's dtype."""
    B, n, N, R = gs.shape
    dx = torch.empty(B, n * c, N * c, dtype=gs.dtype, device=gs.device)

    def grid(meta):
        return B * cdiv(n, meta["BLOCK_I"]) * cdiv(N, meta["BLOCK_J"]) * cdiv(c * c, meta["BLOCK_K"]),

    _tuned_dx()[grid](gs, *gs.stride(), weight, *weight.stride(), dx, *dx.stride(), n, N, R, bucket(N), C=c,
                      PRECISION=dot_precision(gs.dtype, precision))
    return dx


def _add_weight_grad(gs: Tensor, x: Tensor, partial: Tensor, accumulate: bool, precision: str) -> None:
    """partial[k] (+)= the k-th split of sum over the pairs of gs[b, i, j, :]^T x[b, (i p), (j q)] (float32;
    partial (splits, R, c*c)): the weight gradient's share of a block of rows i, gs (B, n, N, R)."""
    B, n, N, R = gs.shape
    c = x.shape[1] // n

    def grid(meta):
        return cdiv(R, meta["BLOCK_R"]) * (c * c // meta["BLOCK_K"]), partial.shape[0]

    _tuned_dw()[grid](gs, *gs.stride(), x, *x.stride(), partial, partial.stride(0), n, N, R, B * n * N, bucket(N),
                      C=c, ACCUMULATE=accumulate, PRECISION=dot_precision(x.dtype, precision))


GRAD_SCALE_PAIRS = 128  # pairs (b, i, j) a program of the Gs kernel


def core_backward(ab: Tensor, grad_out: Tensor, counts: Tensor | None, weight: Tensor, normalization: str,
                  count_eps: float, need_ab: int, need_weight: bool,
                  precision: str) -> tuple[Tensor, Tensor, Tensor]:
    """(d_ab (B, S, N, 2c) in ab's dtype, d_weight (R, c*c) float32, d_bias (R,) float32): the gradients of the
    masked projections ab = [a | b], of out_proj's weight and of its bias for the output's gradient grad_out
    (B, N, N, R, any strides), counts (B, N, N) float32 as the forward took them (None without a mask); d_ab and
    d_weight are empty where not needed (need_ab a 0/1 int: `_runtime.custom_op`). The backward's contraction is
    one op so that torch.compile traces around it.

    Gs, the gradient times the normalization's factor, comes from `opm_grad_scale_kernel` with the bias's
    gradient. Then for blocks of rows i, so that no block's N*N*c*c tensors pass BLOCK_BYTES (one block up
    to opm-af2-main's size in 16 bits): dX = Gs W from `opm_dx_kernel`, already in the layout [(i p), (j q)],
    gives da = b dX^T and db = a dX as batched cuBLAS products; the outer products X = a^T b recomputed by
    cuBLAS (scaled by 1 / S rounded up to a power of two before their rounding, as in the forward, and the sum
    unscaled at the end) give out_proj's weight gradient Gs^T X through `opm_dw_kernel`, in float32 partial sums."""
    B, S, N, c2 = ab.shape
    a, b_flat = _split_operands(ab)
    da, db, d_weight, d_bias = contraction_backward(a, b_flat, grad_out, counts, weight, normalization, count_eps,
                                                    need_ab, need_weight, precision)
    if not need_ab:
        return ab.new_empty(0), d_weight, d_bias
    return torch.cat([da, db.view(B, S, N, c2 // 2).to(ab.dtype)], dim=-1), d_weight, d_bias


def contraction_backward(a: Tensor, b_flat: Tensor, grad_out: Tensor, counts: Tensor | None, weight: Tensor,
                         normalization: str, count_eps: float, need_ab: bool, need_weight: bool,
                         precision: str) -> tuple[Tensor | None, Tensor | None, Tensor, Tensor]:
    """(da (B, S, N_i, c) or None, db (B, S, N*c) or None, d_weight, d_bias): `core_backward` for the projections a of
    the rows i and b_flat of every residue j (`project_blocks`' operands), grad_out (B, N_i, N, R) and counts (B, N_i,
    N); db in float32 where it sums blocks of rows (a partial sum over the rows where the MSA is split by
    residues)."""
    B, S, N_i, c = a.shape
    N = b_flat.shape[-1] // c
    R = weight.shape[0]
    device = a.device
    divide_bias = normalization == "count_ij_after"
    pairs = B * N_i * N
    gs = torch.empty(B, N_i, N, R, dtype=grad_out.dtype, device=device)
    programs = cdiv(pairs, GRAD_SCALE_PAIRS)
    sums = torch.empty(programs, R, dtype=torch.float32, device=device)  # (no programs: the sums are zeros)
    if programs and R:
        count_args = (grad_out, 0, 0, 0) if counts is None else (counts, *counts.stride())
        backward_kernels.opm_grad_scale_kernel[(programs,)](
            grad_out, *grad_out.stride(), *count_args, gs, sums, N, R, S, pairs, DIVIDE_BIAS=divide_bias,
            EPS=count_eps if divide_bias else 0.0, HAS_COUNTS=counts is not None, BLOCK_P=GRAD_SCALE_PAIRS,
            BLOCK_R=min(64, max(16, triton.next_power_of_2(R))))
    d_bias = sums.sum(0)
    if not need_ab and not need_weight or pairs == 0:
        d_weight = torch.zeros(R, c * c if need_weight else 0, dtype=torch.float32, device=device)
        if need_ab:
            return a.new_zeros(a.shape), b_flat.new_zeros(b_flat.shape), d_weight, d_bias
        return None, None, d_weight, d_bias
    rows = _block_rows(B, N, c, a.element_size())
    x_scale = _outer_products_scale(S)
    if need_weight:
        splits = max(1, min(cdiv(B * rows * N, 256), cdiv(2 * multiprocessors(device), cdiv(R, 128) * cdiv(c * c, 128))))
        partial = torch.empty(splits, R, c * c, dtype=torch.float32, device=device)
    da_blocks, db = [], None
    for i0 in range(0, N_i, rows):
        n = min(rows, N_i - i0)
        g = gs[:, i0:i0 + n]  # (B, n, N, R)
        a_rows = a[:, :, i0:i0 + n].reshape(B, S, n * c)  # [s, (i p)]
        if need_ab:
            dx = _outer_products_grad(g, weight, c, precision)  # [(i p), (j q)]
            da_blocks.append(matmul(b_flat, dx.mT, precision).view(B, S, n, c))
            db_block = matmul(a_rows, dx, precision)  # one block: db itself; else summed over the blocks in float32
            db = db_block if rows >= N_i else db_block.float() if db is None else db.add_(db_block)
            del dx
        if need_weight:  # (X scaled, as the forward's: undone once the sums are made)
            _add_weight_grad(g, _outer_products(a_rows, b_flat, x_scale, precision), partial, i0 > 0, precision)
    d_weight = partial.sum(0) / x_scale if need_weight else d_bias.new_empty(R, 0)
    if not need_ab:
        return None, None, d_weight, d_bias
    return (da_blocks[0] if rows >= N_i else torch.cat(da_blocks, dim=2)), db, d_weight, d_bias


def _core_backward_fake(ab, grad_out, counts, weight, normalization, count_eps, need_ab, need_weight, precision):
    B, S, N, c2 = ab.shape
    R = weight.shape[0]
    return (ab.new_empty((B, S, N, c2) if need_ab else (0,)),
            ab.new_empty((R, (c2 // 2) ** 2 if need_weight else 0), dtype=torch.float32),
            ab.new_empty((R,), dtype=torch.float32))


core_backward_op = custom_op("outer_product_mean_core_backward", core_backward, _core_backward_fake)


def _fake(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, proj_a_weight, proj_a_bias, proj_b_weight, proj_b_bias,
          out_proj_weight, out_proj_bias, counts, normalization, count_eps, precision, train):
    B, S, N, _ = msa_repr.shape
    c = proj_a_weight.shape[0]
    ab = msa_repr.new_empty(B, S, N, 2 * c) if train or B * N * N * out_proj_weight.shape[0] == 0 else \
        msa_repr.new_empty(0)
    return msa_repr.new_empty(B, N, N, out_proj_weight.shape[0]), ab


def _setup_context(ctx, inputs, output):
    msa_repr, msa_mask, *params, normalization, count_eps, precision, _ = inputs  # (params: counts last)
    keep_for_backward(ctx, [msa_repr, msa_mask, *params], [output[1]], normalization=normalization,
                      count_eps=count_eps, precision=precision)


def _backward(ctx, needs, grad_out, _grad_ab):
    """The gradients of the inputs `needs` names, from the forward's masked projections ab (B, S, N, 2c) and
    grad_out (B, N, N, R)."""
    msa_repr, mask, lnw, lnb, wa, ba, wb, bb, wo, bo, counts, ab = ctx.saved_tensors
    c = wa.shape[0]
    dtype = msa_repr.dtype
    projections = ("proj_a_weight", "proj_a_bias", "proj_b_weight", "proj_b_bias")
    need_ab = any(needs[name] for name in ("msa_repr", "layer_norm_weight", "layer_norm_bias", *projections))
    if not (need_ab or needs["out_proj_weight"] or needs["out_proj_bias"]):
        return {}
    backward = core_backward_op if traced(grad_out) else core_backward
    counts = counts_of(mask, ctx.normalization) if counts is None else counts
    d_ab, d_wo, d_bo = backward(ab, grad_out, counts, wo, ctx.normalization, ctx.count_eps, need_ab,
                                needs["out_proj_weight"], ctx.precision)
    grads = dict(out_proj_weight=d_wo.to(dtype) if needs["out_proj_weight"] else None,
                 out_proj_bias=d_bo.to(dtype) if needs["out_proj_bias"] else None)
    if not need_ab:
        return grads
    dx, dlnw, dlnb, dw, dbias = layer_norm_linear_backward(
        msa_repr, lnw, lnb, torch.cat([wa, wb]), d_ab,
        (needs["msa_repr"], needs["layer_norm_weight"], needs["layer_norm_bias"],
         needs["proj_a_weight"] or needs["proj_b_weight"], needs["proj_a_bias"] or needs["proj_b_bias"]),
        ctx.precision, mask)
    split = (*((None, None) if dw is None else dw.split(c)), *((None, None) if dbias is None else dbias.split(c)))
    return grads | dict(msa_repr=dx, layer_norm_weight=dlnw, layer_norm_bias=dlnb) | {
        name: grad for name, grad in zip(("proj_a_weight", "proj_b_weight", "proj_a_bias", "proj_b_bias"), split)
        if needs[name]}


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
outer_product_mean_op, outer_product_mean = operation("outer_product_mean", outer_product_mean_forward, _fake,
                                                      _setup_context, _backward)

"""The triangle multiplicative update as a torch.library custom op, `evofuse::triangle_multiplication`, with its fake
and its backward (`register_autograd`).

Forward: one pass of the pair z (B, N, N, c_z) (`layer_norm_glu`: LayerNorm, p_in and g_in on chip) writes a and b =
p * sigmoid(g) * mask channel major (2c planes of (B, N, N): the layout cuBLAS's batched product wants); t = a b^T
(outgoing) or a^T b (incoming) by cuBLAS, one product a (channel, batch element), accumulated in float32; then one pass
for the output (`kernels.output_kernel`): LN_out and p_out of t, LN_in and g_out of z, the gate. A training call keeps t
alone. Backward (`core_backward`): the output gate's gradients from y and g_out made again on chip (`output_kernel`
with GRAD), the output projection's (`layer_norm_linear_backward` on t); a and b made again from z
(`layer_norm_glu`), da and db by cuBLAS into one (2c, B, N, N) tensor; then, in row chunks where the pair is large
(`input_chunks`), the gates' and projections' gradients from a pass of z that makes p and g again on chip
(`layer_norm_glu` with grad) and one `layer_norm_linear_backward` of every input projection and LN_in. Each tensor is
dropped once used: the peak is the product's stage (a, b, da, db, dt and g_out's gradient beside t).
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
    operation,
    rows_that_fit,
    traced,
)
from ...reference import LAYER_NORM_EPS
from ...stages import layer_norm_glu
from ...stages.layer_norm_backward import layer_norm_linear_backward
from ...stages.layer_norm_linear import joined_bias
from ...stages.matmul import matmul_into, uses_tensor_cores
from . import configs
from .kernels import output_kernel

# what the output kernel's autotuned choice is kept by
OUTPUT_KEY = ["M_BUCKET", "CZ_BUCKET", "C", "HAS_P_BIAS", "HAS_G_BIAS", "GRAD", "PRECISION"]
# The input projections' backward runs in row chunks where its working set (their gradient, 4c + c_z channels, and
# the LayerNorm's input gradient and rows, 2 c_z) would pass this many bytes: chunks no larger than a and b, freed by then
CHUNK_BYTES = 512 << 20


def joined_inputs(weights: list[Tensor], biases: list[Tensor | None]) -> tuple[Tensor, Tensor | None]:
    """p_in's (2c, c_z), g_in's (2c, c_z) and g_out's (c_z, c_z) weights stacked as the op takes them (one LayerNorm,
    one pass over the pair), and their biases (or None where all are None). Called outside the op, so that autograd
    hands each weight its share of the stacked gradient."""
    return torch.cat(weights), joined_bias(biases, weights)


def gated(pair_repr: Tensor, mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor, in_weight: Tensor,
          in_bias: Tensor | None, c: int, precision: str) -> Tensor:
    """ab (2c, B, N, N) in the pair's dtype: a and b = p * sigmoid(g) * mask channel major (the layout of cuBLAS's
    batched product), from one pass of the pair (`layer_norm_glu`: LN_in, p_in and g_in on chip); (2c, B, R, K) for
    a device's R rows or K columns of a split pair."""
    cz = pair_repr.shape[-1]
    M = pair_repr.shape[:-1].numel()
    ab = pair_repr.new_empty(2 * c, *pair_repr.shape[:-1])
    layer_norm_glu.layer_norm_glu(pair_repr.reshape(M, cz), norm_in_weight, norm_in_bias, in_weight[:4 * c],
                                  None if in_bias is None else in_bias[:4 * c],
                                  None if mask is None else mask.reshape(M), ab.view(2 * c, M).t(), "sigmoid",
                                  precision)
    return ab


def _gate_out(in_weight: Tensor, in_bias: Tensor | None, c: int) -> tuple[Tensor, Tensor | None]:
    """g_out's weight and bias: the rows of the stacked projection after p_in's and g_in's 4c."""
    return in_weight[4 * c:], None if in_bias is None else in_bias[4 * c:]


def gated_output(t: Tensor, pair_repr: Tensor, norm_in_weight: Tensor, norm_in_bias: Tensor, g_out_weight: Tensor,
                 g_out_bias: Tensor | None, norm_out_weight: Tensor, norm_out_bias: Tensor, p_out_weight: Tensor,
                 p_out_bias: Tensor | None, precision: str, out: Tensor, grad: Tensor | None = None,
                 d_gate_out: Tensor | None = None) -> None:
    """The output side in one pass (`kernels.output_kernel`) from t (c, B, N, N) and the pair (B, N, N, c_z), or from
    rows of them, t (c, M) with contiguous rows and the pair (M, c_z): out (B, N, N, c_z) = p_out(LN_out(t)) *
    sigmoid(g_out(LN_in(z))), g_out_weight (c_z, c_z) and g_out_bias (c_z,) or None; or, given the output's gradient
    `grad` (B, N, N, c_z), any strides, y's gradient into `out` and g_out's pre-activation's into `d_gate_out` (c_z,
    M), its rows contiguous."""
    cz = pair_repr.shape[-1]
    c = t.shape[0]
    M = pair_repr.shape[:-1].numel()  # (B N N, or a chunk's rows)
    if not M:
        return
    z = pair_repr.reshape(M, cz)
    grad_rows = (out if grad is None else grad).reshape(M, cz)  # (a view where it can be: a broadcast gradient stays one)

    def grid(meta):
        return cdiv(M, meta["BLOCK_M"]), cdiv(cz, meta["BLOCK_N"] * meta.get("ROW_STEPS", 1))

    autotuned(output_kernel, layer_norm_glu.row_tables, OUTPUT_KEY, configs.prune_output)[grid](
        t, 1, t.stride(0), norm_out_weight, norm_out_bias, p_out_weight, *p_out_weight.stride(),
        p_out_weight if p_out_bias is None else p_out_bias, z, *z.stride(), norm_in_weight, norm_in_bias,
        g_out_weight, *g_out_weight.stride(), g_out_weight if g_out_bias is None else g_out_bias, grad_rows,
        *grad_rows.stride(), out, *((out, 0) if d_gate_out is None else (d_gate_out, d_gate_out.stride(0))), M, c, cz,
        LAYER_NORM_EPS, bucket(M), bucket(cz), HAS_P_BIAS=p_out_bias is not None, HAS_G_BIAS=g_out_bias is not None,
        GRAD=grad is not None, PRECISION=dot_precision(pair_repr.dtype, precision))


def triangle_multiplication_forward(pair_repr: Tensor, pair_mask: Tensor | None, norm_in_weight: Tensor,
                                    norm_in_bias: Tensor, in_weight: Tensor, in_bias: Tensor | None,
                                    norm_out_weight: Tensor, norm_out_bias: Tensor, p_out_weight: Tensor,
                                    p_out_bias: Tensor | None, outgoing: bool, precision: str, chunk_rows: int,
                                    train: bool) -> tuple[Tensor, Tensor]:
    """(out (B, N, N, c_z), t (c, B, N, N)): the output, and the product that the backward takes (empty unless
    `train`). pair_repr (B, N, N, c_z) any strides; pair_mask (B, N, N) 0/1 of any real dtype or None; in_weight (4c +
    c_z, c_z): p_a, p_b, g_a, g_b and g_out stacked, in_bias (4c + c_z,) or None; LN_out's (c,); p_out_weight (c_z, c),
    p_out_bias (c_z,) or None. chunk_rows: output rows i an inference call takes at a time (0: `inference_chunk_rows`
    decides; a training call takes all)."""
    B, N, _, cz = pair_repr.shape
    c = norm_out_weight.shape[0]
    rows = 0 if train else chunk_rows or inference_chunk_rows(pair_repr, c)
    if 0 < rows < N:
        return _chunked(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, norm_out_weight,
                        norm_out_bias, p_out_weight, p_out_bias, outgoing, precision, rows), pair_repr.new_empty(0)
    ab = gated(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, c, precision)
    t = bmm(ab[:c], ab[c:], None if outgoing else True, precision)  # outgoing a b^T (sum_k a[i, k] b[j, k]), else a^T b
    del ab
    out = pair_repr.new_empty(B, N, N, cz)
    gated_output(t, pair_repr, norm_in_weight, norm_in_bias, *_gate_out(in_weight, in_bias, c), norm_out_weight,
                 norm_out_bias, p_out_weight, p_out_bias, precision, out)
    return out, (t if train else t.new_empty(0))


def inference_chunk_rows(pair_repr: Tensor, c: int) -> int:
    """Output rows i an inference call takes at a time (`_runtime.rows_that_fit`): a row's a (or its column, incoming)
    and t, c channels each, beside b for every row (c planes)."""
    B, N, _, _ = pair_repr.shape
    row_bytes = 2 * c * B * N * pair_repr.element_size()
    return rows_that_fit(N, row_bytes, pair_repr.device, fixed_bytes=N * row_bytes // 2)


def _chunked(pair_repr: Tensor, mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor, in_weight: Tensor,
             in_bias: Tensor | None, norm_out_weight: Tensor, norm_out_bias: Tensor, p_out_weight: Tensor,
             p_out_bias: Tensor | None, outgoing: bool, precision: str, rows: int) -> Tensor:
    """The inference forward `rows` output rows i at a time, a batch element at a time: b for every pair (c planes),
    then per chunk a for its rows (outgoing: a[i, k]; incoming: a[k, i], from a contiguous copy of the pair's
    columns i), t's rows by one batched product, and the output rows. a and t are never whole."""
    B, N, _, cz = pair_repr.shape
    c = norm_out_weight.shape[0]
    out = pair_repr.new_empty(B, N, N, cz)
    for b in range(B):
        z = pair_repr[b]
        m = None if mask is None else mask[b]
        b_planes = _gated_half(z, m, norm_in_weight, norm_in_bias, in_weight, in_bias, c, 1, precision)  # (c, N, N)
        for i0 in range(0, N, rows):
            i1 = min(N, i0 + rows)
            if outgoing:  # t[i, j] = sum_k a[i, k] b[j, k]
                a = _gated_half(z[i0:i1], None if m is None else m[i0:i1], norm_in_weight, norm_in_bias, in_weight,
                                in_bias, c, 0, precision)  # (c, R, N)
                t = _planes_product(a, b_planes.transpose(1, 2), precision)
            else:  # t[i, j] = sum_k a[k, i] b[k, j]
                a = _gated_half(z[:, i0:i1].contiguous(), None if m is None else m[:, i0:i1].contiguous(),
                                norm_in_weight, norm_in_bias, in_weight, in_bias, c, 0, precision)  # (c, N, R)
                t = _planes_product(a.transpose(1, 2), b_planes, precision)
            del a
            gated_output(t[:, None], pair_repr[b:b + 1, i0:i1], norm_in_weight, norm_in_bias,
                         *_gate_out(in_weight, in_bias, c), norm_out_weight, norm_out_bias, p_out_weight, p_out_bias,
                         precision, out[b:b + 1, i0:i1])
    return out


def _gated_half(z: Tensor, mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor, in_weight: Tensor,
                in_bias: Tensor | None, c: int, half: int, precision: str) -> Tensor:
    """a (half 0) or b (half 1) = p * sigmoid(g) * mask of the pairs z (..., c_z), channel major (c, ...): `gated`'s
    pass with that half's p and g rows alone."""
    def rows_of(t):
        return torch.cat([t[half * c:(half + 1) * c], t[(2 + half) * c:(3 + half) * c]])

    M = z.shape[:-1].numel()
    planes = z.new_empty(c, *z.shape[:-1])
    layer_norm_glu.layer_norm_glu(z.reshape(M, z.shape[-1]), norm_in_weight, norm_in_bias, rows_of(in_weight),
                                  None if in_bias is None else rows_of(in_bias),
                                  None if mask is None else mask.reshape(M), planes.view(c, M).t(), "sigmoid",
                                  precision)
    return planes


def _planes_product(u: Tensor, v: Tensor, precision: str) -> Tensor:
    """u v per channel plane for u (c, R, K) and v (c, K, N), any strides: (c, R, N) contiguous, float32 by
    `matmul`'s three TF32 products, else cuBLAS (float32 accumulation)."""
    if uses_tensor_cores(u.dtype, precision):
        return matmul_into(u, v, u.new_empty(u.shape[0], u.shape[1], v.shape[2]))
    return torch.bmm(u, v)


def _fake(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, norm_out_weight, norm_out_bias,
          p_out_weight, p_out_bias, outgoing, precision, chunk_rows, train):
    B, N, _, cz = pair_repr.shape
    c = norm_out_weight.shape[0]
    return pair_repr.new_empty(B, N, N, cz), pair_repr.new_empty((c, B, N, N) if train else (0,))


def _setup_context(ctx, inputs, output):
    pair_repr, pair_mask, *params, outgoing, precision, _, _ = inputs
    keep_for_backward(ctx, [pair_repr, pair_mask, *params], [output[1]], outgoing=outgoing, precision=precision)


def input_chunks(M: int, c: int, cz: int, element_size: int) -> int:
    """Rows a chunk of the input projections' backward: all M unless its working set (their gradient, 4c + c_z
    channels, and the LayerNorm's input gradient and normalized rows, 2 c_z) passes CHUNK_BYTES; then chunks whose
    working set is no larger than a and b's 2c channels, which are freed before it."""
    width = 4 * c + 3 * cz
    if M * width * element_size <= CHUNK_BYTES:
        return max(M, 1)
    return cdiv(M, cdiv(width, 2 * c))


def core_backward(grad_out: Tensor, pair_repr: Tensor, pair_mask: Tensor | None, norm_in_weight: Tensor,
                  norm_in_bias: Tensor, in_weight: Tensor, in_bias: Tensor | None, norm_out_weight: Tensor,
                  norm_out_bias: Tensor, p_out_weight: Tensor, p_out_bias: Tensor | None, t: Tensor, outgoing: int,
                  precision: str, needs: list[bool]) -> list[Tensor]:
    """The gradients of (pair_repr, norm_in_weight, norm_in_bias, in_weight, in_bias, norm_out_weight, norm_out_bias,
    p_out_weight, p_out_bias), each in its tensor's dtype and empty where `needs` (one flag each) is false, from the
    output's gradient grad_out (B, N, N, c_z), any strides, the forward's inputs and its product t (c, B, N, N);
    outgoing a 0/1 int (`_runtime.custom_op`)."""
    B, N, _, cz = pair_repr.shape
    c = t.shape[0]
    M = B * N * N
    step = input_chunks(M, c, cz, pair_repr.element_size())
    # The projections' gradient a chunk of rows takes as one (4c + c_z, rows) matrix, with no copy: each chunk's g_out
    # gradient, c_z rows of d_proj, is written by the output pass; the chunk's p and g gradients, the 4c rows before
    # it, by its input pass, over the g_out gradients of chunks already taken
    d_proj = pair_repr.new_empty(4 * c + max(1, cdiv(M, step)) * cz, step)
    z_rows, t_rows = pair_repr.reshape(M, cz), t.view(c, M)
    grad_rows = grad_out.reshape(M, cz)  # (a view where it can be: a broadcast gradient stays one)
    dy = pair_repr.new_empty(B, N, N, cz)
    for k, start in enumerate(range(0, M, step)):  # (y's gradient, and g_out's into its chunk's rows of d_proj)
        stop = min(M, start + step)
        gated_output(t_rows[:, start:stop], z_rows[start:stop], norm_in_weight, norm_in_bias,
                     *_gate_out(in_weight, in_bias, c), norm_out_weight, norm_out_bias, p_out_weight, p_out_bias,
                     precision, dy.view(M, cz)[start:stop], grad_rows[start:stop],
                     d_proj[4 * c + k * cz:4 * c + (k + 1) * cz, :stop - start])
    dt = pair_repr.new_empty(c, B, N, N)  # (channel major, written so: the products below take its planes as they are)
    _, *out_grads = layer_norm_linear_backward(t.permute(1, 2, 3, 0), norm_out_weight, norm_out_bias, p_out_weight, dy,
                                               (True, *needs[5:9]), precision, dx_out=dt.view(c, M).t())
    del dy
    ab = gated(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, c, precision)
    dab = torch.empty_like(ab)  # (da and db written by cuBLAS into its halves)
    if outgoing:  # t = a b^T: da = dt b, db = dt^T a
        bmm(dt, ab[c:], False, precision, out=dab[:c]), bmm(dt, ab[:c], True, precision, out=dab[c:])
    else:  # t = a^T b: da = b dt^T, db = a dt
        bmm(ab[c:], dt, None, precision, out=dab[:c]), bmm(ab[:c], dt, False, precision, out=dab[c:])
    del ab, dt
    in_grads = _input_backward(z_rows, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias,
                               dab.view(2 * c, M), d_proj, step, needs[:5], precision)
    if needs[0]:
        in_grads[0] = in_grads[0].view(pair_repr.shape)
    return [g if need and g is not None else pair_repr.new_empty(0) for g, need in zip((*in_grads, *out_grads), needs)]


def _input_backward(rows: Tensor, mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor,
                    in_weight: Tensor, in_bias: Tensor | None, dab: Tensor, d_proj: Tensor, step: int,
                    needs: list[bool], precision: str) -> list[Tensor | None]:
    """(dx (M, c_z) or empty, then LN_in's and the stacked projection's gradients or None) from the pair's rows (M,
    c_z), a's and b's gradients dab (2c, M), channel major, and d_proj (4c + chunks c_z, step) holding each chunk's
    g_out gradient (`core_backward`): per chunk of `step` rows a pass of the rows that makes p and g again on chip
    and writes their gradients into the 4c rows of d_proj before the chunk's g_out gradient (`layer_norm_glu` with
    grad; p and g, 4c planes, are never in memory), then `layer_norm_linear_backward` of that (4c + c_z, rows)
    gradient, writing dx in place; the parameters' chunk sums added in float32."""
    M, cz = rows.shape
    c = dab.shape[0] // 2
    mask_rows = None if mask is None else mask.reshape(M)
    dx = rows.new_empty(M, cz) if needs[0] else rows.new_empty(0)
    sums: list[Tensor | None] = [None] * 4
    for k, start in enumerate(range(0, max(M, 1), step)):  # (one empty chunk where M = 0: zero gradients)
        stop = min(M, start + step)
        chunk = d_proj[k * cz:k * cz + 4 * c + cz, :stop - start]  # (4c + c_z, rows): p's and g's gradients, g_out's
        layer_norm_glu.layer_norm_glu(rows[start:stop], norm_in_weight, norm_in_bias, in_weight[:4 * c],
                                      None if in_bias is None else in_bias[:4 * c],
                                      None if mask_rows is None else mask_rows[start:stop], dab[:, start:stop].t(),
                                      "sigmoid", precision, chunk[:4 * c].t(), grad=True)
        _, *parts = layer_norm_linear_backward(rows[start:stop], norm_in_weight, norm_in_bias, in_weight, chunk.t(),
                                               needs, precision, dx_out=dx[start:stop] if needs[0] else None)
        if step >= M:
            return [dx, *parts]
        sums = [None if part is None else part.float() if total is None else total.add_(part)
                for total, part in zip(sums, parts)]
    grads = (norm_in_weight, norm_in_bias, in_weight, in_weight if in_bias is None else in_bias)
    return [dx, *(None if total is None else total.to(like.dtype) for total, like in zip(sums, grads))]


def _backward_fake(grad_out, pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, norm_out_weight,
                   norm_out_bias, p_out_weight, p_out_bias, t, outgoing, precision, needs):
    grads = (pair_repr, norm_in_weight, norm_in_bias, in_weight, in_bias, norm_out_weight, norm_out_bias, p_out_weight,
             p_out_bias)
    return tuple(torch.empty_like(like) if need else pair_repr.new_empty(0) for like, need in zip(grads, needs))


# the op's nine gradients as a fixed tuple (not Tensor[]): a sharding rule gives each its own placement
GRADS = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


def _backward_dispatched(grad_out: Tensor, pair_repr: Tensor, pair_mask: Tensor | None, norm_in_weight: Tensor,
                         norm_in_bias: Tensor, in_weight: Tensor, in_bias: Tensor | None, norm_out_weight: Tensor,
                         norm_out_bias: Tensor, p_out_weight: Tensor, p_out_bias: Tensor | None, t: Tensor,
                         outgoing: int, precision: str, needs: list[bool]) -> GRADS:
    """`core_backward` as its op returns it: the parameters' gradients copied (a LayerNorm's two are views of one
    tensor, and a custom op's outputs must not alias)."""
    dx, *grads = core_backward(grad_out, pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias,
                               norm_out_weight, norm_out_bias, p_out_weight, p_out_bias, t, outgoing, precision, needs)
    return (dx, *(g.clone() for g in grads))


core_backward_op = custom_op("triangle_multiplication_core_backward", _backward_dispatched, _backward_fake)


def _backward(ctx, needs, grad_out, *_):
    pair_repr, mask, *params, t = ctx.saved_tensors
    names = ("pair_repr", "norm_in_weight", "norm_in_bias", "in_weight", "in_bias", "norm_out_weight", "norm_out_bias",
             "p_out_weight", "p_out_bias")
    backward = core_backward_op if traced(grad_out) else core_backward
    grads = backward(grad_out, pair_repr, mask, *params, t, ctx.outgoing, ctx.precision, [needs[n] for n in names])
    return {name: grad for name, grad in zip(names, grads) if needs[name]}


def bmm(u: Tensor, v: Tensor, transpose: bool | None, precision: str, out: Tensor | None = None) -> Tensor:
    """Per (channel, batch element) planes: u v (transpose False), u^T v (True) or u v^T (None) for u and v (c, B, R,
    K) (a device's rows or columns where the pair is split); into `out` (c, B, R', K') contiguous where given. float32
    by `matmul`'s three TF32 products, else cuBLAS."""
    c, B = u.shape[:2]
    u, v = u.reshape(c * B, *u.shape[2:]), v.reshape(c * B, *v.shape[2:])
    if transpose:
        u = u.transpose(1, 2)
    elif transpose is None:
        v = v.transpose(1, 2)
    R, K = u.shape[1], v.shape[2]
    if uses_tensor_cores(u.dtype, precision):
        t = u.new_empty(c, B, R, K) if out is None else out
        matmul_into(u, v, t.view(c * B, R, K))
        return t
    if out is None:
        return torch.bmm(u, v).view(c, B, R, K)
    torch.bmm(u, v, out=out.view(c * B, R, K))
    return out


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
triangle_multiplication_op, triangle_multiplication = operation("triangle_multiplication",
                                                                triangle_multiplication_forward, _fake,
                                                                _setup_context, _backward)

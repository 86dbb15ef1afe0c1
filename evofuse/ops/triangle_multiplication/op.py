"""The triangle multiplicative update as a torch.library custom op, `evofuse::triangle_multiplication`, with its fake
and its backward (`register_autograd`).

Forward: one pass of the pair z (B, N, N, c_z) (`layer_norm_glu`: LayerNorm, p_in and g_in on chip) writes a and b =
p * sigmoid(g) * mask channel major (2c planes of (B, N, N): the layout cuBLAS's batched product wants); t = a b^T
(outgoing) or a^T b (incoming) by cuBLAS, one product a (channel, batch element), accumulated in float32; then one pass
for the output (`kernels.output_kernel`): LN_out and p_out of t, LN_in and g_out of z, the gate. A training call also
writes y = p_out(LN_out(t)) and g_out's planes for the backward. Backward: the output gate's backward, then the output
projection's gradients (`layer_norm_linear_backward` on t); a and b made again from z (`layer_norm_glu`), da and db by
cuBLAS into one (2c, B, N, N) tensor, the gates' and projections' gradients channel major from a second pass of z that
makes p and g again on chip (`layer_norm_glu` with grad), then one `layer_norm_linear_backward` of the pair for every
input projection and LN_in.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import autotuned, bucket, cdiv, custom_op, dot_precision, keep_for_backward, next_pow2, operation, traced
from ...reference import LAYER_NORM_EPS
from .. import layer_norm_glu
from ..layer_norm_linear import joined_bias, layer_norm_linear_backward
from ..matmul import matmul_into, uses_tensor_cores
from . import configs
from .kernels import out_gate_backward_kernel, output_kernel

# what the output kernel's autotuned choice is kept by
OUTPUT_KEY = ["M_BUCKET", "CZ_BUCKET", "C", "HAS_P_BIAS", "HAS_G_BIAS", "STORE", "PRECISION"]
OUT_GATE_TILE = 4096  # elements a program of the output gate's backward (pairs x every channel)


def joined_inputs(weights: list[Tensor], biases: list[Tensor | None]) -> tuple[Tensor, Tensor | None]:
    """p_in's (2c, c_z), g_in's (2c, c_z) and g_out's (c_z, c_z) weights stacked as the op takes them (one LayerNorm,
    one pass over the pair), and their biases (or None where all are None). Called outside the op, so that autograd
    hands each weight its share of the stacked gradient."""
    return torch.cat(weights), joined_bias(biases, weights)


def _out_gate_tiles(cz: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_C) of the output gate's backward: every channel, about OUT_GATE_TILE elements."""
    block_c = next_pow2(cz)
    return max(1, OUT_GATE_TILE // block_c), block_c


def _gated(pair_repr: Tensor, mask: Tensor | None, norm_in_weight: Tensor, norm_in_bias: Tensor, in_weight: Tensor,
           in_bias: Tensor | None, c: int, precision: str) -> Tensor:
    """ab (2c, B, N, N) in the pair's dtype: a and b = p * sigmoid(g) * mask channel major (the layout of cuBLAS's
    batched product), from one pass of the pair (`layer_norm_glu`: LN_in, p_in and g_in on chip)."""
    B, N, _, cz = pair_repr.shape
    M = B * N * N
    ab = pair_repr.new_empty(2 * c, B, N, N)
    layer_norm_glu.layer_norm_glu(pair_repr.reshape(M, cz), norm_in_weight, norm_in_bias, in_weight[:4 * c],
                                  None if in_bias is None else in_bias[:4 * c],
                                  None if mask is None else mask.reshape(M), ab.view(2 * c, M).t(), "sigmoid",
                                  precision)
    return ab


def triangle_multiplication_forward(pair_repr: Tensor, pair_mask: Tensor | None, norm_in_weight: Tensor,
                                    norm_in_bias: Tensor, in_weight: Tensor, in_bias: Tensor | None,
                                    norm_out_weight: Tensor, norm_out_bias: Tensor, p_out_weight: Tensor,
                                    p_out_bias: Tensor | None, outgoing: bool, precision: str,
                                    train: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out (B, N, N, c_z), gate_out (c_z, B, N, N), t (c, B, N, N), y (B, N, N, c_z)): the output, then what the
    backward takes (each empty unless `train`): g_out's pre-activation channel major, the product and the output
    projection before its gate (the backward makes p and g again from the pair). pair_repr (B, N, N, c_z) any
    strides; pair_mask (B, N, N) 0/1 of any real dtype or None; in_weight (4c + c_z, c_z): p_a, p_b, g_a, g_b and
    g_out stacked, in_bias (4c + c_z,) or None; LN_out's (c,); p_out_weight (c_z, c), p_out_bias (c_z,) or None."""
    B, N, _, cz = pair_repr.shape
    c = norm_out_weight.shape[0]
    M = B * N * N
    ab = _gated(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, c, precision)
    t = _bmm(ab[:c], ab[c:], None if outgoing else True, precision)  # outgoing a b^T (sum_k a[i, k] b[j, k]), else a^T b
    del ab
    out = pair_repr.new_empty(B, N, N, cz)
    gate_out = pair_repr.new_empty(cz, B, N, N) if train else out.new_empty(0)  # g_out's planes, for the backward
    y = torch.empty_like(out) if train else out.new_empty(0)  # the output projection before its gate
    if M:
        z = pair_repr.reshape(M, cz)

        def grid(meta):
            return cdiv(M, meta["BLOCK_M"]), cdiv(cz, meta["BLOCK_N"])

        autotuned(output_kernel, layer_norm_glu.tables, OUTPUT_KEY, configs.prune_output)[grid](
            t, 1, t.stride(0), norm_out_weight, norm_out_bias, p_out_weight, *p_out_weight.stride(),
            p_out_weight if p_out_bias is None else p_out_bias, z, *z.stride(), norm_in_weight, norm_in_bias,
            in_weight[4 * c:], *in_weight.stride(), in_weight if in_bias is None else in_bias[4 * c:], out,
            y if train else out, gate_out if train else out, M, c, cz, LAYER_NORM_EPS, bucket(M), bucket(cz),
            HAS_P_BIAS=p_out_bias is not None, HAS_G_BIAS=in_bias is not None, STORE=train,
            PRECISION=dot_precision(pair_repr.dtype, precision))
    if not train:
        return out, gate_out, t.new_empty(0), y
    return out, gate_out, t, y


def _fake(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, norm_out_weight, norm_out_bias,
          p_out_weight, p_out_bias, outgoing, precision, train):
    B, N, _, cz = pair_repr.shape
    c = norm_out_weight.shape[0]
    out = pair_repr.new_empty(B, N, N, cz)
    if not train:
        return out, pair_repr.new_empty(0), pair_repr.new_empty(0), pair_repr.new_empty(0)
    return (out, pair_repr.new_empty(cz, B, N, N), pair_repr.new_empty(c, B, N, N),
            pair_repr.new_empty(B, N, N, cz))


def _setup_context(ctx, inputs, output):
    pair_repr, pair_mask, *params, outgoing, precision, _ = inputs
    keep_for_backward(ctx, [pair_repr, pair_mask, *params], list(output[1:]), outgoing=outgoing, precision=precision)


def out_gate_backward(grad_out: Tensor, y: Tensor, gate_out: Tensor) -> tuple[Tensor, Tensor]:
    """(dy (B, N, N, c_z), d_gate_out (c_z, B, N, N)): the output gate's backward in one pass
    (`kernels.out_gate_backward_kernel`): y's gradient grad_out * sigmoid(g_out), and g_out's pre-activation's,
    channel major as g_out's planes gate_out (c_z, B, N, N)."""
    cz = y.shape[-1]
    M = y[..., 0].numel()
    dy = torch.empty_like(y)
    d_gate_out = torch.empty_like(gate_out)
    if M:
        grad_rows = grad_out.reshape(M, cz)  # (a view where it can be: a broadcast gradient stays one)
        block_m, block_c = _out_gate_tiles(cz)
        out_gate_backward_kernel[(cdiv(M, block_m),)](
            grad_rows, *grad_rows.stride(), y, gate_out, gate_out.stride(0), dy, d_gate_out, d_gate_out.stride(0), M,
            cz, BLOCK_M=block_m, BLOCK_C=block_c)
    return dy, d_gate_out


def _out_gate_backward_fake(grad_out, y, gate_out):
    return torch.empty_like(y), torch.empty_like(gate_out)


out_gate_backward_op = custom_op("triangle_multiplication_out_gate_backward", out_gate_backward,
                                 _out_gate_backward_fake)


def core_backward(pair_repr: Tensor, norm_in_weight: Tensor, norm_in_bias: Tensor, in_weight: Tensor,
                  in_bias: Tensor | None, mask: Tensor | None, dt: Tensor, d_gate_out: Tensor, outgoing: bool,
                  precision: str) -> Tensor:
    """d_proj (4c + c_z, B, N, N): the input projections' gradient, channel major, from the pair, LN_in's parameters
    and the stacked projections (as the forward took them), the product's gradient dt (c, B, N, N) and g_out's (c_z, B,
    N, N): a and b again from one pass of the pair (`layer_norm_glu`), da and db by cuBLAS into one (2c, B, N, N)
    tensor, then p's and g's gradients from a second pass that makes p and g again on chip (`layer_norm_glu` with
    grad): p and g (4c planes) are never in memory."""
    c = dt.shape[0]
    B, N, _, cz = pair_repr.shape
    M = B * N * N
    ab = _gated(pair_repr, mask, norm_in_weight, norm_in_bias, in_weight, in_bias, c, precision)
    a, b = ab[:c], ab[c:]
    dab = torch.empty_like(ab)  # (da and db written by cuBLAS into its halves)
    if outgoing:  # t = a b^T: da = dt b, db = dt^T a
        _bmm(dt, b, False, precision, out=dab[:c]), _bmm(dt, a, True, precision, out=dab[c:])
    else:  # t = a^T b: da = b dt^T, db = a dt
        _bmm(b, dt, None, precision, out=dab[:c]), _bmm(a, dt, False, precision, out=dab[c:])
    del ab, a, b
    d_proj = pair_repr.new_empty(4 * c + d_gate_out.shape[0], B, N, N)
    d_proj[4 * c:] = d_gate_out
    layer_norm_glu.layer_norm_glu(pair_repr.reshape(M, cz), norm_in_weight, norm_in_bias, in_weight[:4 * c],
                                  None if in_bias is None else in_bias[:4 * c],
                                  None if mask is None else mask.reshape(M), dab.view(2 * c, M).t(), "sigmoid",
                                  precision, d_proj[:4 * c].view(4 * c, M).t(), grad=True)
    return d_proj


def _core_backward_fake(pair_repr, norm_in_weight, norm_in_bias, in_weight, in_bias, mask, dt, d_gate_out, outgoing, precision):
    B, N = pair_repr.shape[:2]
    return pair_repr.new_empty(4 * dt.shape[0] + d_gate_out.shape[0], B, N, N)


core_backward_op = custom_op("triangle_multiplication_core_backward", core_backward, _core_backward_fake)


def _backward(ctx, grad_out, *_):
    pair_repr, mask, nw_in, nb_in, w_in, b_in, nw_out, nb_out, w_out, _, gate_out, t, y = ctx.saved_tensors
    needs = ctx.needs_input_grad
    c = nw_out.shape[0]
    gate_backward = out_gate_backward_op if traced(grad_out) else out_gate_backward
    dy, d_gate_out = gate_backward(grad_out, y, gate_out)
    dt, d_nw_out, d_nb_out, d_w_out, d_b_out = layer_norm_linear_backward(
        t.permute(1, 2, 3, 0), nw_out, nb_out, w_out, dy, (True, *needs[6:10]), ctx.precision)
    dt = dt.view(*y.shape[:3], c).permute(3, 0, 1, 2)  # (c, B, N, N)
    backward = core_backward_op if traced(grad_out) else core_backward
    d_proj = backward(pair_repr, nw_in, nb_in, w_in, b_in, mask, dt, d_gate_out, ctx.outgoing, ctx.precision)
    dx, d_nw_in, d_nb_in, d_w_in, d_b_in = layer_norm_linear_backward(
        pair_repr, nw_in, nb_in, w_in, d_proj.permute(1, 2, 3, 0), (needs[0], *needs[2:6]), ctx.precision)
    return dx, None, d_nw_in, d_nb_in, d_w_in, d_b_in, d_nw_out, d_nb_out, d_w_out, d_b_out, None, None, None


def _bmm(u: Tensor, v: Tensor, transpose: bool | None, precision: str, out: Tensor | None = None) -> Tensor:
    """Per (channel, batch element) planes (c, B, N, N): u v (transpose False), u^T v (True) or u v^T (None); into
    `out` (c, B, N, N) contiguous where given. float32 by `matmul`'s three TF32 products, else cuBLAS."""
    c, B, N, _ = u.shape
    u, v = u.reshape(c * B, N, N), v.reshape(c * B, N, N)
    if transpose:
        u = u.transpose(1, 2)
    elif transpose is None:
        v = v.transpose(1, 2)
    if uses_tensor_cores(u.dtype, precision):
        t = u.new_empty(c, B, N, N) if out is None else out
        matmul_into(u, v, t.view(c * B, N, N))
        return t
    if out is None:
        return torch.bmm(u, v).view(c, B, N, N)
    torch.bmm(u, v, out=out.view(c * B, N, N))
    return out


# the op, and its call: eagerly on plain tensors the same functions without the dispatcher
triangle_multiplication_op, triangle_multiplication = operation("triangle_multiplication",
                                                                triangle_multiplication_forward, _fake,
                                                                _setup_context, _backward)

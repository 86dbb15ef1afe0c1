"""The triangle multiplicative update as a torch.library custom op, `evofuse::triangle_multiplication`, with its fake
and its backward (`register_autograd`).

Forward: one `layer_norm_linear` of the pair z (B, N, N, c_z) writes p_a, p_b, g_a, g_b and g_out channel major
(K = 4c + c_z planes of (B, N, N): the layout cuBLAS's batched product wants); a and b = sigmoid(g) * p * mask, a
(B, N, N) plane a channel; t = a b^T (outgoing) or a^T b (incoming) by cuBLAS, one product a (channel, batch
element), accumulated in float32; `layer_norm_linear` of t (its channels strided) for LN_out and p_out; the output
gate sigmoid(g_out) applied. Backward: the gate's and the output projection's gradients (`layer_norm_linear_backward`
on t), da and db by cuBLAS, the gates' and projections' gradients channel major, then one
`layer_norm_linear_backward` of the pair for every input projection and LN_in.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._runtime import eager_or_dispatched, keep_for_backward
from ..layer_norm_linear import joined_bias, layer_norm_linear, layer_norm_linear_backward


def joined_inputs(weights: list[Tensor], biases: list[Tensor | None]) -> tuple[Tensor, Tensor | None]:
    """p_in's (2c, c_z), g_in's (2c, c_z) and g_out's (c_z, c_z) weights stacked as the op takes them (one LayerNorm,
    one pass over the pair), and their biases (or None where all are None). Called outside the op, so that autograd
    hands each weight its share of the stacked gradient."""
    return torch.cat(weights), joined_bias(biases, weights)


def _gated(proj: Tensor, mask: Tensor | None, c: int) -> tuple[Tensor, Tensor, Tensor]:
    """(ab (2c, B, N, N) in proj's dtype, sigmoid(g) and p (float32)): a and b = sigmoid(g) * p * mask from the
    channel-major projections proj (4c + c_z, B, N, N)."""
    p, g = proj[:2 * c].float(), torch.sigmoid(proj[2 * c:4 * c].float())
    ab = p * g if mask is None else p * g * mask.to(torch.float32)
    return ab.to(proj.dtype), g, p


def triangle_multiplication_forward(pair_repr: Tensor, pair_mask: Tensor | None, norm_in_weight: Tensor,
                                    norm_in_bias: Tensor, in_weight: Tensor, in_bias: Tensor | None,
                                    norm_out_weight: Tensor, norm_out_bias: Tensor, p_out_weight: Tensor,
                                    p_out_bias: Tensor | None, outgoing: bool, precision: str,
                                    train: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out (B, N, N, c_z), proj (4c + c_z, B, N, N), t (c, B, N, N), y (B, N, N, c_z)): the output, then what the
    backward takes (each empty unless `train`): the input projections channel major, the product and the output
    projection before its gate. pair_repr (B, N, N, c_z) any strides; pair_mask (B, N, N) 0/1 of any real dtype or
    None; in_weight (4c + c_z, c_z): p_a, p_b, g_a, g_b and g_out stacked, in_bias (4c + c_z,) or None; LN_out's
    (c,); p_out_weight (c_z, c), p_out_bias (c_z,) or None."""
    B, N, _, cz = pair_repr.shape
    c = norm_out_weight.shape[0]
    proj = pair_repr.new_empty(in_weight.shape[0], B, N, N)
    layer_norm_linear(pair_repr, norm_in_weight, norm_in_bias, in_weight, in_bias, None, precision,
                      out=proj.permute(1, 2, 3, 0).unsqueeze(-1))
    ab = _gated(proj, pair_mask, c)[0]
    t = _bmm(ab[:c], ab[c:], None if outgoing else True)  # outgoing a b^T (sum over k of a[i, k] b[j, k]), else a^T b
    del ab
    y = layer_norm_linear(t.permute(1, 2, 3, 0), norm_out_weight, norm_out_bias, p_out_weight, p_out_bias, None,
                          precision)
    gate = torch.sigmoid(proj[4 * c:].permute(1, 2, 3, 0))
    if not train:
        return y.mul_(gate), proj.new_empty(0), t.new_empty(0), y.new_empty(0)
    return y * gate, proj, t, y


triangle_multiplication_op = torch.library.custom_op("evofuse::triangle_multiplication", mutates_args=())(
    triangle_multiplication_forward)


@triangle_multiplication_op.register_fake
def _(pair_repr, pair_mask, norm_in_weight, norm_in_bias, in_weight, in_bias, norm_out_weight, norm_out_bias,
      p_out_weight, p_out_bias, outgoing, precision, train):
    B, N, _, cz = pair_repr.shape
    c = norm_out_weight.shape[0]
    out = pair_repr.new_empty(B, N, N, cz)
    if not train:
        return out, pair_repr.new_empty(0), pair_repr.new_empty(0), pair_repr.new_empty(0)
    return (out, pair_repr.new_empty(in_weight.shape[0], B, N, N), pair_repr.new_empty(c, B, N, N),
            pair_repr.new_empty(B, N, N, cz))


def _setup_context(ctx, inputs, output):
    pair_repr, pair_mask, *params, outgoing, precision, _ = inputs
    keep_for_backward(ctx, [pair_repr, pair_mask, *params], list(output[1:]), outgoing=outgoing, precision=precision)


def _backward(ctx, grad_out, *_):
    pair_repr, mask, nw_in, nb_in, w_in, _, nw_out, nb_out, w_out, _, proj, t, y = ctx.saved_tensors
    needs = ctx.needs_input_grad
    c = nw_out.shape[0]
    gate = torch.sigmoid(proj[4 * c:].float()).permute(1, 2, 3, 0)  # (B, N, N, c_z)
    d_proj = torch.empty_like(proj)
    d_proj[4 * c:] = (grad_out * y * gate * (1 - gate)).permute(3, 0, 1, 2)  # g_out's pre-activation
    dy = (grad_out * gate).to(grad_out.dtype)
    dt, d_nw_out, d_nb_out, d_w_out, d_b_out = layer_norm_linear_backward(
        t.permute(1, 2, 3, 0), nw_out, nb_out, w_out, dy, (True, *needs[6:10]), ctx.precision)
    dt = dt.view(*y.shape[:3], c).permute(3, 0, 1, 2)  # (c, B, N, N)
    ab, g, p = _gated(proj, mask, c)
    a, b = ab[:c], ab[c:]
    if ctx.outgoing:  # t = a b^T: da = dt b, db = dt^T a
        da, db = _bmm(dt, b, False), _bmm(dt, a, True)
    else:  # t = a^T b: da = b dt^T, db = a dt
        da, db = _bmm(b, dt, None), _bmm(a, dt, False)
    dab = torch.cat([da, db]).float()
    if mask is not None:
        dab = dab * mask.to(torch.float32)
    d_proj[:2 * c] = dab * g
    d_proj[2 * c:4 * c] = dab * p * g * (1 - g)
    dx, d_nw_in, d_nb_in, d_w_in, d_b_in = layer_norm_linear_backward(
        pair_repr, nw_in, nb_in, w_in, d_proj.permute(1, 2, 3, 0), (needs[0], *needs[2:6]), ctx.precision)
    return dx, None, d_nw_in, d_nb_in, d_w_in, d_b_in, d_nw_out, d_nb_out, d_w_out, d_b_out, None, None, None


def _bmm(u: Tensor, v: Tensor, transpose: bool | None) -> Tensor:
    """Per (channel, batch element) planes (c, B, N, N): u v (transpose False), u^T v (True) or u v^T (None)."""
    c, B, N, _ = u.shape
    u, v = u.reshape(c * B, N, N), v.reshape(c * B, N, N)
    if transpose:
        u = u.transpose(1, 2)
    elif transpose is None:
        v = v.transpose(1, 2)
    return torch.bmm(u, v).view(c, B, N, N)


triangle_multiplication_op.register_autograd(_backward, setup_context=_setup_context)
# the op's call: eagerly on plain tensors the same functions without the dispatcher
triangle_multiplication = eager_or_dispatched(triangle_multiplication_op, triangle_multiplication_forward,
                                              _setup_context, _backward)

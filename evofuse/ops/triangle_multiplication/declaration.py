"""The triangle multiplicative update: its declaration, read top-down: the functional form (its `Form`, which the
front door reads, and its documented signature), the module (the models' parameter names) and its registry entry
(`OPERATION`: the suite's cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ...front.declaration import Case, Operation, linears
from ...front.door import ROWS, Form, front
from ...front.parts import check_options

if triton_available():  # the kernels (without Triton every call takes the reference)
    from . import op, sharded
else:
    op = sharded = None


def _triangle_multiplication(a, train):
    args = (a.pair_repr, a.pair_mask, a.norm_in_weight, a.norm_in_bias,
            *op.joined_inputs([a.p_in_weight, a.g_in_weight, a.g_out_weight], [a.p_in_bias, a.g_in_bias, a.g_out_bias]),
            a.norm_out_weight, a.norm_out_bias, a.p_out_weight, a.p_out_bias, a.outgoing, a.precision)
    if sharded.by_residues(a.pair_repr):  # (a pair split by its rows or columns: a and b apart, one of them gathered)
        return sharded.triangle_multiplication(*args, train)
    return op.triangle_multiplication(*args, a.chunk_size or 0, train)[0]


TRIANGLE_MULTIPLICATION = Form(
    "triangle multiplication", "pair", ("pair_repr", "pair_mask"),
    dict(norm_in_weight="cz", norm_in_bias="cz", p_in_weight="2c cz", p_in_bias="2c", g_in_weight="2c cz",
         g_in_bias="2c", norm_out_weight="c", norm_out_bias="c", p_out_weight="cz c", p_out_bias="cz",
         g_out_weight="cz cz", g_out_bias="cz"),
    ref.triangle_multiplication_reference, _triangle_multiplication,
    optional=("p_in_bias", "g_in_bias", "p_out_bias", "g_out_bias"), width=("cz", "norm_in_weight"),
    rules={"chunk_size": ROWS}, supports=lambda a: "float64" if a.dtype == torch.float64 else None)


@front(TRIANGLE_MULTIPLICATION)
def triangle_multiplication(
    pair_repr: torch.Tensor,
    pair_mask: torch.Tensor | None,
    norm_in_weight: torch.Tensor,
    norm_in_bias: torch.Tensor,
    p_in_weight: torch.Tensor,
    p_in_bias: torch.Tensor | None,
    g_in_weight: torch.Tensor,
    g_in_bias: torch.Tensor | None,
    norm_out_weight: torch.Tensor,
    norm_out_bias: torch.Tensor,
    p_out_weight: torch.Tensor,
    p_out_bias: torch.Tensor | None,
    g_out_weight: torch.Tensor,
    g_out_bias: torch.Tensor | None,
    *,
    outgoing: bool = True,
    chunk_size: int | None = None,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """The triangle multiplicative update, outgoing (AF2 Algorithm 11, AF3 12) or incoming (12, 13), in Boltz-2's and
    AF3's form (`evofuse.reference.triangle_multiplication_reference` is the definition; OpenFold's separate a and b
    projections are these stacked, a's first).

    Args:
        pair_repr: (B, N, N, c_z) float16, bfloat16, float32 or float64, any strides; any leading dimensions in
            place of B (none: an unbatched (N, N, c_z)), which the mask and the output share.
        pair_mask: (B, N, N) 0/1 as bool, integer or floating, or None; a and b are zero at a masked pair (i, k).
        norm_in_weight, norm_in_bias: (c_z,); p_in_weight, g_in_weight: (2c, c_z), a's c rows then b's; p_in_bias,
            g_in_bias: (2c,) or None; norm_out_weight, norm_out_bias: (c,); p_out_weight (c_z, c), p_out_bias (c_z,)
            or None; g_out_weight (c_z, c_z), g_out_bias (c_z,) or None (Boltz's and AF3's have no biases).
        outgoing: t[i, j] = sum_k a[i, k] b[j, k] (else incoming: sum_k a[k, i] b[k, j]).
        chunk_size: output rows i an inference call (no gradient recorded) takes at a time, so that a and t (each c
            planes of the pair) are never whole, b alone for every pair; None: all at once unless a, b and t would
            pass a quarter of the CUDA device's free memory (then as many rows as fit it). The same output either way.
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, N, N, c_z) in pair_repr's dtype; the parameters are cast to it. 16-bit inputs accumulate in float32.
    """


class TriangleMultiplication(nn.Module):
    """The triangle multiplicative update, outgoing (AF2 Algorithm 11) or incoming (12): (B, N, N, c_z) pair ->
    (B, N, N, c_z). Boltz-2's parameter names (`norm_in`, `p_in` and `g_in` of width 2c, a's rows then b's,
    `norm_out`, `p_out`, `g_out`), so a Boltz-2 state_dict of the module loads unchanged; OpenFold's separate
    projections are these stacked (`evofuse.integrations`).

    Args:
        c_z, c_hidden: the pair's width and a and b's (default c_z, as Boltz-2 and AF3).
        outgoing: the outgoing edges (else incoming); bias: whether the projections have biases (OpenFold's do;
            Boltz's and AF3's do not).
        precision, impl: as for OuterProductMean.

    forward(x (B, N, N, c_z), mask (B, N, N) or None, ...) returns (B, N, N, c_z) in x's dtype (any leading
    dimensions in place of B); the models' switches (`use_kernels`, `inplace_safe`, ...) are accepted and change
    nothing.
    """

    def __init__(self, c_z: int, c_hidden: int | None = None, outgoing: bool = True, bias: bool = False,
                 precision: str = "default", impl: str | None = None):
        super().__init__()
        check_options(precision, impl)
        c = c_z if c_hidden is None else c_hidden
        if not isinstance(c, int) or c < 1:
            raise ValueError(f"c_hidden must be a positive integer, got {c_hidden!r}")
        self.c_z, self.c_hidden, self.outgoing = c_z, c, outgoing
        self.norm_in = nn.LayerNorm(c_z)
        self.p_in = nn.Linear(c_z, 2 * c, bias=bias)
        self.g_in = nn.Linear(c_z, 2 * c, bias=bias)
        self.norm_out = nn.LayerNorm(c)
        self.p_out = nn.Linear(c, c_z, bias=bias)
        self.g_out = nn.Linear(c_z, c_z, bias=bias)
        self.precision = precision
        self.impl = impl

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, impl: str | None = None,
                **switches) -> torch.Tensor:
        return triangle_multiplication(
            x, mask, **TRIANGLE_MULTIPLICATION.weights(norm_in=self.norm_in, p_in=self.p_in, g_in=self.g_in,
                                                       norm_out=self.norm_out, p_out=self.p_out, g_out=self.g_out),
            outgoing=self.outgoing, precision=self.precision,
            impl=impl if impl is not None else self.impl)


OPERATION = Operation(
    "trimul", lambda c, **kw: TriangleMultiplication(c.D, c.width, **kw), "norm_in",
    linears("norm_in", "p_in", "g_in", "norm_out", "p_out", "g_out"), ref.triangle_multiplication_reference,
    lambda c: {}, "pair", "pair_row",
    lambda c: 2.0 * c.B * (c.N ** 2 * c.D * (4 * c.width + c.D) + c.N ** 3 * c.width + c.N ** 2 * c.width * c.D),
    lambda c: c.B * c.N ** 2 * (4 * c.width + c.D) * 8,  # (the input projections, (B, N, N, 4c + c_z))
    (Case("trimul-seed", "trimul", 2, 24, 24, 32, 32, 16), Case("trimul-384", "trimul", 1, 384, 384, 128, 128, 128),
     Case("trimul-768", "trimul", 1, 768, 768, 128, 128, 128),
     Case("trimul-2048", "trimul", 1, 2048, 2048, 128, 128, 128),
     Case("trimul-4096", "trimul", 1, 4096, 4096, 128, 128, 128)))

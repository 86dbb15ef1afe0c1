"""The Outer Product Mean: its declaration, read top-down: the functional form (its `Form`, which the front door
reads, and its documented signature), the module (the models' parameter names) and its registry entry (`OPERATION`:
the suite's cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ..._runtime import rows_first
from ...front.declaration import Case, Operation, linears
from ...front.door import POSITIVE, Form, front, one_of
from ...front.parts import check_options
from ...reference import COUNT_EPS, NORMALIZATIONS

if triton_available():  # the kernels (without Triton every call takes the reference)
    from . import op, sharded
else:
    op = sharded = None


def _outer_product_mean(a, train):
    if sharded.by_residues(a.msa_repr):  # (an MSA split by residues: the projections apart, b gathered)
        return sharded.outer_product_mean(
            a.msa_repr, a.msa_mask, a.layer_norm_weight, a.layer_norm_bias, a.proj_a_weight, a.proj_a_bias,
            a.proj_b_weight, a.proj_b_bias, a.out_proj_weight, a.out_proj_bias, a.normalization, float(a.count_eps),
            a.precision, train)
    counts, bias = None, a.out_proj_bias
    if rows_first(a.msa_repr) == (1, 0, 2, 3):  # a distributed MSA split by its rows: each device's part a partial sum
        from torch.distributed.tensor import Replicate

        mask = torch.ones_like(a.msa_repr[..., 0]) if a.msa_mask is None else a.msa_mask
        counts = op.counts_of(mask, a.normalization)  # (over every row, reduced once: the backward keeps them)
        counts = counts.redistribute(counts.device_mesh, [Replicate()] * counts.device_mesh.ndim)
        bias = torch.zeros_like(bias)
    out = op.outer_product_mean(
        a.msa_repr, a.msa_mask, a.layer_norm_weight, a.layer_norm_bias, a.proj_a_weight, a.proj_a_bias,
        a.proj_b_weight, a.proj_b_bias, a.out_proj_weight, bias, counts, a.normalization, float(a.count_eps),
        a.precision, train)[0]
    if counts is None:
        return out
    if a.normalization == "count_ij_after":  # (the bias divided with the products)
        return out + a.out_proj_bias / (counts + a.count_eps)[..., None].to(out.dtype)
    return out + a.out_proj_bias


OUTER_PRODUCT_MEAN = Form(
    "Outer Product Mean", "msa", ("msa_repr", "msa_mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D", proj_a_weight="c D", proj_a_bias="c", proj_b_weight="c D",
         proj_b_bias="c", out_proj_weight="R cc", out_proj_bias="R"),
    ref.outer_product_mean_reference, _outer_product_mean,
    optional=("proj_a_bias", "proj_b_bias"),
    later=dict(out_proj_weight="R cc", out_proj_bias="R"), letters=lambda sizes: {"cc": sizes["c"] ** 2},
    rules={"normalization": one_of(ref.NORMALIZATIONS), "count_eps": POSITIVE},
    supports=lambda a: None if op.fused(a.sizes["c"], a.dtype) else f"hidden_dim={a.sizes['c']}, dtype={a.dtype}")


@front(OUTER_PRODUCT_MEAN)
def outer_product_mean(
    msa_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    proj_a_weight: torch.Tensor,
    proj_a_bias: torch.Tensor | None,
    proj_b_weight: torch.Tensor,
    proj_b_bias: torch.Tensor | None,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor,
    *,
    normalization: str = "count_i",
    count_eps: float = ref.COUNT_EPS,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """The Outer Product Mean.

    Args:
        msa_repr: (B, S, N, D) float16, bfloat16, float32 or float64, any strides; any leading dimensions in
            place of B (none: an unbatched (S, N, D)), which every other input and the output share.
        msa_mask: (B, S, N) 0/1 as bool, integer or floating, or None for all ones.
        layer_norm_weight, layer_norm_bias: (D,).
        proj_a_weight, proj_b_weight: (c, D); proj_a_bias, proj_b_bias: (c,), or None for a projection
            without a bias (OpenFold, Protenix, OpenFold3, Boltz).
        out_proj_weight: (pair_dim, c*c), flat index p*c + q; out_proj_bias: (pair_dim,).
        normalization: what the outer products are divided by: "count_i" by max(sum_s mask[s, i], 1) before
            out_proj (the seed module); "count_ij_after" divides out_proj's output, bias included, by
            1e-3 + sum_s mask[s, i] mask[s, j] (AF2, OpenFold, AF3, Protenix); "count_ij" by
            max(sum_s mask[s, i] mask[s, j], 1) before out_proj (Boltz).
        count_eps: what "count_ij_after" adds to the counts (> 0; AF2 1e-3, OpenFold3's model 1e-8).
        precision: "default" (float32 meets rel <= 1e-5) or "fast" (one float16 or TF32 product, rel <= 5e-3).
        impl: "auto", "triton" or "torch"; None follows EVOFUSE_IMPL (default "auto").
    Returns:
        (B, N, N, pair_dim) in msa_repr's dtype; the parameters are cast to it, and 16-bit inputs
        accumulate in float32. The fused kernels take hidden_dim c in (8, 16, 32, 64) and 16/32-bit floats;
        anything else runs the reference, with a one-time warning.
    """


class OuterProductMean(nn.Module):
    """Outer Product Mean: (B, S, N, msa_dim) MSA -> (B, N, N, pair_dim) pair update.

    Args:
        msa_dim, pair_dim, hidden_dim: D, the output width and c.
        normalization: "count_i" (default: divide by the rows where residue i is unmasked), "count_ij_after"
            (AF2/OpenFold/AF3/Protenix/FastFold: divide out_proj's output by 1e-3 + the rows where i and j
            both are) or "count_ij" (Boltz: divide by the rows where i and j both are, before out_proj).
        count_eps: what "count_ij_after" adds to the counts (AF2 1e-3; OpenFold3's model 1e-8).
        projection_bias: whether proj_a and proj_b have biases (OpenFold, AF3, Protenix, Boltz: none).
        precision: "default" (float32 inputs meet rel <= 1e-5) or "fast" (one float16 or TF32 product, rel <= 5e-3).
        impl: "auto", "triton" or "torch"; None follows EVOFUSE_IMPL (default auto).

    forward(msa_repr (B, S, N, D) float, msa_mask (B, S, N) 0/1 or None) returns
    (B, N, N, pair_dim) in msa_repr's dtype; any leading dimensions (none included) in place of B.
    """

    def __init__(self, msa_dim: int, pair_dim: int, hidden_dim: int = 32, normalization: str = "count_i",
                 count_eps: float = COUNT_EPS, projection_bias: bool = True, precision: str = "default",
                 impl: str | None = None):
        super().__init__()
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        if not count_eps > 0:
            raise ValueError(f"count_eps must be > 0, got {count_eps!r}")
        check_options(precision, impl)
        self.layer_norm = nn.LayerNorm(msa_dim)
        self.proj_a = nn.Linear(msa_dim, hidden_dim, bias=projection_bias)
        self.proj_b = nn.Linear(msa_dim, hidden_dim, bias=projection_bias)
        self.out_proj = nn.Linear(hidden_dim * hidden_dim, pair_dim)
        self.hidden_dim = hidden_dim
        self.normalization = normalization
        self.count_eps = count_eps
        self.precision = precision
        self.impl = impl

    def forward(self, msa_repr: torch.Tensor, msa_mask: torch.Tensor | None = None, *,
                impl: str | None = None) -> torch.Tensor:
        return outer_product_mean(
            msa_repr, msa_mask, **OUTER_PRODUCT_MEAN.weights(
                layer_norm=self.layer_norm, proj_a=self.proj_a, proj_b=self.proj_b, out_proj=self.out_proj),
            normalization=self.normalization,
            count_eps=self.count_eps, precision=self.precision, impl=impl if impl is not None else self.impl)


OPERATION = Operation(
    "opm", lambda c, **kw: OuterProductMean(c.D, c.pair, c.width, **kw), "layer_norm",
    linears("layer_norm", "proj_a", "proj_b", "out_proj"), ref.outer_product_mean_reference,
    lambda c: {"normalization": "count_i"}, "msa", "residue",
    lambda c: 2.0 * c.B * (c.S * c.N * c.D * 2 * c.width + c.N ** 2 * c.width ** 2 * (c.S + c.pair)),
    lambda c: 0.0,
    (Case("opm-seed", "opm", 2, 8, 32, 64, 64, 32), Case("opm-af2-main", "opm", 1, 512, 384, 256, 128, 32),
     Case("opm-af2-extra", "opm", 1, 1024, 384, 64, 128, 32), Case("opm-long", "opm", 1, 512, 1024, 256, 128, 32)),
    ((1, 1, 129, 256, 128, 32), (2, 300, 61, 64, 32, 8), (3, 17, 97, 48, 16, 16), (1, 2048, 64, 64, 64, 32),
     (1, 8, 1024, 128, 128, 32), (2, 1, 1, 16, 8, 8), (1, 64, 300, 96, 128, 32), (1, 4, 2048, 32, 32, 16)))

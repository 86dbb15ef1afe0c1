"""Pair-weighted averaging: its declaration, read top-down: the functional form (its `Form`, which the front door
reads, and its documented signature), the module (the models' parameter names) and its registry entry (`OPERATION`:
the suite's cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ...front.declaration import Case, Operation, heads
from ...front.door import Form, front, one_of
from ...front.parts import check_options
from ...reference import PAIR_MASK_MODES

if triton_available():  # the kernels (without Triton every call takes the reference)
    from . import op
else:
    op = None


PAIR_WEIGHTED_AVERAGING = Form(
    "pair-weighted averaging", "msa", ("msa_repr", "pair_repr", "pair_mask"),
    dict(norm_m_weight="c_m", norm_m_bias="c_m", norm_z_weight="c_z", norm_z_bias="c_z", proj_m_weight="inner c_m",
         proj_g_weight="inner c_m", proj_z_weight="h c_z", proj_o_weight="c_m inner"),
    ref.pair_weighted_averaging_reference,
    lambda a, train: op.pair_weighted_averaging(
        a.msa_repr, a.pair_repr, a.pair_mask, a.norm_m_weight, a.norm_m_bias, a.norm_z_weight, a.norm_z_bias,
        torch.cat([a.proj_m_weight, a.proj_g_weight]), a.proj_z_weight, a.proj_o_weight, float(a.inf), a.mask_mode,
        a.precision, train)[0],  # (the op takes proj_m's and proj_g's weights stacked)
    width=("c_m", "norm_m_weight"), pair=("c_z", "norm_z_weight"), heads=("inner", "proj_m's width"),
    later=dict(proj_z_weight="h c_z"),
    rules={"mask_mode": one_of(ref.PAIR_MASK_MODES)},
    supports=lambda a: (None if op.fused(a.sizes["inner"] // a.num_heads, a.sizes["c_m"], a.dtype)
                        else f"head width {a.sizes['inner'] // a.num_heads}, c_m={a.sizes['c_m']}, dtype={a.dtype}"))


@front(PAIR_WEIGHTED_AVERAGING)
def pair_weighted_averaging(
    msa_repr: torch.Tensor,
    pair_repr: torch.Tensor,
    pair_mask: torch.Tensor | None,
    norm_m_weight: torch.Tensor,
    norm_m_bias: torch.Tensor,
    norm_z_weight: torch.Tensor,
    norm_z_bias: torch.Tensor,
    proj_m_weight: torch.Tensor,
    proj_g_weight: torch.Tensor,
    proj_z_weight: torch.Tensor,
    proj_o_weight: torch.Tensor,
    *,
    num_heads: int,
    inf: float = ref.PAIR_MASK_INF,
    mask_mode: str = "relative",
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """Pair-weighted averaging, the MSA operation of AF3-family trunks (Boltz's form).

    Args:
        msa_repr: (B, S, N, c_m) float16, bfloat16, float32 or float64; any leading dimensions in place of B,
            as for `outer_product_mean`.
        pair_repr: (B, N, N, c_z) real floating.
        pair_mask: (B, N, N) 0/1 as bool, integer or floating, or None; a masked pair (i, j) gets
            (1 - mask) * -inf added to its weight logit, as Boltz does (so a row of i whose pairs are all
            masked averages with the unmasked softmax of its logits).
        norm_m_weight, norm_m_bias: (c_m,); norm_z_weight, norm_z_bias: (c_z,).
        proj_m_weight, proj_g_weight: (h*c, c_m); proj_z_weight: (h, c_z); proj_o_weight: (c_m, h*c).
        num_heads: h (h*c must divide by it); inf: the mask's magnitude (Boltz's default 1e6; OpenFold3 1e9).
        mask_mode: "relative" (default) evaluates the mask term in exact arithmetic; "add" adds it to the
            logits in float32 as the models do, which in a row of masked pairs alone rounds the logits to inf's
            spacing (uniform weights for inf = 1e9, as OpenFold3 and Boltz compute them).
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, S, N, c_m) in msa_repr's dtype; the parameters and the pair input are cast to it.
    """


class PairWeightedAveraging(nn.Module):
    """Pair-weighted averaging (AF3, Boltz-1/2, Protenix, OpenFold3): (B, S, N, c_m) MSA and (B, N, N, c_z)
    pair -> (B, S, N, c_m). Boltz's constructor and parameter names (`norm_m`, `norm_z`, `proj_m`, `proj_g`,
    `proj_z`, `proj_o`, no biases; proj_o starts at zero), so a Boltz state_dict loads unchanged.

    Args:
        c_m, c_z, c_h, num_heads: the MSA and pair widths, the width of a head and the heads.
        inf: the pair mask's magnitude (a masked pair's logit gets (1 - mask) * -inf).
        mask_mode: "relative" (exact arithmetic) or "add" (float32, as the models); see
            `evofuse.pair_weighted_averaging`.
        precision, impl: as for OuterProductMean.

    forward(m (B, S, N, c_m), z (B, N, N, c_z), mask (B, N, N) or None, chunk_heads=False) returns
    (B, S, N, c_m) in m's dtype (any leading dimensions in place of B); chunk_heads (Boltz's memory option) is
    accepted and changes nothing.
    """

    def __init__(self, c_m: int, c_z: int, c_h: int, num_heads: int, inf: float = 1e6, precision: str = "default",
                 impl: str | None = None, mask_mode: str = "relative"):
        super().__init__()
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
        check_options(precision, impl, mask_mode, PAIR_MASK_MODES)
        self.c_m, self.c_z, self.c_h, self.num_heads, self.inf = c_m, c_z, c_h, num_heads, inf
        self.mask_mode = mask_mode
        self.norm_m = nn.LayerNorm(c_m)
        self.norm_z = nn.LayerNorm(c_z)
        self.proj_m = nn.Linear(c_m, c_h * num_heads, bias=False)
        self.proj_g = nn.Linear(c_m, c_h * num_heads, bias=False)
        self.proj_z = nn.Linear(c_z, num_heads, bias=False)
        self.proj_o = nn.Linear(c_h * num_heads, c_m, bias=False)
        with torch.no_grad():
            self.proj_o.weight.zero_()
        self.precision = precision
        self.impl = impl

    def forward(self, m: torch.Tensor, z: torch.Tensor, mask: torch.Tensor | None = None, chunk_heads: bool = False,
                *, impl: str | None = None) -> torch.Tensor:
        return pair_weighted_averaging(
            m, z, mask, **PAIR_WEIGHTED_AVERAGING.weights(
                norm_m=self.norm_m, norm_z=self.norm_z, proj_m=self.proj_m, proj_g=self.proj_g, proj_z=self.proj_z,
                proj_o=self.proj_o), num_heads=self.num_heads, inf=self.inf, mask_mode=self.mask_mode, precision=self.precision,
            impl=impl if impl is not None else self.impl)


def _module(case: Case, **kwargs) -> nn.Module:
    mod = PairWeightedAveraging(case.D, case.pair, case.head, case.width, **kwargs)
    nn.init.normal_(mod.proj_o.weight, std=mod.proj_o.in_features ** -0.5)  # (Boltz starts it at 0)
    return mod


OPERATION = Operation(
    "pwa", _module, "norm_m",
    ("norm_m.weight", "norm_m.bias", "norm_z.weight", "norm_z.bias", "proj_m.weight", "proj_g.weight",
     "proj_z.weight", "proj_o.weight"), ref.pair_weighted_averaging_reference, heads, "msa_pair_mask", "pair_row",
    lambda c: 2.0 * c.B * (c.S * c.N * c.D * 3 * c.width * c.head + c.N ** 2 * c.pair * c.width
                           + c.N ** 2 * c.S * c.width * c.head),
    lambda c: 0.0,
    (Case("pwa-seed", "pwa", 2, 8, 32, 64, 32, 4, 8), Case("pwa-boltz", "pwa", 1, 1024, 384, 64, 128, 8, 32),
     Case("pwa-af3", "pwa", 1, 1024, 384, 64, 128, 8, 8), Case("pwa-long", "pwa", 1, 256, 2048, 64, 128, 8, 32)),
    ((1, 1, 129, 64, 128, 8, 8), (2, 300, 61, 32, 16, 3, 8), (3, 17, 97, 48, 16, 4, 3), (1, 2048, 64, 64, 64, 8, 32),
     (1, 16, 1024, 64, 128, 8, 32), (2, 1, 1, 16, 8, 1, 8), (1, 4, 2048, 64, 128, 8, 8)))

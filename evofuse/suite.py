"""The benchmark and check suite (the shapes of the AF2 and AF3 trunks), and seeded random modules and inputs for it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .modules import (
    MSAColumnAttention,
    MSAColumnGlobalAttention,
    MSARowAttentionWithPairBias,
    OuterProductMean,
    PairWeightedAveraging,
    Transition,
    TriangleAttention,
    TriangleMultiplication,
)


@dataclass(frozen=True)
class Case:
    """One suite shape. `width` is hidden_dim c for the Outer Product Mean and triangle multiplication, num_heads for
    the attentions and pair-weighted averaging, the hidden width H for the transition (SwiGLU); `head` the width of a
    head of pair-weighted averaging, triangle and column attention. The pair stack's pair (B, N, N, D) has S = N rows;
    the transition's rows are (B, S, N) of D channels (a pair's where S = N)."""

    name: str
    op: str  # "opm", "att", "pwa", "tri", "trimul", "col", "gcol" or "trans"
    B: int
    S: int
    N: int
    D: int
    pair: int
    width: int
    head: int = 0

    @property
    def flops(self) -> float:
        """Forward floating-point operations of the fused algorithm (the matrix products)."""
        B, S, N, D, P = self.B, self.S, self.N, self.D, self.pair
        if self.op == "opm":
            c = self.width
            return 2.0 * B * (S * N * D * 2 * c + N * N * c * c * S + N * N * c * c * P)
        if self.op == "pwa":
            hc = self.width * self.head
            return 2.0 * B * (S * N * D * 3 * hc + N * N * P * self.width + N * N * S * hc)
        if self.op == "tri":
            H = self.width * self.head
            return 2.0 * B * (N * N * D * 5 * H + 2 * N * N * N * H + N * N * D * self.width)
        if self.op == "trimul":
            c = self.width
            return 2.0 * B * (N * N * D * (4 * c + D) + N * N * N * c + N * N * c * D)
        if self.op == "col":
            H = self.width * self.head
            return 2.0 * B * (S * N * D * 5 * H + 2 * N * S * S * H)
        if self.op == "gcol":  # (every row's gate, query, key, value and output; the columns' logits and sums)
            H = self.width * self.head
            return 2.0 * B * (S * N * D * (3 * H + 2 * self.head) + 2 * N * S * H)
        if self.op == "trans":
            return 2.0 * B * S * N * D * 3 * self.width
        return 2.0 * B * (S * N * D * 5 * D + 2 * S * N * N * D + N * N * P * self.width)

    @property
    def reference_fits(self) -> bool:
        """Whether the float64 reference's largest tensor, attention weights (B, S, h, N, N) or triangle multiplication's
        projections, takes at most 16 GiB: where it does not (tri-2048: 256 GiB) no error against it is measured."""
        if self.op == "trimul":  # (its largest: the input projections, (B, N, N, 4c + c_z))
            return self.B * self.N ** 2 * (4 * self.width + self.D) * 8 <= 16 * 2**30
        if self.op == "col":  # (the weights of each column, (B, N, h, S, S))
            return self.B * self.N * self.width * self.S ** 2 * 8 <= 16 * 2**30
        if self.op == "trans":  # (a, b, silu(a) and h: (B, S, N, H) each)
            return self.B * self.S * self.N * self.width * 8 * 4 <= 16 * 2**30
        return self.op not in ("att", "tri") or self.B * self.S * self.width * self.N ** 2 * 8 <= 16 * 2**30


SUITE = (
    Case("opm-seed", "opm", 2, 8, 32, 64, 64, 32),
    Case("opm-af2-main", "opm", 1, 512, 384, 256, 128, 32),
    Case("opm-af2-extra", "opm", 1, 1024, 384, 64, 128, 32),
    Case("opm-long", "opm", 1, 512, 1024, 256, 128, 32),
    Case("att-seed", "att", 2, 8, 32, 64, 64, 4),
    Case("att-af2-main", "att", 1, 512, 384, 256, 128, 8),
    Case("att-long", "att", 1, 128, 1024, 256, 128, 8),
    Case("pwa-seed", "pwa", 2, 8, 32, 64, 32, 4, 8),
    Case("pwa-boltz", "pwa", 1, 1024, 384, 64, 128, 8, 32),
    Case("pwa-af3", "pwa", 1, 1024, 384, 64, 128, 8, 8),
    Case("pwa-long", "pwa", 1, 256, 2048, 64, 128, 8, 32),
    Case("tri-seed", "tri", 2, 24, 24, 32, 32, 2, 16),
    Case("tri-384", "tri", 1, 384, 384, 128, 128, 4, 32),
    Case("tri-768", "tri", 1, 768, 768, 128, 128, 4, 32),
    Case("tri-2048", "tri", 1, 2048, 2048, 128, 128, 4, 32),
    Case("trimul-seed", "trimul", 2, 24, 24, 32, 32, 16),
    Case("trimul-384", "trimul", 1, 384, 384, 128, 128, 128),
    Case("trimul-768", "trimul", 1, 768, 768, 128, 128, 128),
    Case("trimul-2048", "trimul", 1, 2048, 2048, 128, 128, 128),
    Case("trimul-4096", "trimul", 1, 4096, 4096, 128, 128, 128),
    Case("col-seed", "col", 2, 8, 32, 64, 0, 4, 16),
    Case("col-af2", "col", 1, 512, 384, 256, 0, 8, 32),
    Case("gcol-seed", "gcol", 2, 8, 32, 64, 0, 4, 16),
    Case("gcol-af2-extra", "gcol", 1, 1024, 384, 64, 0, 8, 8),  # AF2's extra-MSA stack in training (c_e 64, 8 heads of 8)
    Case("gcol-af2-extra-5120", "gcol", 1, 5120, 384, 64, 0, 8, 8),  # its inference depth
    Case("trans-seed", "trans", 2, 8, 32, 64, 0, 256),
    Case("trans-msa-af3", "trans", 1, 1024, 384, 64, 0, 256),  # the AF3-family MSA module's transition (c_m 64)
    Case("trans-pair-384", "trans", 1, 384, 384, 128, 0, 512),  # the Pairformer's pair transition (c_z 128)
    Case("trans-pair-768", "trans", 1, 768, 768, 128, 0, 512),
)
SEED_CASES = tuple(c for c in SUITE if c.name.endswith("-seed"))


def make_module(case: Case, seed: int = 0, **kwargs) -> torch.nn.Module:
    """The evofuse module of a case with seeded weights; LayerNorm parameters are perturbed too."""
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if case.op == "opm":
            mod = OuterProductMean(case.D, case.pair, case.width, **kwargs)
        elif case.op == "att":
            mod = MSARowAttentionWithPairBias(case.D, case.pair, case.width, **kwargs)
        elif case.op == "tri":
            mod = TriangleAttention(case.D, case.head, case.width, **kwargs)
        elif case.op == "trimul":
            mod = TriangleMultiplication(case.D, case.width, **kwargs)
        elif case.op == "col":
            mod = MSAColumnAttention(case.D, case.head, case.width, **kwargs)
        elif case.op == "gcol":
            mod = MSAColumnGlobalAttention(case.D, case.head, case.width, eps=1e-8, **kwargs)
        elif case.op == "trans":
            mod = Transition(case.D, case.width, **kwargs)
        else:
            mod = PairWeightedAveraging(case.D, case.pair, case.head, case.width, **kwargs)
            torch.nn.init.normal_(mod.proj_o.weight, std=mod.proj_o.in_features ** -0.5)  # (Boltz starts it at 0)
    norm = {"pwa": lambda: mod.norm_m, "trimul": lambda: mod.norm_in, "col": lambda: mod._msa_att.layer_norm_m,
            "gcol": lambda: mod.layer_norm_m,
            "trans": lambda: mod.norm}.get(case.op, lambda: mod.layer_norm)()
    with torch.no_grad():
        norm.weight.copy_(1 + 0.2 * torch.randn(case.D, generator=g))
        norm.bias.copy_(0.2 * torch.randn(case.D, generator=g))
    return mod


def make_inputs(case: Case, device, dtype, seed: int = 0, zero_frac: float = 0.1,
                fully_masked: bool = True) -> tuple[torch.Tensor, ...]:
    """Random inputs of a case: msa, [pair,] mask (float 0/1, ~zero_frac zeros; pair-weighted averaging's is a
    (B, N, N) pair mask); the pair stack's pair (B, N, N, D) and its (B, N, N) mask.

    With fully_masked, one residue of the Outer Product Mean is masked in every row, one MSA row of the
    attention has every key masked, and one residue i of pair-weighted averaging and of the pair stack has every pair
    masked.
    """
    g = torch.Generator().manual_seed(seed)
    if case.op in ("tri", "trimul"):
        pair = torch.randn(case.B, case.N, case.N, case.D, generator=g)
        mask = (torch.rand(case.B, case.N, case.N, generator=g) >= zero_frac).float()
        if fully_masked:
            mask[:, case.N // 2] = 0
        return pair.to(device=device, dtype=dtype), mask.to(device)
    msa = torch.randn(case.B, case.S, case.N, case.D, generator=g)
    mask = (torch.rand(case.B, case.S, case.N, generator=g) >= zero_frac).float()
    if fully_masked and case.op in ("opm", "col", "gcol", "trans"):
        mask[:, :, case.N // 2] = 0
    if fully_masked and case.op == "att":
        mask[:, case.S // 2, :] = 0
    if case.op == "pwa":
        mask = (torch.rand(case.B, case.N, case.N, generator=g) >= zero_frac).float()
        if fully_masked:
            mask[:, case.N // 2, :] = 0
    msa = msa.to(device=device, dtype=dtype)
    mask = mask.to(device)
    if case.op in ("opm", "col", "gcol", "trans"):
        return msa, mask
    pair = torch.randn(case.B, case.N, case.N, case.pair, generator=g).to(device=device, dtype=dtype)
    return msa, pair, mask

"""The operations' declarations: for each, what the suite, `evofuse check`, the benchmark and the cross-cutting tests
read of it (its module and how a suite case builds one, its parameters by name in the reference's order, its
reference and options, its inputs, its arithmetic and its suite cases). The registry, `OPERATIONS`, lists them;
`evofuse.suite` and the benchmark hold no per-operation switch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from . import reference as ref
from .modules import (
    AttentionPairBias,
    MSAColumnAttention,
    MSAColumnGlobalAttention,
    MSARowAttentionWithPairBias,
    OuterProductMean,
    PairWeightedAveraging,
    Transition,
    TriangleAttention,
    TriangleMultiplication,
)

REFERENCE_BYTES = 16 * 2**30  # the float64 reference's largest tensor where a case's error is measured


@dataclass(frozen=True)
class Case:
    """One suite shape. `width` is hidden_dim c for the Outer Product Mean and triangle multiplication, num_heads for
    the attentions and pair-weighted averaging, the hidden width H for the transition (SwiGLU); `head` the width of a
    head of pair-weighted averaging, triangle and column attention. The pair stack's pair (B, N, N, D) has S = N rows;
    the transition's rows are (B, S, N) of D channels (a pair's where S = N); attention with pair bias's single
    representation (B, N, D) has S = 1."""

    name: str
    op: str  # an operation's key in OPERATIONS
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
        return OPERATIONS[self.op].flops(self)

    @property
    def reference_fits(self) -> bool:
        """Whether the float64 reference's largest tensor takes at most 16 GiB: where it does not (tri-2048: 256 GiB)
        no error against it is measured."""
        return OPERATIONS[self.op].reference_bytes(self) <= REFERENCE_BYTES


@dataclass(frozen=True)
class Operation:
    """One operation as the suite and the benchmark see it.

    key: the suite's name of it ("opm", ...); build(case, **kwargs): its module at a case's widths; norm: the path of
    the module's LayerNorm that a suite module perturbs; params: the module's parameters in the reference's order, as
    paths (a path through a submodule that is None gives None); reference(*inputs, *params, **options(case)): its
    definition; inputs: "msa" (msa, mask), "msa_pair" (msa, pair, MSA mask), "msa_pair_mask" (msa, pair, pair mask),
    "pair" (pair, pair mask) or "single_pair" (single (B, N, D), pair, token mask (B, N)); fully_masked: what a suite
    input masks whole, "residue" (a residue in every MSA row, or a token), "row" (an MSA row) or "pair_row" (a
    residue's every pair); flops(case) and reference_bytes(case): the forward's
    matrix-product work and the float64 reference's largest tensor; cases: its suite cases; grid: the awkward shapes
    `evofuse bench --grid` times it at, each (B, S, N, D, pair, width[, head]) as a Case takes them."""

    key: str
    build: Callable[..., nn.Module]
    norm: str
    params: tuple[str, ...]
    reference: Callable
    options: Callable[[Case], dict]
    inputs: str
    fully_masked: str
    flops: Callable[[Case], float]
    reference_bytes: Callable[[Case], float]
    cases: tuple[Case, ...]
    grid: tuple[tuple[int, ...], ...] = ()

    def module_params(self, mod: nn.Module) -> tuple:
        """The module's parameters in the reference's order (None where a path passes through None)."""
        out = []
        for path in self.params:
            value = mod
            for name in path.split("."):
                value = None if value is None else getattr(value, name)
            out.append(value)
        return tuple(out)

    def reference_call(self, case: Case) -> Callable:
        """The reference at a case's options, called as fn(*inputs, *module_params(mod))."""
        options = self.options(case)
        return lambda *args: self.reference(*args, **options)


def _linears(*names: str) -> tuple[str, ...]:
    return tuple(f"{name}.{kind}" for name in names for kind in ("weight", "bias"))


def _heads(case: Case) -> dict:
    return {"num_heads": case.width}


def _attention_bytes(case: Case) -> float:  # (attention weights, (B, S, h, N, N) float64)
    return case.B * case.S * case.width * case.N ** 2 * 8


def _pwa_module(case: Case, **kwargs) -> nn.Module:
    mod = PairWeightedAveraging(case.D, case.pair, case.head, case.width, **kwargs)
    nn.init.normal_(mod.proj_o.weight, std=mod.proj_o.in_features ** -0.5)  # (Boltz starts it at 0)
    return mod


_GATED = ("mha.linear_q.weight", "mha.linear_k.weight", "mha.linear_v.weight", "mha.linear_g.weight",
          "mha.linear_g.bias", "mha.linear_o.weight", "mha.linear_o.bias")

OPERATIONS: dict[str, Operation] = {op.key: op for op in (
    Operation(
        "opm", lambda c, **kw: OuterProductMean(c.D, c.pair, c.width, **kw), "layer_norm",
        _linears("layer_norm", "proj_a", "proj_b", "out_proj"), ref.outer_product_mean_reference,
        lambda c: {"normalization": "count_i"}, "msa", "residue",
        lambda c: 2.0 * c.B * (c.S * c.N * c.D * 2 * c.width + c.N ** 2 * c.width ** 2 * (c.S + c.pair)),
        lambda c: 0.0,
        (Case("opm-seed", "opm", 2, 8, 32, 64, 64, 32), Case("opm-af2-main", "opm", 1, 512, 384, 256, 128, 32),
         Case("opm-af2-extra", "opm", 1, 1024, 384, 64, 128, 32), Case("opm-long", "opm", 1, 512, 1024, 256, 128, 32)),
        ((1, 1, 129, 256, 128, 32), (2, 300, 61, 64, 32, 8), (3, 17, 97, 48, 16, 16), (1, 2048, 64, 64, 64, 32),
         (1, 8, 1024, 128, 128, 32), (2, 1, 1, 16, 8, 8), (1, 64, 300, 96, 128, 32), (1, 4, 2048, 32, 32, 16))),
    Operation(
        "att", lambda c, **kw: MSARowAttentionWithPairBias(c.D, c.pair, c.width, **kw), "layer_norm",
        _linears("layer_norm", "query", "key", "value", "gate", "out_proj", "pair_bias"),
        ref.msa_row_attention_reference, _heads, "msa_pair", "row",
        lambda c: 2.0 * c.B * (c.S * c.N * c.D * 5 * c.D + 2 * c.S * c.N ** 2 * c.D + c.N ** 2 * c.pair * c.width),
        _attention_bytes,
        (Case("att-seed", "att", 2, 8, 32, 64, 64, 4), Case("att-af2-main", "att", 1, 512, 384, 256, 128, 8),
         Case("att-long", "att", 1, 128, 1024, 256, 128, 8)),
        ((1, 33, 129, 256, 128, 8), (3, 5, 97, 96, 24, 3), (1, 16, 200, 256, 64, 4), (1, 4, 4096, 64, 32, 4),
         (2, 1, 1, 16, 8, 1), (1, 128, 64, 24, 16, 8), (1, 2048, 32, 64, 16, 8), (2, 64, 256, 128, 64, 2))),
    Operation(
        "pwa", _pwa_module, "norm_m",
        ("norm_m.weight", "norm_m.bias", "norm_z.weight", "norm_z.bias", "proj_m.weight", "proj_g.weight",
         "proj_z.weight", "proj_o.weight"), ref.pair_weighted_averaging_reference, _heads, "msa_pair_mask", "pair_row",
        lambda c: 2.0 * c.B * (c.S * c.N * c.D * 3 * c.width * c.head + c.N ** 2 * c.pair * c.width
                               + c.N ** 2 * c.S * c.width * c.head),
        lambda c: 0.0,
        (Case("pwa-seed", "pwa", 2, 8, 32, 64, 32, 4, 8), Case("pwa-boltz", "pwa", 1, 1024, 384, 64, 128, 8, 32),
         Case("pwa-af3", "pwa", 1, 1024, 384, 64, 128, 8, 8), Case("pwa-long", "pwa", 1, 256, 2048, 64, 128, 8, 32)),
        ((1, 1, 129, 64, 128, 8, 8), (2, 300, 61, 32, 16, 3, 8), (3, 17, 97, 48, 16, 4, 3), (1, 2048, 64, 64, 64, 8, 32),
         (1, 16, 1024, 64, 128, 8, 32), (2, 1, 1, 16, 8, 1, 8), (1, 4, 2048, 64, 128, 8, 8))),
    Operation(
        "tri", lambda c, **kw: TriangleAttention(c.D, c.head, c.width, **kw), "layer_norm",
        ("layer_norm.weight", "layer_norm.bias", "linear.weight", *_GATED), ref.triangle_attention_reference, _heads,
        "pair", "pair_row",
        lambda c: 2.0 * c.B * (c.N ** 2 * c.D * 5 * c.width * c.head + 2 * c.N ** 3 * c.width * c.head
                               + c.N ** 2 * c.D * c.width),
        _attention_bytes,
        (Case("tri-seed", "tri", 2, 24, 24, 32, 32, 2, 16), Case("tri-384", "tri", 1, 384, 384, 128, 128, 4, 32),
         Case("tri-768", "tri", 1, 768, 768, 128, 128, 4, 32), Case("tri-2048", "tri", 1, 2048, 2048, 128, 128, 4, 32))),
    Operation(
        "trimul", lambda c, **kw: TriangleMultiplication(c.D, c.width, **kw), "norm_in",
        _linears("norm_in", "p_in", "g_in", "norm_out", "p_out", "g_out"), ref.triangle_multiplication_reference,
        lambda c: {}, "pair", "pair_row",
        lambda c: 2.0 * c.B * (c.N ** 2 * c.D * (4 * c.width + c.D) + c.N ** 3 * c.width + c.N ** 2 * c.width * c.D),
        lambda c: c.B * c.N ** 2 * (4 * c.width + c.D) * 8,  # (the input projections, (B, N, N, 4c + c_z))
        (Case("trimul-seed", "trimul", 2, 24, 24, 32, 32, 16), Case("trimul-384", "trimul", 1, 384, 384, 128, 128, 128),
         Case("trimul-768", "trimul", 1, 768, 768, 128, 128, 128),
         Case("trimul-2048", "trimul", 1, 2048, 2048, 128, 128, 128),
         Case("trimul-4096", "trimul", 1, 4096, 4096, 128, 128, 128))),
    Operation(
        "col", lambda c, **kw: MSAColumnAttention(c.D, c.head, c.width, **kw), "_msa_att.layer_norm_m",
        ("_msa_att.layer_norm_m.weight", "_msa_att.layer_norm_m.bias",
         *(f"_msa_att.{path}" for path in _GATED)), ref.msa_column_attention_reference, _heads, "msa", "residue",
        lambda c: 2.0 * c.B * (c.S * c.N * c.D * 5 * c.width * c.head + 2 * c.N * c.S ** 2 * c.width * c.head),
        lambda c: c.B * c.N * c.width * c.S ** 2 * 8,  # (the weights of each column, (B, N, h, S, S))
        (Case("col-seed", "col", 2, 8, 32, 64, 0, 4, 16), Case("col-af2", "col", 1, 512, 384, 256, 0, 8, 32))),
    Operation(
        "gcol", lambda c, **kw: MSAColumnGlobalAttention(c.D, c.head, c.width, eps=1e-8, **kw), "layer_norm_m",
        ("layer_norm_m.weight", "layer_norm_m.bias",
         *(f"global_attention.linear_{name}.{kind}" for name in "qkvgo" for kind in ("weight", "bias"))),
        ref.msa_column_global_attention_reference, lambda c: {"num_heads": c.width, "eps": 1e-8}, "msa", "residue",
        # (every row's gate, query, key, value and output; the columns' logits and sums)
        lambda c: 2.0 * c.B * (c.S * c.N * c.D * (3 * c.width * c.head + 2 * c.head) + 2 * c.N * c.S * c.width * c.head),
        lambda c: 0.0,
        (Case("gcol-seed", "gcol", 2, 8, 32, 64, 0, 4, 16),
         Case("gcol-af2-extra", "gcol", 1, 1024, 384, 64, 0, 8, 8),  # AF2's extra-MSA stack in training
         Case("gcol-af2-extra-5120", "gcol", 1, 5120, 384, 64, 0, 8, 8))),  # its inference depth
    Operation(
        "trans", lambda c, **kw: Transition(c.D, c.width, **kw), "norm",
        _linears("norm", "fc1", "fc2", "fc3"), ref.transition_reference, lambda c: {}, "msa", "residue",
        lambda c: 2.0 * c.B * c.S * c.N * c.D * 3 * c.width,
        lambda c: c.B * c.S * c.N * c.width * 8 * 4,  # (a, b, silu(a) and h: (B, S, N, H) each)
        (Case("trans-seed", "trans", 2, 8, 32, 64, 0, 256),
         Case("trans-msa-af3", "trans", 1, 1024, 384, 64, 0, 256),  # the AF3-family MSA module's transition (c_m 64)
         Case("trans-pair-384", "trans", 1, 384, 384, 128, 0, 512),  # the Pairformer's pair transition (c_z 128)
         Case("trans-pair-768", "trans", 1, 768, 768, 128, 0, 512))),
    Operation(
        "apb", lambda c, **kw: AttentionPairBias(c.D, c.pair, c.width, **kw), "proj_z.0",
        ("proj_q.weight", "proj_q.bias", "proj_k.weight", "proj_v.weight", "proj_g.weight", "proj_o.weight",
         "proj_z.0.weight", "proj_z.0.bias", "proj_z.1.weight"), ref.attention_pair_bias_reference, _heads,
        "single_pair", "residue",
        lambda c: 2.0 * c.B * (5 * c.N * c.D * c.D + 2 * c.N ** 2 * c.D + c.N ** 2 * c.pair * c.width),
        lambda c: c.B * c.width * c.N ** 2 * 8,  # (the logits, (B, h, N, N))
        (Case("apb-seed", "apb", 2, 1, 32, 64, 32, 4),
         Case("apb-384", "apb", 1, 1, 384, 384, 128, 16),  # the Pairformer's single track (c_s 384, 16 heads)
         Case("apb-1024", "apb", 1, 1, 1024, 384, 128, 16))),
)}


def operation(case: Case) -> Operation:
    """The declaration of a case's operation."""
    return OPERATIONS[case.op]


def random_inputs(case: Case, generator: torch.Generator, zero_frac: float,
                  fully_masked: bool) -> tuple[torch.Tensor, ...]:
    """A case's inputs in float32 on the CPU, in the order its module takes them (see `Operation.inputs`)."""
    op = operation(case)
    if op.inputs == "single_pair":
        single = torch.randn(case.B, case.N, case.D, generator=generator)
        mask = (torch.rand(case.B, case.N, generator=generator) >= zero_frac).float()
        if fully_masked:
            mask[:, case.N // 2] = 0
        return single, torch.randn(case.B, case.N, case.N, case.pair, generator=generator), mask
    if op.inputs == "pair":
        first = torch.randn(case.B, case.N, case.N, case.D, generator=generator)
        mask = (torch.rand(case.B, case.N, case.N, generator=generator) >= zero_frac).float()
    else:
        first = torch.randn(case.B, case.S, case.N, case.D, generator=generator)
        mask = (torch.rand(case.B, case.S, case.N, generator=generator) >= zero_frac).float()
    if op.inputs == "msa_pair_mask":
        mask = (torch.rand(case.B, case.N, case.N, generator=generator) >= zero_frac).float()
    if fully_masked:
        if op.fully_masked == "residue":
            mask[:, :, case.N // 2] = 0
        elif op.fully_masked == "row":
            mask[:, case.S // 2, :] = 0
        else:
            mask[:, case.N // 2] = 0
    if op.inputs in ("pair", "msa"):
        return first, mask
    return first, torch.randn(case.B, case.N, case.N, case.pair, generator=generator), mask

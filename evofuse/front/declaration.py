"""What every operation's declaration (`ops/<operation>/declaration.py`) is made of: the suite's shapes (`Case`) and
the operation's record (`Operation`), which the suite, `evofuse check`, the benchmark and the cross-cutting tests read,
and the helpers the records share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn


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


def linears(*names: str) -> tuple[str, ...]:
    """The weight and bias paths of the named linear submodules (or LayerNorms), in order."""
    return tuple(f"{name}.{kind}" for name in names for kind in ("weight", "bias"))


def heads(case: Case) -> dict:
    """The options of an operation whose only one is num_heads, the case's width."""
    return {"num_heads": case.width}


def attention_bytes(case: Case) -> float:
    """The float64 reference's attention weights, (B, S, h, N, N)."""
    return case.B * case.S * case.width * case.N ** 2 * 8


# OpenFold's gated attention's parameters (`parts.GatedAttention`) under a module's `mha`
GATED = ("mha.linear_q.weight", "mha.linear_k.weight", "mha.linear_v.weight", "mha.linear_g.weight",
          "mha.linear_g.bias", "mha.linear_o.weight", "mha.linear_o.bias")

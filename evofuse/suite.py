"""The benchmark and check suite (the shapes of the AF2 and AF3 trunks, declared by each operation in
`evofuse.operations`), and seeded random modules and inputs for it."""

from __future__ import annotations

import torch

from .operations import OPERATIONS, Case, operation, random_inputs

__all__ = ["Case", "find_case", "make_inputs", "make_module", "seed_cases", "suite_cases"]


def suite_cases() -> tuple[Case, ...]:
    """Every registered operation's cases, in the registry's order (read at each call: an operation registered
    later is in)."""
    return tuple(case for op in OPERATIONS.values() for case in op.cases)


def seed_cases() -> tuple[Case, ...]:
    """Each operation's smallest case (named "<op>-seed")."""
    return tuple(c for c in suite_cases() if c.name.endswith("-seed"))


def find_case(name: str) -> Case:
    """The suite case of that name; a KeyError naming the known ones otherwise."""
    by_name = {c.name: c for c in suite_cases()}
    if name not in by_name:
        raise KeyError(f"unknown case {name!r}; the suite's: {sorted(by_name)}")
    return by_name[name]


def make_module(case: Case, seed: int = 0, **kwargs) -> torch.nn.Module:
    """The evofuse module of a case with seeded weights; its LayerNorm's parameters are perturbed too."""
    g = torch.Generator().manual_seed(seed)
    op = operation(case)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mod = op.build(case, **kwargs)
    norm = mod.get_submodule(op.norm)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.2 * torch.randn(norm.weight.shape, generator=g))
        norm.bias.copy_(0.2 * torch.randn(norm.bias.shape, generator=g))
    return mod


def make_inputs(case: Case, device, dtype, seed: int = 0, zero_frac: float = 0.1,
                fully_masked: bool = True) -> tuple[torch.Tensor, ...]:
    """Random inputs of a case (`evofuse.operations.random_inputs`): the MSA or the pair in `dtype`, a pair where the
    operation takes one, then the mask (float 0/1, ~zero_frac zeros): an MSA mask (B, S, N), or a pair mask (B, N, N)
    for pair-weighted averaging and the pair stack.

    With fully_masked, one residue of the Outer Product Mean, the column attentions and the transition is masked in
    every row, one MSA row of the attention has every key masked, and one residue i of pair-weighted averaging and of
    the pair stack has every pair masked.
    """
    inputs = random_inputs(case, torch.Generator().manual_seed(seed), zero_frac, fully_masked)
    return tuple(t.to(device) if k == len(inputs) - 1 else t.to(device=device, dtype=dtype)
                 for k, t in enumerate(inputs))

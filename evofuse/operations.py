"""The registry of operations: `PACKAGES` names each operation's package, whose `declaration.py` declares it once
(its functional form, module, reference, options and suite cases; `evofuse.front.declaration`), and `OPERATIONS` maps
each one's key to its record. `evofuse.suite`, the check and the benchmark read it and hold no per-operation switch."""

from __future__ import annotations

import importlib

import torch

from .front.declaration import Case, Operation

__all__ = ["OPERATIONS", "PACKAGES", "REFERENCE_BYTES", "Case", "Operation", "flops", "operation", "random_inputs",
           "reference_fits"]

# the registry: one line per operation (its package under evofuse/ops)
PACKAGES = (
    "outer_product_mean",
    "row_attention",
    "pair_weighted_averaging",
    "triangle_attention",
    "triangle_multiplication",
    "msa_column_attention",
    "msa_column_global_attention",
    "transition",
    "attention_pair_bias",
)
OPERATIONS: dict[str, Operation] = {
    record.key: record for record in (importlib.import_module(f".ops.{name}.declaration", __package__).OPERATION
                                      for name in PACKAGES)}
REFERENCE_BYTES = 16 * 2**30  # the float64 reference's largest tensor where a case's error is measured


def operation(case: Case) -> Operation:
    """The declaration of a case's operation."""
    return OPERATIONS[case.op]


def flops(case: Case) -> float:
    """A case's forward floating-point operations of the fused algorithm (the matrix products)."""
    return operation(case).flops(case)


def reference_fits(case: Case) -> bool:
    """Whether the float64 reference's largest tensor takes at most 16 GiB: where it does not (tri-2048: 256 GiB) no
    error against it is measured."""
    return operation(case).reference_bytes(case) <= REFERENCE_BYTES


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

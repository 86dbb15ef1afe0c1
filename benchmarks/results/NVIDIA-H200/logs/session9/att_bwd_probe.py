"""Session 9 probe: the row attention backward's variants on a training step, kernel by kernel.

python3 att_bwd_probe.py VARIANT DTYPE [PER_SM]: VARIANT fused (dq, dk, dv in one persistent kernel),
trans (run 2 only: dq kernel + dk/dv on transposed tiles), old (dq kernel + dk/dv kernel; from run 3 the
keys kernel without DQ); one process a variant.
"""
import sys

import torch

import evofuse.ops.row_attention as ra
from evofuse.suite import SUITE

sys.path.insert(0, "benchmarks")
from breakdown import breakdown  # noqa: E402

variant, dtype = sys.argv[1], getattr(torch, sys.argv[2])
ra.FUSED_DQ = variant == "fused"
if len(sys.argv) > 3:
    ra.KEYS_PROGRAMS_PER_SM = int(sys.argv[3])
print(f"== {variant} {dtype} per_sm={ra.KEYS_PROGRAMS_PER_SM}")
breakdown(next(c for c in SUITE if c.name == "att-af2-main"), dtype, train=True)

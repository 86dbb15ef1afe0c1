"""Pair-weighted averaging: `kernels` (Triton), `configs` (their tiles, as data), `op` (the custom ops with their
fakes and the backward)."""

"""Pair-weighted averaging: `kernels` (Triton), `configs` (their tiles, as data), `op` (the custom ops with their
fakes and the backward)."""

from .op import fused, pair_weighted_averaging, pair_weighted_averaging_op

__all__ = ["fused", "pair_weighted_averaging", "pair_weighted_averaging_op"]

"""The Outer Product Mean: `kernels` (Triton), `configs` (their tiles, as data), `op` (the custom op with its
fake and its backward)."""

from .op import fused, outer_product_mean, outer_product_mean_op

__all__ = ["fused", "outer_product_mean", "outer_product_mean_op"]

"""Triangle attention: `op` (the custom op with its fake and its backward) on the row-attention kernels and tiles
(`..row_attention.kernels`, `..row_attention.configs`) and the shared LayerNorm + linear kernel."""

from .op import joined_projections, triangle_attention, triangle_attention_op

__all__ = ["joined_projections", "triangle_attention", "triangle_attention_op"]

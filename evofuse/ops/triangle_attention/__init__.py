"""Triangle attention: `op` (the custom op with its fake and its backward) on the attention core of
`evofuse.stages.attention` and the shared LayerNorm + linear stage."""

from .op import joined_projections, triangle_attention, triangle_attention_op, triangle_bias, triangle_bias_op

__all__ = ["joined_projections", "triangle_attention", "triangle_attention_op", "triangle_bias", "triangle_bias_op"]

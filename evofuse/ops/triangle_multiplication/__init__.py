"""The triangle multiplicative update: `op` (the custom op with its fake and its backward) on the shared LayerNorm +
linear kernel and cuBLAS's batched products."""

from .op import joined_inputs, triangle_multiplication, triangle_multiplication_op

__all__ = ["joined_inputs", "triangle_multiplication", "triangle_multiplication_op"]

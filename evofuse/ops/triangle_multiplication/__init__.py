"""The triangle multiplicative update: `op` (the custom op with its fake and its backward) on the shared LayerNorm +
linear kernel and cuBLAS's batched products."""

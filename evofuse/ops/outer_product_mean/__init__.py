"""The Outer Product Mean: `kernels` (Triton), `configs` (their tiles, as data), `op` (the custom op with its
fake and its backward)."""

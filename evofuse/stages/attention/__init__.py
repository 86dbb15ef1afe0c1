"""The gated attention core that row, triangle and column attention compose: `kernels` (Triton), `configs` (their
tiles, as data), `core` (the forward's launch and the backward's custom op)."""

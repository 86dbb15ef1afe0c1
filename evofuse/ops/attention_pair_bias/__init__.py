"""Attention with pair bias over the single representation: `op` (the custom op with its fake and its backward), on
the attention core of `evofuse.stages.attention`."""

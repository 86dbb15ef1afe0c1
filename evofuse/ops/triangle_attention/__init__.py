"""Triangle attention: `op` (the custom op with its fake and its backward) on the attention core of
`evofuse.stages.attention` and the shared LayerNorm + linear stage."""

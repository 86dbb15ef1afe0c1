"""MSA row attention with pair bias: `op` (the custom op with its fake and its backward), on the attention core of
`evofuse.stages.attention`."""

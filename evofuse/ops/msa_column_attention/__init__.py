"""MSA column attention: `op` (the custom op with its fake and its backward) on row attention's kernels, tiles and
core backward, with no bias."""

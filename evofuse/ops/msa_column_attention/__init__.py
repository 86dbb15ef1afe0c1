"""MSA column attention: `op` (the custom op with its fake and its backward) on row attention's kernels, tiles and
core backward, with no bias."""

from .op import msa_column_attention, msa_column_attention_op

__all__ = ["msa_column_attention", "msa_column_attention_op"]

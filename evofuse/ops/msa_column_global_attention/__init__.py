"""MSA global column attention (AF2 Algorithm 19): `op` (the custom op with its fake and its backward) on the shared
LayerNorm + projection kernel and batched products; it has no kernels of its own."""

from ...stages.layer_norm_linear import joined_bias
from .op import msa_column_global_attention, msa_column_global_attention_op

__all__ = ["joined_bias", "msa_column_global_attention", "msa_column_global_attention_op"]

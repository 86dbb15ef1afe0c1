"""MSA row attention with pair bias: `op` (the custom op with its fake and its backward), on the attention core of
`evofuse.stages.attention`."""

from ...stages.attention.core import fused
from .op import joined_qkvg, row_attention, row_attention_op

__all__ = ["fused", "joined_qkvg", "row_attention", "row_attention_op"]

"""MSA row attention with pair bias: `kernels` (Triton), `configs` (their tiles, as data), `op` (the custom ops
with their fakes and the backward)."""

from .op import fused, joined_qkvg, row_attention, row_attention_op

__all__ = ["fused", "joined_qkvg", "row_attention", "row_attention_op"]

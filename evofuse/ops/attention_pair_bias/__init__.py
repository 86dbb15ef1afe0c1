"""Attention with pair bias over the single representation: `op` (the custom op with its fake and its backward), on
the attention core of `evofuse.stages.attention`."""

from ...stages.attention.core import fused
from .op import attention_pair_bias, attention_pair_bias_op

__all__ = ["attention_pair_bias", "attention_pair_bias_op", "fused"]

"""The transition (LayerNorm, then a SwiGLU or ReLU MLP): `kernels` (Triton), `configs` (their tiles, as data), `op`
(the custom ops with their fakes and the backward)."""

from ...stages.layer_norm_linear import joined_bias
from .op import transition, transition_op

__all__ = ["joined_bias", "transition", "transition_op"]

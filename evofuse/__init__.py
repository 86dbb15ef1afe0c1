"""evofuse: fused Triton kernels for the MSA operations of AlphaFold-family trunks.

`OuterProductMean`, `MSARowAttentionWithPairBias`, `MSAColumnAttention`, `MSAColumnGlobalAttention`,
`PairWeightedAveraging`, `TriangleAttention`, `TriangleMultiplication`, `Transition` and `AttentionPairBias` are
drop-in modules; `outer_product_mean`, `msa_row_attention`, `msa_column_attention`, `msa_column_global_attention`,
`pair_weighted_averaging`, `triangle_attention`, `triangle_multiplication`, `transition` and `attention_pair_bias`
their functional forms;
`evofuse.reference` the plain-PyTorch definitions; `evofuse.sharding` the ops' rules for distributed tensors and
`evofuse.ring` ring attention's entry points (imported on their own).
Importing registers every operation's torch.library ops (`torch.ops.evofuse.*`, where Triton is installed), so
that a program exported with them loads after `import evofuse`; it touches no GPU and compiles no kernel.
"""

from .functional import (
    attention_pair_bias,
    msa_column_attention,
    msa_column_global_attention,
    msa_row_attention,
    outer_product_mean,
    pair_weighted_averaging,
    transition,
    triangle_attention,
    triangle_multiplication,
)
from .modules import (
    AttentionPairBias,
    MSAColumnAttention,
    MSAColumnGlobalAttention,
    MSARowAttentionWithPairBias,
    OuterProductMean,
    PairWeightedAveraging,
    Transition,
    TriangleAttention,
    TriangleMultiplication,
)

__version__ = "0.2.0"
__all__ = ["AttentionPairBias", "MSAColumnAttention", "MSAColumnGlobalAttention", "MSARowAttentionWithPairBias",
           "OuterProductMean", "PairWeightedAveraging", "Transition", "TriangleAttention", "TriangleMultiplication",
           "attention_pair_bias", "msa_column_attention", "msa_column_global_attention", "msa_row_attention",
           "outer_product_mean", "pair_weighted_averaging", "transition", "triangle_attention",
           "triangle_multiplication"]

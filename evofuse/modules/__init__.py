"""Drop-in nn.Modules. Parameter names match the seed modules and the models', so their state_dicts load unchanged."""

from ..ops.attention_pair_bias.declaration import AttentionPairBias
from ..ops.msa_column_attention.declaration import MSAColumnAttention
from ..ops.msa_column_global_attention.declaration import MSAColumnGlobalAttention
from ..ops.outer_product_mean.declaration import OuterProductMean
from ..ops.pair_weighted_averaging.declaration import PairWeightedAveraging
from ..ops.row_attention.declaration import MSARowAttentionWithPairBias
from ..ops.transition.declaration import Transition
from ..ops.triangle_attention.declaration import TriangleAttention
from ..ops.triangle_multiplication.declaration import TriangleMultiplication

__all__ = ["AttentionPairBias", "MSAColumnAttention", "MSAColumnGlobalAttention", "MSARowAttentionWithPairBias",
           "OuterProductMean", "PairWeightedAveraging", "Transition", "TriangleAttention", "TriangleMultiplication"]

"""Drop-in nn.Modules. Parameter names match the seed modules and the models', so their state_dicts load unchanged."""

from .columns import MSAColumnAttention, MSAColumnGlobalAttention
from .msa import MSARowAttentionWithPairBias, OuterProductMean, PairWeightedAveraging
from .pair import TriangleAttention, TriangleMultiplication
from .single import AttentionPairBias
from .transition import Transition

__all__ = ["AttentionPairBias", "MSAColumnAttention", "MSAColumnGlobalAttention", "MSARowAttentionWithPairBias",
           "OuterProductMean", "PairWeightedAveraging", "Transition", "TriangleAttention", "TriangleMultiplication"]

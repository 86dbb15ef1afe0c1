"""The public functional API: each operation with its weights passed explicitly.

A call validates its inputs, chooses the path (the fused Triton kernels for CUDA tensors, the PyTorch
reference of `evofuse.reference` otherwise; `impl` or EVOFUSE_IMPL override it), casts the parameters to
the input's dtype (autocast's, under `torch.autocast`, as torch's own layers) and calls the operation's
custom op, which autograd, CUDA graphs and torch.compile see as one node with a registered backward.
`precision` ("default" or "fast") chooses the float32 contract.
"""

from ..ops.attention_pair_bias.declaration import attention_pair_bias
from ..ops.msa_column_attention.declaration import msa_column_attention
from ..ops.msa_column_global_attention.declaration import msa_column_global_attention
from ..ops.outer_product_mean.declaration import outer_product_mean
from ..ops.pair_weighted_averaging.declaration import pair_weighted_averaging
from ..ops.row_attention.declaration import msa_row_attention
from ..ops.transition.declaration import transition
from ..ops.triangle_attention.declaration import triangle_attention
from ..ops.triangle_multiplication.declaration import triangle_multiplication

__all__ = ["attention_pair_bias", "msa_column_attention", "msa_column_global_attention", "msa_row_attention",
           "outer_product_mean", "pair_weighted_averaging", "transition", "triangle_attention",
           "triangle_multiplication"]

"""The public functional API: each operation with its weights passed explicitly.

A call validates its inputs, chooses the path (the fused Triton kernels for CUDA tensors, the PyTorch
reference of `evofuse.reference` otherwise; `impl` or EVOFUSE_IMPL override it), casts the parameters to
the input's dtype (autocast's, under `torch.autocast`, as torch's own layers) and calls the operation's
custom op, which autograd, CUDA graphs and torch.compile see as one node with a registered backward.
`precision` ("default" or "fast") chooses the float32 contract.
"""

from .columns import msa_column_attention, msa_column_global_attention
from .msa import msa_row_attention, outer_product_mean, pair_weighted_averaging
from .pair import triangle_attention, triangle_multiplication
from .single import attention_pair_bias
from .transition import transition

__all__ = ["attention_pair_bias", "msa_column_attention", "msa_column_global_attention", "msa_row_attention",
           "outer_product_mean", "pair_weighted_averaging", "transition", "triangle_attention",
           "triangle_multiplication"]

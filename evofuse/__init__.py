"""evofuse: fused Triton kernels for the MSA operations of AlphaFold-family trunks.

`OuterProductMean` and `MSARowAttentionWithPairBias` are drop-in modules; `outer_product_mean` and
`msa_row_attention` their functional forms; `evofuse.reference` the plain-PyTorch definitions.
Importing touches no GPU and compiles no kernel.
"""

from .functional import msa_row_attention, outer_product_mean
from .modules import MSARowAttentionWithPairBias, OuterProductMean

__version__ = "0.2.0"
__all__ = ["MSARowAttentionWithPairBias", "OuterProductMean", "msa_row_attention", "outer_product_mean"]

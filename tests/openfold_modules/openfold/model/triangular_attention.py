"""OpenFold's triangle attention, as its triangular_attention.py computes it (without the chunked paths)."""

from functools import partialmethod

from torch import nn

from .primitives import Attention, LayerNorm, Linear


class TriangleAttention(nn.Module):
    def __init__(self, c_in, c_hidden, no_heads, starting=True, inf=1e9):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads, self.starting, self.inf = c_in, c_hidden, no_heads, starting, inf
        self.layer_norm = LayerNorm(c_in)
        self.linear = Linear(c_in, no_heads, bias=False, init="normal")
        self.mha = Attention(c_in, c_in, c_in, c_hidden, no_heads)

    def forward(self, x, mask=None, chunk_size=None, use_memory_efficient_kernel=False,
                use_deepspeed_evo_attention=False, use_lma=False, inplace_safe=False):
        if mask is None:
            mask = x.new_ones(x.shape[:-1])
        if not self.starting:
            x = x.transpose(-2, -3)
            mask = mask.transpose(-1, -2)
        x = self.layer_norm(x)  # [*, I, J, C_in]
        mask_bias = (self.inf * (mask - 1))[..., :, None, None, :]  # [*, I, 1, 1, J]
        triangle_bias = self.linear(x)  # [*, I, J, H]
        triangle_bias = triangle_bias.permute(*range(triangle_bias.dim() - 3), -1, -3, -2).unsqueeze(-4)  # [*, 1, H, I, J]
        x = self.mha(q_x=x, kv_x=x, biases=[mask_bias, triangle_bias])
        if not self.starting:
            x = x.transpose(-2, -3)
        return x


TriangleAttentionStartingNode = TriangleAttention


class TriangleAttentionEndingNode(TriangleAttention):
    __init__ = partialmethod(TriangleAttention.__init__, starting=False)

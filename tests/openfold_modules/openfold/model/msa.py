"""OpenFold's MSA row attention with pair bias and column attention, as its msa.py computes them (without the
chunked paths)."""

from torch import nn

from .primitives import Attention, LayerNorm, Linear


class MSAAttention(nn.Module):
    def __init__(self, c_in, c_hidden, no_heads, pair_bias=False, c_z=None, inf=1e9):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads = c_in, c_hidden, no_heads
        self.pair_bias, self.c_z, self.inf = pair_bias, c_z, inf
        self.layer_norm_m = LayerNorm(c_in)
        self.layer_norm_z = None
        self.linear_z = None
        if pair_bias:
            self.layer_norm_z = LayerNorm(c_z)
            self.linear_z = Linear(c_z, no_heads, bias=False, init="normal")
        self.mha = Attention(c_in, c_in, c_in, c_hidden, no_heads)

    def forward(self, m, z=None, mask=None, chunk_size=None, use_memory_efficient_kernel=False,
                use_deepspeed_evo_attention=False, use_lma=False, use_flash=False, inplace_safe=False,
                _chunk_logits=None, _checkpoint_chunks=None):
        if mask is None:
            mask = m.new_ones(m.shape[:-1])
        mask_bias = (self.inf * (mask - 1))[..., :, None, None, :]  # [*, S, 1, 1, N]
        m = self.layer_norm_m(m)
        biases = [mask_bias]
        if self.pair_bias:
            z = self.linear_z(self.layer_norm_z(z))  # [*, N, N, H]
            biases.append(z.permute(*range(z.dim() - 3), -1, -3, -2).unsqueeze(-4))  # [*, 1, H, N, N]
        return self.mha(q_x=m, kv_x=m, biases=biases)


class MSARowAttentionWithPairBias(MSAAttention):
    def __init__(self, c_m, c_z, c_hidden, no_heads, inf=1e9):
        super().__init__(c_m, c_hidden, no_heads, pair_bias=True, c_z=c_z, inf=inf)


class MSAColumnAttention(nn.Module):
    """Attention over the MSA rows within each residue's column: MSAAttention without pair bias on the transposed
    MSA."""

    def __init__(self, c_m, c_hidden, no_heads, inf=1e9):
        super().__init__()
        self.c_m, self.c_hidden, self.no_heads, self.inf = c_m, c_hidden, no_heads, inf
        self._msa_att = MSAAttention(c_m, c_hidden, no_heads, pair_bias=False, inf=inf)

    def forward(self, m, mask=None, chunk_size=None, inplace_safe=False, use_lma=False, use_flash=False):
        m = m.transpose(-2, -3)  # [*, N_res, N_seq, C_in]
        if mask is not None:
            mask = mask.transpose(-1, -2)
        m = self._msa_att(m, mask=mask, chunk_size=chunk_size, use_lma=use_lma, use_flash=use_flash)
        return m.transpose(-2, -3)

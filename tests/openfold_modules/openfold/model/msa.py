"""OpenFold's MSA row attention with pair bias, column attention and global column attention, as its msa.py computes
them (without the chunked paths)."""

import torch
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


class GlobalAttention(nn.Module):
    """AF2 Algorithm 19's attention: one query a head from the masked mean of the rows, one key and value a row."""

    def __init__(self, c_in, c_hidden, no_heads, inf, eps):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads, self.inf, self.eps = c_in, c_hidden, no_heads, inf, eps
        self.linear_q = Linear(c_in, c_hidden * no_heads, bias=False, init="glorot")
        self.linear_k = Linear(c_in, c_hidden, bias=False, init="glorot")
        self.linear_v = Linear(c_in, c_hidden, bias=False, init="glorot")
        self.linear_g = Linear(c_in, c_hidden * no_heads, init="gating")
        self.linear_o = Linear(c_hidden * no_heads, c_in, init="final")
        self.sigmoid = nn.Sigmoid()

    def forward(self, m, mask, use_lma=False):
        q = torch.sum(m * mask.unsqueeze(-1), dim=-2) / (torch.sum(mask, dim=-1)[..., None] + self.eps)  # [*, N, C]
        q = self.linear_q(q)
        q *= self.c_hidden ** (-0.5)
        q = q.view(q.shape[:-1] + (self.no_heads, -1))  # [*, N_res, H, C_hidden]
        k = self.linear_k(m)  # [*, N_res, N_seq, C_hidden]
        v = self.linear_v(m)
        bias = (self.inf * (mask - 1))[..., :, None, :]
        a = torch.matmul(q, k.transpose(-1, -2))  # [*, N_res, H, N_seq]
        a += bias
        a = torch.softmax(a, dim=-1)
        o = torch.matmul(a, v)  # [*, N_res, H, C_hidden]
        g = self.sigmoid(self.linear_g(m))
        g = g.view(g.shape[:-1] + (self.no_heads, -1))  # [*, N_res, N_seq, H, C_hidden]
        o = o.unsqueeze(-3) * g
        o = o.reshape(o.shape[:-2] + (-1,))
        return self.linear_o(o)


class MSAColumnGlobalAttention(nn.Module):
    """Global attention over the MSA rows within each residue's column (the extra-MSA stack's)."""

    def __init__(self, c_in, c_hidden, no_heads, inf=1e9, eps=1e-10):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads, self.inf, self.eps = c_in, c_hidden, no_heads, inf, eps
        self.layer_norm_m = LayerNorm(c_in)
        self.global_attention = GlobalAttention(c_in=c_in, c_hidden=c_hidden, no_heads=no_heads, inf=inf, eps=eps)

    def forward(self, m, mask=None, chunk_size=None, use_lma=False):
        if mask is None:
            mask = torch.ones(m.shape[:-1], dtype=m.dtype, device=m.device).detach()
        m = m.transpose(-2, -3)  # [*, N_res, N_seq, C_in]
        mask = mask.transpose(-1, -2)
        m = self.layer_norm_m(m)
        m = self.global_attention(m=m, mask=mask, use_lma=use_lma)
        return m.transpose(-2, -3)

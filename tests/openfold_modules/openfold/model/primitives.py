"""OpenFold's LayerNorm, Linear and gated multi-head Attention, as its primitives.py computes them."""

import math

import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, c_in, eps=1e-5):
        super().__init__()
        self.c_in = (c_in,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c_in))
        self.bias = nn.Parameter(torch.zeros(c_in))

    def forward(self, x):
        return nn.functional.layer_norm(x, self.c_in, self.weight, self.bias, self.eps)


class Linear(nn.Linear):
    def __init__(self, in_dim, out_dim, bias=True, init="default"):
        super().__init__(in_dim, out_dim, bias=bias)


class Attention(nn.Module):
    """Multi-head attention over q_x and kv_x with additive biases and a sigmoid gate on the output."""

    def __init__(self, c_q, c_k, c_v, c_hidden, no_heads, gating=True):
        super().__init__()
        self.c_hidden, self.no_heads, self.gating = c_hidden, no_heads, gating
        self.linear_q = Linear(c_q, c_hidden * no_heads, bias=False, init="glorot")
        self.linear_k = Linear(c_k, c_hidden * no_heads, bias=False, init="glorot")
        self.linear_v = Linear(c_v, c_hidden * no_heads, bias=False, init="glorot")
        self.linear_o = Linear(c_hidden * no_heads, c_q, init="final")
        self.linear_g = Linear(c_q, c_hidden * no_heads, init="gating") if gating else None
        self.sigmoid = nn.Sigmoid()

    def _heads(self, t):  # [*, Q, H * C] -> [*, H, Q, C]
        return t.view(t.shape[:-1] + (self.no_heads, -1)).transpose(-2, -3)

    def forward(self, q_x, kv_x, biases=None, use_memory_efficient_kernel=False, use_deepspeed_evo_attention=False,
                use_lma=False, lma_q_chunk_size=1024, lma_kv_chunk_size=4096, use_flash=False, flash_mask=None):
        q = self._heads(self.linear_q(q_x)) / math.sqrt(self.c_hidden)
        k = self._heads(self.linear_k(kv_x))
        v = self._heads(self.linear_v(kv_x))
        a = torch.matmul(q, k.transpose(-1, -2))
        for b in biases or []:
            a = a + b
        a = torch.softmax(a, dim=-1)
        o = torch.matmul(a, v).transpose(-2, -3)  # [*, Q, H, C]
        if self.linear_g is not None:
            g = self.sigmoid(self.linear_g(q_x))
            o = o * g.view(g.shape[:-1] + (self.no_heads, -1))
        return self.linear_o(o.reshape(o.shape[:-2] + (-1,)))

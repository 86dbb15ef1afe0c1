"""OpenFold's Outer Product Mean, as its outer_product_mean.py computes it (without the chunked path)."""

import torch
from torch import nn

from .primitives import LayerNorm, Linear


class OuterProductMean(nn.Module):
    def __init__(self, c_m, c_z, c_hidden, eps=1e-3):
        super().__init__()
        self.c_m, self.c_z, self.c_hidden, self.eps = c_m, c_z, c_hidden, eps
        self.layer_norm = LayerNorm(c_m)
        self.linear_1 = Linear(c_m, c_hidden)
        self.linear_2 = Linear(c_m, c_hidden)
        self.linear_out = Linear(c_hidden ** 2, c_z, init="final")

    def forward(self, m, mask=None, chunk_size=None, inplace_safe=False):
        if mask is None:
            mask = m.new_ones(m.shape[:-1])
        ln = self.layer_norm(m)
        mask = mask.unsqueeze(-1)
        a = (self.linear_1(ln) * mask).transpose(-2, -3)  # [*, N, S, C]
        b = (self.linear_2(ln) * mask).transpose(-2, -3)
        outer = torch.einsum("...bac,...dae->...bdce", a, b)
        outer = self.linear_out(outer.reshape(outer.shape[:-2] + (-1,)))
        norm = torch.einsum("...abc,...adc->...bdc", mask, mask) + self.eps
        return outer / norm

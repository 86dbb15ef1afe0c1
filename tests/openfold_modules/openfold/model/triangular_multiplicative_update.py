"""OpenFold's triangle multiplicative update, as its triangular_multiplicative_update.py computes it (without the
in-place inference path): the projections with biases, a and b gated and masked, their product per channel."""

from functools import partialmethod

import torch
from torch import nn

from .primitives import LayerNorm, Linear


class TriangleMultiplicativeUpdate(nn.Module):
    def __init__(self, c_z, c_hidden, _outgoing=True):
        super().__init__()
        self.c_z, self.c_hidden, self._outgoing = c_z, c_hidden, _outgoing
        self.linear_a_p = Linear(c_z, c_hidden)
        self.linear_a_g = Linear(c_z, c_hidden, init="gating")
        self.linear_b_p = Linear(c_z, c_hidden)
        self.linear_b_g = Linear(c_z, c_hidden, init="gating")
        self.linear_g = Linear(c_z, c_z, init="gating")
        self.linear_z = Linear(c_hidden, c_z, init="final")
        self.layer_norm_in = LayerNorm(c_z)
        self.layer_norm_out = LayerNorm(c_hidden)
        self.sigmoid = nn.Sigmoid()

    def _combine_projections(self, a, b):
        # outgoing: [*, C, I, K] @ [*, C, K, J]; incoming: [*, C, I, K]^T-wise over the first index
        if self._outgoing:
            a, b = a.permute(*range(a.dim() - 3), -1, -3, -2), b.permute(*range(b.dim() - 3), -1, -2, -3)
        else:
            a, b = a.permute(*range(a.dim() - 3), -1, -2, -3), b.permute(*range(b.dim() - 3), -1, -3, -2)
        p = torch.matmul(a, b)
        return p.permute(*range(p.dim() - 3), -2, -1, -3)

    def forward(self, z, mask=None, inplace_safe=False, _add_with_inplace=False, _inplace_chunk_size=256):
        if mask is None:
            mask = z.new_ones(z.shape[:-1])
        mask = mask.unsqueeze(-1)
        z = self.layer_norm_in(z)
        a = mask * self.sigmoid(self.linear_a_g(z)) * self.linear_a_p(z)
        b = mask * self.sigmoid(self.linear_b_g(z)) * self.linear_b_p(z)
        x = self._combine_projections(a, b)
        x = self.layer_norm_out(x)
        x = self.linear_z(x)
        return x * self.sigmoid(self.linear_g(z))


class TriangleMultiplicationOutgoing(TriangleMultiplicativeUpdate):
    __init__ = partialmethod(TriangleMultiplicativeUpdate.__init__, _outgoing=True)


class TriangleMultiplicationIncoming(TriangleMultiplicativeUpdate):
    __init__ = partialmethod(TriangleMultiplicativeUpdate.__init__, _outgoing=False)

"""OpenFold's MSATransition, as its evoformer.py computes it (AF2 Algorithm 9): LayerNorm, linear_1, ReLU, linear_2,
the output times the MSA mask (ones where there is none)."""

from torch import nn

from .primitives import LayerNorm, Linear


class MSATransition(nn.Module):
    def __init__(self, c_m, n):
        super().__init__()
        self.c_m, self.n = c_m, n
        self.layer_norm = LayerNorm(c_m)
        self.linear_1 = Linear(c_m, n * c_m, init="relu")
        self.relu = nn.ReLU()
        self.linear_2 = Linear(n * c_m, c_m, init="final")

    def _transition(self, m, mask):
        m = self.layer_norm(m)
        m = self.linear_1(m)
        m = self.relu(m)
        return self.linear_2(m) * mask

    def forward(self, m, mask=None, chunk_size=None):
        if mask is None:
            mask = m.new_ones(m.shape[:-1])
        return self._transition(m, mask.unsqueeze(-1))

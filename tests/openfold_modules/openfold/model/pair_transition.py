"""OpenFold's PairTransition, as its pair_transition.py computes it (AF2 Algorithm 15): LayerNorm, linear_1, ReLU,
linear_2, the output times the pair mask (ones where there is none)."""

from torch import nn

from .primitives import LayerNorm, Linear


class PairTransition(nn.Module):
    def __init__(self, c_z, n):
        super().__init__()
        self.c_z, self.n = c_z, n
        self.layer_norm = LayerNorm(c_z)
        self.linear_1 = Linear(c_z, n * c_z, init="relu")
        self.relu = nn.ReLU()
        self.linear_2 = Linear(n * c_z, c_z, init="final")

    def _transition(self, z, mask):
        z = self.layer_norm(z)
        z = self.linear_1(z)
        z = self.relu(z)
        return self.linear_2(z) * mask

    def forward(self, z, mask=None, chunk_size=None):
        if mask is None:
            mask = z.new_ones(z.shape[:-1])
        return self._transition(z, mask.unsqueeze(-1))

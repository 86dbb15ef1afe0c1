"""The seed's modules, written from the published module definitions (not from evofuse's code), so that
the tests can load their state_dicts into evofuse and compare."""

import math

import torch
from torch import nn


class SeedOuterProductMean(nn.Module):
    def __init__(self, msa_dim, pair_dim, hidden_dim=32):
        super().__init__()
        self.layer_norm = nn.LayerNorm(msa_dim)
        self.proj_a = nn.Linear(msa_dim, hidden_dim)
        self.proj_b = nn.Linear(msa_dim, hidden_dim)
        self.out_proj = nn.Linear(hidden_dim * hidden_dim, pair_dim)
        self.hidden_dim = hidden_dim

    def forward(self, msa_repr, msa_mask):
        x = self.layer_norm(msa_repr)
        mask = msa_mask.unsqueeze(-1)
        a = self.proj_a(x) * mask
        b = self.proj_b(x) * mask
        outer = torch.einsum("bsih,bsjk->bijhk", a, b)
        denom = msa_mask.sum(dim=1).unsqueeze(-1).unsqueeze(-1).unsqueeze(-1).clamp(min=1)
        outer = outer / denom
        B, N1, N2, H1, H2 = outer.shape
        return self.out_proj(outer.reshape(B, N1, N2, H1 * H2))


class SeedMSARowAttentionWithPairBias(nn.Module):
    def __init__(self, msa_dim, pair_dim, num_heads=4, dropout=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = msa_dim // num_heads
        self.layer_norm = nn.LayerNorm(msa_dim)
        self.query = nn.Linear(msa_dim, msa_dim)
        self.key = nn.Linear(msa_dim, msa_dim)
        self.value = nn.Linear(msa_dim, msa_dim)
        self.gate = nn.Linear(msa_dim, msa_dim)
        self.out_proj = nn.Linear(msa_dim, msa_dim)
        self.pair_bias = nn.Linear(pair_dim, num_heads)
        self.dropout = nn.Dropout(dropout)

    def forward(self, msa_repr, pair_repr, msa_mask):
        B, S, N, D = msa_repr.shape
        h, d = self.num_heads, self.head_dim
        x = self.layer_norm(msa_repr)
        q = self.query(x).view(B, S, N, h, d).permute(0, 1, 3, 2, 4)
        k = self.key(x).view(B, S, N, h, d).permute(0, 1, 3, 2, 4)
        v = self.value(x).view(B, S, N, h, d).permute(0, 1, 3, 2, 4)
        g = torch.sigmoid(self.gate(x)).view(B, S, N, h, d).permute(0, 1, 3, 2, 4)
        bias = self.pair_bias(pair_repr).permute(0, 3, 1, 2)
        attn = torch.einsum("bshid,bshjd->bshij", q, k) / math.sqrt(d)
        attn = attn + bias.unsqueeze(1)
        attn = attn.masked_fill(msa_mask[:, :, None, None, :] == 0, -1e9)
        attn = self.dropout(torch.softmax(attn, dim=-1))
        out = g * torch.einsum("bshij,bshjd->bshid", attn, v)
        out = out.permute(0, 1, 3, 2, 4).reshape(B, S, N, D)
        return self.out_proj(out)

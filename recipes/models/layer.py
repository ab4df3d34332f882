"""A pre-norm transformer layer with causal self-attention, for recipes/layer.toml.

Causal attention is what makes padding the sequence dimension safe: a real position never
attends a padded one (padding is appended at the end), so its output does not change.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Layer(nn.Module):
    def __init__(self, d_model: int = 1024, heads: int = 16, ffn: int = 4096):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.o = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.f1, self.f2 = nn.Linear(d_model, ffn), nn.Linear(ffn, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.f2(F.gelu(self.f1(self.n2(x))))


def make_layer(d_model: int = 1024, heads: int = 16, ffn: int = 4096) -> Layer:
    return Layer(d_model, heads, ffn)

"""A tiny causal transformer layer for the model-mode tests (CPU, fp32)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Layer(nn.Module):
    def __init__(self, d_model: int = 32, heads: int = 2, ffn: int = 64, causal: bool = True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.o = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.f1, self.f2 = nn.Linear(d_model, ffn), nn.Linear(ffn, d_model)
        self.register_buffer("gain", torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return (x + self.f2(F.gelu(self.f1(self.n2(x))))) * self.gain


def make_layer(**kwargs: object) -> Layer:
    return Layer(**kwargs)  # type: ignore[arg-type]

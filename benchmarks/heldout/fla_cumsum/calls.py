"""Example arguments and the float64 reference for cumsum.toml (FLA's chunk-local cumsum:
within each chunk of BT = 64 steps along T, the running sum, times scale when given)."""

import torch

B, H, BT = 4, 16, 64


def cumsum_inputs(sizes, dtypes, device="cuda"):
    g = torch.randn(B, sizes["T"], H, device=device, dtype=torch.float32)
    return [g, torch.empty_like(g), 0.5, None, None, sizes["T"]]


def chunk_cumsum(g, scale):
    """float64: the cumsum of each chunk of BT steps along dim 1, times ``scale``."""
    b, t, h = g.shape
    pad = -t % BT
    x = torch.nn.functional.pad(g.double(), (0, 0, 0, pad)).view(b, (t + pad) // BT, BT, h)
    out = x.cumsum(2).view(b, t + pad, h)[:, :t]
    return out if scale is None else out * scale


def cumsum_reference(s, o, scale, cu_seqlens, chunk_indices, T):
    return {"o": chunk_cumsum(s, scale)}

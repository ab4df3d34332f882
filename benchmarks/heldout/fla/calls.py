"""Example arguments and float64 references for the held-out FLA recipes here."""

import torch

B, H, BT = 4, 16, 64  # cumsum.toml: batch, heads, chunk length


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


def lse_inputs(sizes, dtypes, device="cuda"):
    """logsumexp.toml: x [rows, cols] and z [rows, 1] (one block covers a row up to 64k)."""
    x = torch.randn(sizes["n_rows"], sizes["cols"], device=device, dtype=torch.float32)
    return [x, torch.empty(sizes["n_rows"], 1, device=device), 0.5]


def logsumexp(x, scale):
    """float64: log-sum-exp of each row of ``x`` (times ``scale``), shaped [rows, 1]."""
    x = x.double() if scale is None else x.double() * scale
    return torch.logsumexp(x, -1, keepdim=True)


def lse_reference(x, z, scale):
    return {"z": logsumexp(x, scale)}

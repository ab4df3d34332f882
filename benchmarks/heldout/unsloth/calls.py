"""Example arguments and float64 references for the held-out unsloth recipes here."""

import torch

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-6  # rms_layernorm.toml's fixed eps


def rms_inputs(sizes, dtypes, device="cuda"):
    """_rms_layernorm_forward's arguments as Fast_RMS_Layernorm.forward passes them."""
    n, c, t = sizes["n_rows"], sizes["cols"], DT[dtypes["T"]]
    x = torch.randn(n, c, device=device, dtype=t)
    w = torch.randn(c, device=device, dtype=t)
    y = torch.empty_like(x)
    r = torch.empty(n, device=device, dtype=torch.float32)
    return [y, x, w, r]


def rms_norm(x, w):
    """float64: x / rms(x) * w."""
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def rms_reference(y, x, w, r):
    return {"Y": rms_norm(x, w), "r": torch.rsqrt(x.double().pow(2).mean(-1) + EPS)}


def rope_inputs(sizes, dtypes, device="cuda"):
    """_rope_embedding's arguments: Q [seq, heads * head_dim] (batch 1), cos and sin
    [seq, head_dim] (Llama's, the two halves equal), seqlen."""
    n, c, hd, t = sizes["n_rows"], sizes["qcols"], sizes["hd"], DT[dtypes["T"]]
    q = torch.randn(n, c, device=device, dtype=t)
    cos, sin = cos_sin(n, hd, device, t)
    return [q, cos, sin, n]


def cos_sin(seq, hd, device, dtype):
    """Llama's rotary tables: angle pos * 500000^(-2i / hd), the halves repeated."""
    inv = 500000.0 ** (-torch.arange(0, hd, 2, device=device, dtype=torch.float64) / hd)
    angles = torch.arange(seq, device=device, dtype=torch.float64)[:, None] * inv
    angles = torch.cat([angles, angles], -1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rope(q, cos, sin, seqlen):
    """float64: q * cos + rotate_half(q) * sin per head, q [rows, heads * head_dim]."""
    hd = cos.shape[1]
    x = q.double().view(q.shape[0], -1, hd)
    pos = torch.arange(q.shape[0], device=q.device) % seqlen
    c, s = cos.double()[pos][:, None], sin.double()[pos][:, None]
    rot = torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
    return (x * c + rot * s).view(q.shape)


def rope_reference(q, cos, sin, seqlen):
    return {"Q": rope(q, cos, sin, seqlen)}


def swiglu_inputs(sizes, dtypes, device="cuda"):
    """_fg_kernel's arguments: e (gate), g (up), h (out), n_elements."""
    n, t = sizes["n_elements"], DT[dtypes["T"]]
    e = torch.randn(n, device=device, dtype=t)
    return [e, torch.randn_like(e), torch.empty_like(e), n]


def swiglu(e, g):
    """float64: silu(e) * g."""
    return torch.nn.functional.silu(e.double()) * g.double()


def swiglu_reference(e, g, h, n_elements):
    return {"h": swiglu(e, g)}

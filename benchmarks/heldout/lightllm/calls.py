"""Example arguments and float64 references for the held-out lightllm recipe here."""

import torch

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def rotary_inputs(sizes, dtypes, device="cuda"):
    """_rotary_kernel's arguments as rotary_emb_fwd passes them: q (tokens, HEAD_Q, d) and
    k (tokens, HEAD_K, d) rotated in place, cos and sin (tokens, d / 2)."""
    n, hq, hk, d = (sizes[k] for k in ("max_total_len", "HEAD_Q", "HEAD_K", "head_dim"))
    t = DT[dtypes["T"]]
    q = torch.randn(n, hq, d, device=device, dtype=t)
    k = torch.randn(n, hk, d, device=device, dtype=t)
    angle = torch.rand(n, d // 2, device=device) * 6.28
    cos, sin = angle.cos().to(t), angle.sin().to(t)
    strides = [s for a in (q, k, cos, sin) for s in a.stride()]
    return [q, k, cos, sin, *strides, n, hq, hk]


def rotate(x, cos, sin):
    """float64: x's first and second halves rotated by the angles (not interleaved)."""
    half = x.shape[-1] // 2
    x0, x1 = x.double()[..., :half], x.double()[..., half:]
    c, s = cos.double()[:, None, :], sin.double()[:, None, :]
    return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)


def rotary_reference(q, k, cos, sin, *rest):
    return {"Q": rotate(q, cos, sin), "K": rotate(k, cos, sin)}

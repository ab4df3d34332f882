"""Example arguments and float64 references for the held-out Liger recipes here."""

import torch

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-6


def rms_inputs(sizes, dtypes, device="cuda"):
    """_rms_norm_forward_kernel's arguments as rms_norm_forward passes them (Llama mode)."""
    n, c, t = sizes["n_rows"], sizes["n_cols"], DT[dtypes["T"]]
    x = torch.randn(n, c, device=device, dtype=t)
    w = torch.randn(c, device=device, dtype=t)
    y = torch.empty_like(x)
    rstd = torch.empty(n, device=device, dtype=torch.float32)
    return [y, c, x, c, w, 1, rstd, 1, c, EPS, 0.0]


def rms_norm(x, w):
    """float64: x / rms(x) * w (offset 0)."""
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def rms_reference(y, ys, x, xs, w, ws, rstd, rs, n_cols, eps, offset):
    x64 = x.double()
    return {"Y_ptr": rms_norm(x, w),
            "RSTD_ptr": torch.rsqrt(x64.pow(2).mean(-1) + eps)}  # fmt: skip


def swiglu_inputs(sizes, dtypes, device="cuda"):
    """_swiglu_forward_kernel's arguments: a, b, c, the row stride, the gate multiplier."""
    n, c, t = sizes["n_rows"], sizes["cols"], DT[dtypes["T"]]
    a = torch.randn(n, c, device=device, dtype=t)
    return [a, torch.randn_like(a), torch.empty_like(a), c, 1.0]


def swiglu(a, b):
    """float64: silu(a) * b."""
    return torch.nn.functional.silu(a.double()) * b.double()


def swiglu_reference(a, b, c, stride, gate):
    return {"c_ptr": swiglu(a * gate, b)}

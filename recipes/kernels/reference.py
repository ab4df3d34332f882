"""Inputs and references for the example kernels (used by GPU tests and, later, tuning).

``*_inputs(sizes, dtypes)`` returns the kernel's arguments in signature order for the
given sizes (bucket keys and ``sizes`` from the recipe) and dtype binding.
``*_reference(*args)`` returns the expected contents of each output argument, by name,
computed in float64 from the same arguments. ``*_baseline(*args)`` does the same work the
way a PyTorch user would (cuBLAS for the matmul), for the tuning report's comparison.
Imports torch, so only GPU machines load it.
"""

import torch

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def matmul_inputs(sizes, dtypes, device="cuda"):
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dt = _DTYPES[dtypes["T"]]
    a = torch.randn(M, K, device=device, dtype=dt)
    b = torch.randn(K, N, device=device, dtype=dt) / K**0.5
    c = torch.empty(M, N, device=device, dtype=dt)
    return [
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    ]


def matmul_reference(a, b, c, M, N, K, *strides):
    return {"c_ptr": (a.double() @ b.double())}


def matmul_baseline(a, b, c, *rest):
    torch.mm(a, b, out=c)


def rmsnorm_inputs(sizes, dtypes, device="cuda"):
    M, N = sizes["M"], sizes["N"]
    dt = _DTYPES[dtypes["T"]]
    x = torch.randn(M, N, device=device, dtype=dt)
    w = torch.rand(N, device=device, dtype=dt) + 0.5
    out = torch.empty(M, N, device=device, dtype=dt)
    return [x, w, out, M, N, x.stride(0), out.stride(0), 1e-6]


def rmsnorm_reference(x, w, out, M, N, stride_x, stride_out, eps):
    x64 = x.double()
    rstd = torch.rsqrt(x64.pow(2).mean(dim=-1, keepdim=True) + eps)
    return {"out_ptr": x64 * rstd * w.double()}


def rmsnorm_baseline(x, w, out, M, N, stride_x, stride_out, eps):
    out.copy_(torch.nn.functional.rms_norm(x, (N,), w, eps))

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


def matmul_tma_inputs(sizes, dtypes, device="cuda"):
    """The TMA matmul takes no strides: its tensors' descriptors carry them."""
    return matmul_inputs(sizes, dtypes, device)[:6]


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


def silu_mul_inputs(sizes, dtypes, device="cuda"):
    M, N = sizes["M"], sizes["N"]
    dt = _DTYPES[dtypes["T"]]
    gu = torch.randn(M, 2 * N, device=device, dtype=dt)
    out = torch.empty(M, N, device=device, dtype=dt)
    return [gu, out, M, N, gu.stride(0), out.stride(0)]


def silu_mul_reference(gu, out, M, N, stride_gu, stride_out):
    g, u = gu[:, :N].double(), gu[:, N:].double()
    return {"out_ptr": torch.nn.functional.silu(g) * u}


def silu_mul_baseline(gu, out, M, N, stride_gu, stride_out):
    torch.mul(torch.nn.functional.silu(gu[:, :N]), gu[:, N:], out=out)


def matmul_residual_inputs(sizes, dtypes, device="cuda"):
    a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn = matmul_inputs(sizes, dtypes, device)
    r = torch.randn_like(c)
    return [a, b, r, c, M, N, K, sam, sak, sbk, sbn, scm, scn]


def matmul_residual_reference(a, b, r, c, *sizes_and_strides):
    return {"c_ptr": a.double() @ b.double() + r.double()}


def matmul_residual_baseline(a, b, r, c, *rest):
    torch.addmm(r, a, b, out=c)

import torch

_D = {"fp16": torch.float16, "bf16": torch.bfloat16}


def rms_inputs(sizes, dtypes, device="cuda"):
    R, C = sizes["n_rows"], sizes["n_cols"]
    dt = _D[dtypes["T"]]
    x = torch.randn(R, C, device=device, dtype=dt)
    return [torch.empty_like(x), x, torch.ones(C, device=device, dtype=dt), x.stride(0), C, 1e-6]


def mm_inputs(sizes, dtypes, device="cuda", config=None):
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    c = torch.empty(M, N, device=device, dtype=torch.float16)
    bias = torch.randn(N, device=device, dtype=torch.float16)
    return [
        a,
        b,
        c,
        bias,
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


def consts_inputs(sizes, dtypes, device="cuda"):
    return [torch.empty(sizes["n"], device=device, dtype=torch.float32), sizes["n"]]


def blocked_inputs(sizes, dtypes, device="cuda", config=None):
    em = sizes["EM"]
    dt = _D[dtypes["T"]]
    x = torch.empty(sizes["n"], device=device, dtype=dt)
    return [x, torch.empty_like(x), torch.empty(em, device=device, dtype=dt), sizes["n"], em]


def scaled_inputs(sizes, dtypes, device="cuda"):
    x = torch.randn(sizes["n"], device=device, dtype=torch.float32)
    return [x, torch.empty_like(x), 0.5, sizes["n"]]

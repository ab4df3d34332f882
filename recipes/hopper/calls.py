"""The Hopper kernels' example arguments, references and baselines, as aotc's recipe keys
``inputs``, ``reference`` and ``tune.baseline`` call them (recipes/hopper.toml).

A descriptor argument takes the tensor itself: the loader builds the TMA descriptor with
the block shape of the variant it launches.
"""

import math

import torch

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def matmul_inputs(sizes, dtypes, device="cuda"):
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dt = _DTYPES[dtypes["T"]]
    a = torch.randn(M, K, device=device, dtype=dt)
    b = torch.randn(K, N, device=device, dtype=dt) / K**0.5
    c = torch.empty(M, N, device=device, dtype=dt)
    return [a, b, c, M, N, K]


def matmul_device_inputs(sizes, dtypes, device="cuda"):
    a, b, c, M, N, K = matmul_inputs(sizes, dtypes, device)
    return [a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0)]


def splitk_workspace(M, N, config, device="cuda"):
    """The split-K kernel's workspace for a call at M x N under ``config`` (the kernel's
    ``launch_config(M=...)``, or the tuner's candidate): fp32 partials and zeroed locks."""
    tiles = -(-M // config["BLOCK_M"]) * -(-N // config["BLOCK_N"])
    partials = tiles * config["SPLIT_K"] * config["BLOCK_M"] * config["BLOCK_N"]
    ws = torch.empty(partials if config["SPLIT_K"] > 1 else 1, device=device,
                     dtype=torch.float32)  # fmt: skip
    return ws, torch.zeros(tiles, device=device, dtype=torch.int32)


def matmul_splitk_inputs(sizes, dtypes, device="cuda", config=None):
    a, b, c, M, N, K = matmul_inputs(sizes, dtypes, device)
    ws, locks = splitk_workspace(M, N, config, device)
    return [a, b, c, ws, locks, M, N, K]


def matmul_reference(a, b, c, *rest):
    return {"c_desc": a.double() @ b.double()}


def matmul_device_reference(a, b, c, *rest):
    return {"c_ptr": a.double() @ b.double()}


def matmul_baseline(a, b, c, *rest):
    torch.mm(a, b, out=c)


def attention_inputs(sizes, dtypes, device="cuda"):
    Z, H, N_CTX, D = sizes["Z"], sizes["H"], sizes["N_CTX"], sizes["HEAD_DIM"]
    dt = _DTYPES[dtypes["T"]]
    q, k, v = (torch.randn(Z * H * N_CTX, D, device=device, dtype=dt) for _ in range(3))
    o = torch.empty_like(q)
    return [q, k, v, o, 1 / math.sqrt(D), Z, H, N_CTX]


def _attention(q, k, v, sm_scale, Z, H, N_CTX, causal):
    """float64 attention, one head at a time (a 16k x 16k score matrix is 2 GiB)."""
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    mask = None
    if causal:
        mask = torch.ones(N_CTX, N_CTX, dtype=torch.bool, device=q.device).triu(1)
    for head in range(Z * H):
        rows = slice(head * N_CTX, (head + 1) * N_CTX)
        s = (q[rows].double() @ k[rows].double().T) * sm_scale
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        out[rows] = s.softmax(-1) @ v[rows].double()
    return out


def attention_reference(q, k, v, o, sm_scale, Z, H, N_CTX):
    return {"o_desc": _attention(q, k, v, sm_scale, Z, H, N_CTX, False)}


def causal_attention_reference(q, k, v, o, sm_scale, Z, H, N_CTX):
    return {"o_desc": _attention(q, k, v, sm_scale, Z, H, N_CTX, True)}


def _sdpa(q, k, v, o, sm_scale, Z, H, N_CTX, causal):
    shape = (Z, H, N_CTX, q.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(
        q.view(shape), k.view(shape), v.view(shape), is_causal=causal, scale=sm_scale
    )
    o.view(shape).copy_(out)


def attention_baseline(q, k, v, o, sm_scale, Z, H, N_CTX):
    _sdpa(q, k, v, o, sm_scale, Z, H, N_CTX, False)


def causal_attention_baseline(q, k, v, o, sm_scale, Z, H, N_CTX):
    _sdpa(q, k, v, o, sm_scale, Z, H, N_CTX, True)


def attention64_inputs(sizes, dtypes, device="cuda"):
    return attention_inputs({**sizes, "HEAD_DIM": 64}, dtypes, device)


def attention128_inputs(sizes, dtypes, device="cuda"):
    return attention_inputs({**sizes, "HEAD_DIM": 128}, dtypes, device)

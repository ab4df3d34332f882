"""Example arguments for tma_tutorial.py's kernel, as its host wrapper builds them."""

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def matmul_inputs(sizes, dtypes, device="cuda"):
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dt = _DTYPES[dtypes["T"]]
    a = torch.randn(M, K, device=device, dtype=dt)
    b = torch.randn(K, N, device=device, dtype=dt) / K**0.5
    c = torch.empty(M, N, device=device, dtype=dt)
    dummy = [1, 1]
    return [TensorDescriptor.from_tensor(t, dummy) for t in (a, b, c)] + [M, N, K]


def matmul_reference(a, b, c, *sizes):
    return {"c_desc": a.base.double() @ b.base.double()}

"""Inputs, float32 references and host descriptors for the Hopper kernels.

``matmul_inputs`` and ``attention_inputs`` make reproducible operands; ``matmul_reference``
and ``attention_reference`` compute the expected results in float32 (TF32 off) from the same
operands. ``matmul_descriptors`` and ``attention_descriptors`` build the host-side
``TensorDescriptor``s the kernels take for a given config, and the ``*_grid`` functions the
launch grids. Imports torch, so only GPU machines (and the check script) load it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    return DTYPES[dtype] if isinstance(dtype, str) else dtype


@contextlib.contextmanager
def _no_tf32() -> Iterator[None]:
    # A float32 reference computed with TF32 would be no better than the kernel it checks.
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- matmul ----------------------------------------------------------------------------


def matmul_inputs(M, N, K, dtype="fp16", device="cuda", seed=0):
    """A [M, K] and B [K, N], row-major; B is scaled so that C's entries are about N(0, 1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _dtype(dtype)
    a = torch.randn(M, K, device=device, generator=g).to(dt)
    b = (torch.randn(K, N, device=device, generator=g) / K**0.5).to(dt)
    return a, b


def matmul_reference(a, b):
    """A @ B in float32."""
    with _no_tf32():
        return a.float() @ b.float()


def matmul_descriptors(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, EPILOGUE_SPLIT=1):
    """Host descriptors for ``matmul_tma_persistent``: A, B and C with the config's blocks
    (C's is BLOCK_N / EPILOGUE_SPLIT wide)."""
    return (
        TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K]),
        TensorDescriptor.from_tensor(b, [BLOCK_K, BLOCK_N]),
        TensorDescriptor.from_tensor(c, [BLOCK_M, BLOCK_N // EPILOGUE_SPLIT]),
    )


def matmul_grid(M, N, BLOCK_M, BLOCK_N, num_sms):
    """The persistent grid: one program per SM, or per tile when there are fewer tiles."""
    return (min(num_sms, cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)),)


# -- attention -------------------------------------------------------------------------


def attention_inputs(Z, H, N_CTX, HEAD_DIM, dtype="fp16", device="cuda", seed=0):
    """Q, K, V [Z, H, N_CTX, HEAD_DIM], contiguous, entries about N(0, 0.25)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _dtype(dtype)
    shape = (Z, H, N_CTX, HEAD_DIM)
    return tuple((0.5 * torch.randn(shape, device=device, generator=g)).to(dt) for _ in range(3))


def attention_reference(q, k, v, causal, sm_scale, max_scores_bytes=1 << 30):
    """softmax(Q K^T * sm_scale, causal mask) V in float32, a few heads at a time so that
    the score matrices stay under ``max_scores_bytes``."""
    Z, H, n, d = q.shape
    qf, kf, vf = (t.float().reshape(Z * H, n, d) for t in (q, k, v))
    out = torch.empty_like(qf)
    step = max(1, max_scores_bytes // (n * n * 4))
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if causal else None
    with _no_tf32():
        for i in range(0, Z * H, step):
            s = (qf[i : i + step] @ kf[i : i + step].transpose(1, 2)) * sm_scale
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            out[i : i + step] = torch.softmax(s, dim=-1) @ vf[i : i + step]
    return out.reshape(Z, H, n, d)


def attention_descriptors(q, k, v, o, BLOCK_M, BLOCK_N):
    """Host descriptors for ``attn_fwd``: each tensor seen as [Z * H * N_CTX, HEAD_DIM]."""
    d = q.shape[-1]

    def flat(t, rows):
        t2 = t.reshape(-1, d)  # a view: the tensors are contiguous
        return TensorDescriptor(t2, list(t2.shape), list(t2.stride()), [rows, d])

    return flat(q, BLOCK_M), flat(k, BLOCK_N), flat(v, BLOCK_N), flat(o, BLOCK_M)


def attention_grid(Z, H, N_CTX, BLOCK_M):
    return (cdiv(N_CTX, BLOCK_M), Z * H)

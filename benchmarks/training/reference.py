"""Example inputs and float64 references for the training kernels (see README.md).

For each recipe kernel NAME: ``NAME_inputs(sizes, dtypes, device="cuda", config=None)``
returns the kernel's runtime arguments in order for ``sizes`` (bucket keys and sizes by
name) and the dtype binding, with random data (``device="meta"``: shapes and dtypes
only); ``NAME_reference(*args)`` returns ``{output parameter: float64 tensor}``.

Imports torch only.
"""

from __future__ import annotations

import math
from typing import Any

import torch

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
LN_EPS = 1e-5
IGNORE_INDEX = -100


def _dtype(dtypes: dict[str, str]) -> torch.dtype:
    return _DTYPES[dtypes["T"]]


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: str, scale: float = 1.0) -> Any:
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    return (torch.randn(shape, device=device, dtype=torch.float32) * scale).to(dtype)


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> Any:
    return torch.empty(shape, dtype=dtype, device=device)


# -- LayerNorm: y = (x - mean) * rstd * w + b -----------------------------------------------


def layernorm_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    rows, cols = sizes["n_rows"], sizes["n_cols"]
    dt = _dtype(dtypes)
    x = _randn((rows, cols), dt, device, 2.0)
    if device != "meta":
        x += 0.5  # a non-zero mean, as activations have
    w = _randn((cols,), dt, device)
    b = _randn((cols,), dt, device, 0.1)
    y = _empty((rows, cols), dt, device)
    mean = _empty((rows,), torch.float32, device)
    rstd = _empty((rows,), torch.float32, device)
    return [x, y, w, b, mean, rstd, x.stride(0), y.stride(0), cols, LN_EPS]


def layernorm_reference(x, y, w, b, mean, rstd, stride_x, stride_y, n_cols, eps):  # type: ignore[no-untyped-def]
    xd = x.double()
    mu = xd.mean(dim=-1)
    r = torch.rsqrt(xd.var(dim=-1, unbiased=False) + eps)
    out = (xd - mu[:, None]) * r[:, None] * w.double() + b.double()
    return {"y_ptr": out, "mean_ptr": mu, "rstd_ptr": r}


# -- row statistics: sum, max, argmax over the last dimension ---------------------------------


def row_stats_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    M, N = sizes["M"], sizes["N"]
    dt = _dtype(dtypes)
    x = _randn((M, N), dt, device, 3.0)
    s = _empty((M,), torch.float32, device)
    mx = _empty((M,), dt, device)
    arg = _empty((M,), torch.int32, device)
    return [x, s, mx, arg, M, N, x.stride(0)]


def row_stats_reference(x, s, mx, arg, M, N, stride_x):  # type: ignore[no-untyped-def]
    """The sum, the maximum and its first index (the build compares integer outputs
    exactly)."""
    xd = x.double()
    arg = row_stats_argmax(x)
    return {"sum_ptr": xd.sum(dim=-1), "max_ptr": xd.amax(dim=-1), "argmax_ptr": arg}


def row_stats_argmax(x):  # type: ignore[no-untyped-def]
    """The first index of each row's maximum (torch.argmax's rule on ties, the kernel's)."""
    return torch.argmax(x.double(), dim=-1)


# -- cross-entropy forward over a vocabulary --------------------------------------------------


def cross_entropy_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    rows, V = sizes["n_rows"], sizes["V"]
    dt = _dtype(dtypes)
    logits = _randn((rows, V), dt, device, 4.0)
    if device == "meta":
        target = torch.empty((rows,), dtype=torch.int64, device="meta")
    else:
        target = torch.randint(0, V, (rows,), device=device)
        target[::7] = IGNORE_INDEX  # padding tokens
    loss = _empty((rows,), torch.float32, device)
    lse = _empty((rows,), torch.float32, device)
    return [logits, target, loss, lse, logits.stride(0), V, IGNORE_INDEX]


def cross_entropy_reference(logits, target, loss, lse, stride, V, ignore_index):  # type: ignore[no-untyped-def]
    x = logits.double()
    l_ = torch.logsumexp(x, dim=-1)
    ignored = target == ignore_index
    picked = x.gather(1, torch.where(ignored, 0, target)[:, None])[:, 0]
    return {"loss_ptr": torch.where(ignored, 0.0, l_ - picked), "lse_ptr": l_}


# -- bias + GELU (tanh) ----------------------------------------------------------------------


def bias_gelu_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    M, N = sizes["M"], sizes["N"]
    dt = _dtype(dtypes)
    x = _randn((M, N), dt, device, 2.0)
    bias = _randn((N,), dt, device, 0.5)
    y = _empty((M, N), dt, device)
    return [x, bias, y, M, N]


def bias_gelu_reference(x, bias, y, M, N):  # type: ignore[no-untyped-def]
    h = x.double() + bias.double()
    return {"y_ptr": torch.nn.functional.gelu(h, approximate="tanh")}


# -- transpose -------------------------------------------------------------------------------


def transpose_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    M, N = sizes["M"], sizes["N"]
    dt = _dtype(dtypes)
    x = _randn((M, N), dt, device)
    out = _empty((N, M), dt, device)
    return [x, out, M, N, x.stride(0), out.stride(0)]


def transpose_reference(x, out, M, N, stride_xm, stride_om):  # type: ignore[no-untyped-def]
    return {"out_ptr": x.double().t()}


# -- per-head RMSNorm (QK norm) ---------------------------------------------------------------

QK_EPS = 1e-6


def _qk_norm_inputs(head_dim: int):  # type: ignore[no-untyped-def]
    def inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
        rows = sizes["n_rows"]
        dt = _dtype(dtypes)
        x = _randn((rows, head_dim), dt, device, 2.0)
        w = _randn((head_dim,), dt, device)
        y = _empty((rows, head_dim), dt, device)
        return [x, w, y, rows, QK_EPS]

    return inputs


def _qk_norm_reference(x, w, y, n_rows, eps):  # type: ignore[no-untyped-def]
    xd = x.double()
    return {"y_ptr": xd * torch.rsqrt((xd * xd).mean(dim=-1, keepdim=True) + eps) * w.double()}


qk_norm_d128_inputs = _qk_norm_inputs(128)
qk_norm_d64_inputs = _qk_norm_inputs(64)
qk_norm_d128_reference = qk_norm_d64_reference = _qk_norm_reference


# -- attention forward ----------------------------------------------------------------------


def _attention_inputs(head_dim: int):  # type: ignore[no-untyped-def]
    def inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
        bh, n = sizes["BH"], sizes["N_CTX"]
        dt = _dtype(dtypes)
        q, k, v = (_randn((bh, n, head_dim), dt, device) for _ in range(3))
        o = _empty((bh, n, head_dim), dt, device)
        strides = [t.stride(i) for t in (q, k, v, o) for i in (0, 1)]
        return [q, k, v, o, 1.0 / math.sqrt(head_dim), bh, n, *strides]

    return inputs


def _attention_reference(causal: bool):  # type: ignore[no-untyped-def]
    def reference(q, k, v, o, sm_scale, BH, N_CTX, *strides):  # type: ignore[no-untyped-def]
        s = (q.double() @ k.double().transpose(1, 2)) * sm_scale
        if causal:
            n = q.shape[1]
            future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
            s = s.masked_fill(future, float("-inf"))
        return {"o_ptr": torch.softmax(s, dim=-1) @ v.double()}

    return reference


attention_d128_inputs = _attention_inputs(128)
attention_d128_reference = _attention_reference(causal=False)
attention_causal_d128_inputs = _attention_inputs(128)
attention_causal_d128_reference = _attention_reference(causal=True)
attention_causal_d64_inputs = _attention_inputs(64)
attention_causal_d64_reference = _attention_reference(causal=True)


# -- batched matmul with a bias epilogue -----------------------------------------------------

BMM_ALPHA = 0.5


def bmm_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    B, M, N, K = sizes["BATCH"], sizes["M"], sizes["N"], sizes["K"]
    dt = _dtype(dtypes)
    a = _randn((B, M, K), dt, device)
    w = _randn((B, K, N), dt, device, K**-0.5)
    bias = _randn((B, N), dt, device)
    out = _empty((B, M, N), dt, device)
    return [
        a,
        w,
        bias,
        out,
        M,
        N,
        K,
        BMM_ALPHA,
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(1),
        out.stride(0),
        out.stride(1),
    ]


def bmm_reference(a, w, bias, out, M, N, K, alpha, *strides):  # type: ignore[no-untyped-def]
    return {"out_ptr": alpha * (a.double() @ w.double()) + bias.double()[:, None, :]}


# -- a linear layer with split-K: y (fp32) += x @ w^T ---------------------------------------


def linear_splitk_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dt = _dtype(dtypes)
    x = _randn((M, K), dt, device)
    w = _randn((N, K), dt, device, K**-0.5)
    # zeroed: split programs add into it (the kernel's reset_to_zero zeroes it between launches)
    y = torch.zeros((M, N), dtype=torch.float32, device=device)
    return [x, w, y, M, N, K, x.stride(0), w.stride(0), y.stride(0)]


def linear_splitk_reference(x, w, y, M, N, K, *strides):  # type: ignore[no-untyped-def]
    return {"y_ptr": x.double() @ w.double().T}


# -- a grouped GEMM over rows sorted by group -------------------------------------------------


def group_sizes(M: int, G: int) -> list[int]:
    """M rows split over G groups as a router might: uneven (shares drawn from a flat
    Dirichlet, seeded by M and G, so every config of a bucket sees the same split), some
    groups possibly empty, summing to M."""
    gen = torch.Generator().manual_seed(1000 * G + M)
    share = -torch.log(torch.rand(G, generator=gen, dtype=torch.float64))
    share = share / share.sum() * M
    sizes = [int(s) for s in share.floor()]
    for i in torch.argsort(share - share.floor(), descending=True)[: M - sum(sizes)].tolist():
        sizes[i] += 1
    return sizes


def grouped_gemm_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    M, N, K, G = sizes["M"], sizes["N"], sizes["K"], sizes["G"]
    dt = _dtype(dtypes)
    a = _randn((M, K), dt, device)
    b = _randn((G, K, N), dt, device, K**-0.5)
    out = _empty((M, N), dt, device)
    if device == "meta":
        offsets = torch.empty((G + 1,), dtype=torch.int32, device="meta")
    else:
        ends = torch.tensor([0, *group_sizes(M, G)], dtype=torch.int64).cumsum(0)
        offsets = ends.to(torch.int32).to(device)
    return [a, b, out, offsets, M, N, K, G, a.stride(0), b.stride(0), b.stride(1), out.stride(0)]


def grouped_gemm_reference(a, b, out, offsets, M, N, K, G, *strides):  # type: ignore[no-untyped-def]
    want = torch.empty((M, N), dtype=torch.float64, device=a.device)
    ends = offsets.tolist()
    for g in range(G):
        lo, hi = ends[g], ends[g + 1]
        want[lo:hi] = a[lo:hi].double() @ b[g].double()
    return {"out_ptr": want}


# -- causal depthwise conv1d + SiLU ----------------------------------------------------------

CONV_WIDTH = 4


def causal_conv1d_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    B, D, L = sizes["BATCH"], sizes["D"], sizes["L"]
    dt = _dtype(dtypes)
    x = _randn((B, D, L), dt, device)
    w = _randn((D, CONV_WIDTH), dt, device, 0.5)
    bias = _randn((D,), dt, device, 0.5)
    out = _empty((B, D, L), dt, device)
    return [x, w, bias, out, D, L, x.stride(0), x.stride(1), out.stride(0), out.stride(1)]


def causal_conv1d_reference(x, w, bias, out, D, L, *strides):  # type: ignore[no-untyped-def]
    xs = torch.nn.functional.pad(x.double(), (CONV_WIDTH - 1, 0))
    h = torch.nn.functional.conv1d(xs, w.double()[:, None, :], bias.double(), groups=D)
    return {"out_ptr": torch.nn.functional.silu(h)}


# -- split-K's reduce: out = bias + the sum of the splits' fp32 partials ----------------------


def _split_combine_inputs(splits, sizes, dtypes, device):  # type: ignore[no-untyped-def]
    M, N = sizes["M"], sizes["N"]
    dt = _dtype(dtypes)
    part = _randn((splits, M, N), torch.float32, device)
    bias = _randn((N,), dt, device, 0.5)
    out = _empty((M, N), dt, device)
    return [part, bias, out, M, N]


def split_combine_16_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    return _split_combine_inputs(16, sizes, dtypes, device)


def split_combine_4_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    return _split_combine_inputs(4, sizes, dtypes, device)


def split_combine_reference(part, bias, out, M, N):  # type: ignore[no-untyped-def]
    return {"out_ptr": part.double().sum(dim=0) + bias.double()}


split_combine_16_reference = split_combine_4_reference = split_combine_reference


# -- a weight-only int8 linear layer: y = (x @ w^T) * scale -----------------------------------


def w8_linear_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dt = _dtype(dtypes)
    x = _randn((M, K), dt, device)
    if device == "meta":
        w = torch.empty((N, K), dtype=torch.int8, device="meta")
    else:
        w = torch.randint(-127, 128, (N, K), dtype=torch.int8, device=device)
    # per-output scales as a symmetric quantizer leaves them: about max|w| / 127
    scale = _randn((N,), torch.float32, device, 0.1).abs() / 127 + 1e-4
    y = _empty((M, N), dt, device)
    return [x, w, scale, y, M, N, K, x.stride(0), w.stride(0), y.stride(0)]


def w8_linear_reference(x, w, scale, y, M, N, K, *strides):  # type: ignore[no-untyped-def]
    return {"y_ptr": (x.double() @ w.double().T) * scale.double()}

"""y = x @ W^T (+ bias): an nn.Linear forward with the weight in its [N, K] layout.

The bias is optional the way PyTorch's is: the wrapper passes ``bias=None`` straight to the
kernel, Triton specialises the pointer to a constexpr None, and ``bias_ptr is not None``
removes the epilogue's load at compile time. No HAS_BIAS flag, no dummy tensor.
"""

import torch
import triton
import triton.language as tl

LINEAR_CONFIGS = [
    triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s
    )
    for bm, bn, bk, w, s in [
        (128, 256, 64, 8, 3),
        (128, 128, 64, 8, 4),
        (128, 64, 64, 4, 4),
        (64, 128, 64, 4, 4),
        (64, 64, 64, 4, 4),
        (32, 128, 64, 4, 4),
        (16, 128, 128, 4, 4),
        (16, 64, 128, 4, 5),
    ]
]


@triton.autotune(configs=LINEAR_CONFIGS, key=["M", "N", "K"])
@triton.jit
def linear_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    stride_yn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    group_start = (pid // width) * GROUP_M
    group_rows = min(grid_m - group_start, GROUP_M)
    pid_m = group_start + (pid % width) % group_rows
    pid_n = (pid % width) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    # W is [N, K]; reading it through swapped strides gives the [BLOCK_K, BLOCK_N] tile of W^T.
    w_tile = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    m_ok = offs_m[:, None] < M
    n_ok = offs_n[None, :] < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_ok = offs_k < K - k * BLOCK_K
        x = tl.load(x_tile, mask=m_ok & k_ok[None, :], other=0.0)
        w = tl.load(w_tile, mask=k_ok[:, None] & n_ok, other=0.0)
        acc = tl.dot(x, w, acc)
        x_tile += BLOCK_K * stride_xk
        w_tile += BLOCK_K * stride_wk

    if bias_ptr is not None:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc += bias.to(tl.float32)[None, :]

    y_tile = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_tile, acc.to(y_ptr.dtype.element_ty), mask=m_ok & n_ok)


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """F.linear(x, weight, bias) for a 2-D x [M, K] and weight [N, K]."""
    M, K = x.shape
    N = weight.shape[0]
    assert weight.shape[1] == K, "x and weight disagree on K"
    y = torch.empty((M, N), device=x.device, dtype=x.dtype) if out is None else out

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    linear_kernel[grid](
        x,
        weight,
        bias,
        y,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        weight.stride(0),
        weight.stride(1),
        y.stride(0),
        y.stride(1),
    )
    return y

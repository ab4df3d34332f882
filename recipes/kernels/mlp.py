"""Kernels of a Llama-style MLP block that the example matmul and RMSNorm do not cover.

``silu_mul_kernel``: out = silu(gate) * up, where one [M, 2·N] tensor holds gate (columns
0..N-1) and up (columns N..2N-1), as a fused gate/up projection writes them.
``matmul_residual_kernel``: C = A @ B + R, the down projection with the residual added in
its epilogue, so the block's output is written once.
"""

import triton
import triton.language as tl


@triton.jit
def silu_mul_kernel(gu_ptr, out_ptr, M, N, stride_gu, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    gate = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gu_ptr + row * stride_gu + N + cols, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def matmul_residual_kernel(
    a_ptr,
    b_ptr,
    r_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Program order, operand wrap-around and masking as in kernels/matmul.py.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_id = pid // (GROUP_M * num_pid_n)
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % (GROUP_M * num_pid_n)) % group_size_m)
    pid_n = (pid % (GROUP_M * num_pid_n)) // group_size_m

    offs_am = tl.max_contiguous(
        tl.multiple_of((pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M, BLOCK_M), BLOCK_M
    )
    offs_bn = tl.max_contiguous(
        tl.multiple_of((pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N, BLOCK_N), BLOCK_N
    )
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    # The residual has C's layout: it is the block's input, and C its output.
    at = stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    r = tl.load(r_ptr + at, mask=mask, other=0.0).to(tl.float32)
    tl.store(c_ptr + at, (acc + r).to(c_ptr.dtype.element_ty), mask=mask)

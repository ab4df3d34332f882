"""Batched matmul with a fused epilogue: out[b] = alpha * (a[b] @ w[b]) + bias[b] (bias per
batch and column), over a 3-D grid (column tiles, row tiles, batch). Row-major operands;
fp32 accumulation; K need not divide BLOCK_K."""

import triton
import triton.language as tl


@triton.jit
def bmm_bias(
    a_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    K,
    alpha,
    stride_ab,
    stride_am,
    stride_wb,
    stride_wk,
    stride_ob,
    stride_om,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + b * stride_ab + rows[:, None] * stride_am + ks[None, :]
    w_tile = w_ptr + b * stride_wb + ks[:, None] * stride_wk + cols[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_tile, mask=(rows < M)[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_tile, mask=k_ok[:, None] & (cols < N)[None, :], other=0.0)
        acc = tl.dot(a, w, acc)
        a_tile += BLOCK_K
        w_tile += BLOCK_K * stride_wk
    bias = tl.load(bias_ptr + b * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    out = acc * alpha + bias[None, :]
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    dest = out_ptr + b * stride_ob + rows[:, None] * stride_om + cols[None, :]
    tl.store(dest, out.to(out_ptr.dtype.element_ty), mask=mask)

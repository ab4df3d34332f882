"""A linear layer for few rows, with split-K: y (fp32) += x @ w^T, w in nn.Linear's [N, K]
layout (K contiguous in both operands). The grid is (column tiles, row tiles, SPLIT_K):
program k of SPLIT_K reduces its own contiguous run of K (cdiv(K, SPLIT_K) rounded up to
BLOCK_K) and adds its partial tile into y with an atomic, so y starts at zero (autotune's
reset_to_zero zeroes it around every timed launch); with SPLIT_K = 1 the tile is stored.
fp32 accumulation; K need not divide BLOCK_K."""

import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 4})],
    key=["M", "N", "K"],
    reset_to_zero=["y_ptr"],
)
@triton.jit
def linear_splitk(
    x_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    chunk = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_lo = pid_k * chunk
    k_hi = tl.minimum(k_lo + chunk, K)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < k_hi
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + ks[None, :],
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        w = tl.load(
            w_ptr + cols[None, :] * stride_wn + ks[:, None],
            mask=k_ok[:, None] & col_ok[None, :],
            other=0.0,
        )
        acc = tl.dot(x, w, acc)
    dest = y_ptr + rows[:, None] * stride_ym + cols[None, :]
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT_K == 1:
        tl.store(dest, acc, mask=mask)
    else:
        tl.atomic_add(dest, acc, mask=mask)

"""A weight-only int8 linear layer, as serving engines run quantized weights at decode
sizes: ``y[m, n] = scale[n] * sum_k x[m, k] * w[n, k]``, x 16-bit, w int8 in nn.Linear's
layout ([N, K], each output's weights contiguous along K) with one fp32 scale per output.
Each program dequantizes a BLOCK_K × BLOCK_N tile of weights to x's type and multiplies it
into a BLOCK_M × BLOCK_N fp32 accumulator over a 2-D grid (row tiles, column tiles); the
scale is applied once, after the K loop. At few rows the grid is a column tile count, the
K loop long, and the int8 weights the traffic. K need not divide BLOCK_K."""

import triton
import triton.language as tl


@triton.jit
def w8_linear(
    x_ptr,
    w_ptr,
    scale_ptr,
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
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + rows[:, None].to(tl.int64) * stride_xm + ks[None, :]
    w_tile = w_ptr + cols[None, :].to(tl.int64) * stride_wn + ks[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        x = tl.load(x_tile, mask=(rows < M)[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_tile, mask=k_ok[:, None] & (cols < N)[None, :], other=0)
        acc = tl.dot(x, w.to(x.dtype), acc)
        x_tile += BLOCK_K
        w_tile += BLOCK_K
    scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0)
    y = acc * scale[None, :]
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    dest = y_ptr + rows[:, None].to(tl.int64) * stride_ym + cols[None, :]
    tl.store(dest, y.to(y_ptr.dtype.element_ty), mask=mask)

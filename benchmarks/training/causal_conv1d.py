"""Causal depthwise 1-D convolution with SiLU, the short convolution of Mamba and of
linear-attention layers: ``out[b, d, l] = silu(bias[d] + sum_w weight[d, w] *
x[b, d, l - (WIDTH - 1) + w])``, x read as zero before the sequence starts. Each program
computes a BLOCK_D × BLOCK_L tile of one sequence, over a 3-D grid (sequence tiles,
channel tiles, batch); its WIDTH shifted loads overlap (a stencil's halo). x and out are
[batch, channels, length] with the length contiguous; fp32 accumulation."""

import triton
import triton.language as tl


@triton.jit
def causal_conv1d(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    D,
    L,
    stride_xb,
    stride_xd,
    stride_ob,
    stride_od,
    WIDTH: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    pid_l = tl.program_id(0)
    pid_d = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    ds = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    ls = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    d_ok = ds < D
    rows = x_ptr + b * stride_xb + ds.to(tl.int64)[:, None] * stride_xd
    bias = tl.load(bias_ptr + ds, mask=d_ok, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK_D, BLOCK_L], dtype=tl.float32) + bias[:, None]
    for w in tl.static_range(WIDTH):
        src = ls - (WIDTH - 1) + w
        ok = d_ok[:, None] & ((src >= 0) & (src < L))[None, :]
        xs = tl.load(rows + src[None, :], mask=ok, other=0.0).to(tl.float32)
        wt = tl.load(w_ptr + ds * WIDTH + w, mask=d_ok, other=0.0).to(tl.float32)
        acc += wt[:, None] * xs
    out = acc * tl.sigmoid(acc)
    dest = out_ptr + b * stride_ob + ds.to(tl.int64)[:, None] * stride_od + ls[None, :]
    tl.store(dest, out.to(out_ptr.dtype.element_ty), mask=d_ok[:, None] & (ls < L)[None, :])

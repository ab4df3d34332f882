"""The reduce step of a split-K matmul: ``out[m, n] = bias[n] + sum_s part[s, m, n]``, the
SPLITS fp32 partial sums that SPLITS programs wrote for one output ([SPLITS, M, N], each
split's rows contiguous) added into a 16-bit output. Each program combines a SPLITS ×
BLOCK_N tile of one row over a 2-D grid (rows, column tiles): a reduction along a short
leading axis, few programs at few rows (a latency-bound kernel), a program's work the same
whatever the rows."""

import triton
import triton.language as tl


@triton.jit
def split_combine(
    part_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    SPLITS: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    m = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = cols < N
    splits = tl.arange(0, SPLITS).to(tl.int64)
    rows = part_ptr + (splits * M + m)[:, None] * N
    parts = tl.load(rows + cols[None, :], mask=ok[None, :], other=0.0)
    bias = tl.load(bias_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    out = tl.sum(parts, axis=0) + bias
    tl.store(out_ptr + m * N + cols, out.to(out_ptr.dtype.element_ty), mask=ok)

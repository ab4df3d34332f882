"""Out-of-place 2-D transpose, out[N, M] = x[M, N]^T, one BLOCK_M x BLOCK_N tile per
program over a 2-D grid."""

import triton
import triton.language as tl


@triton.jit
def transpose(
    x_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    stride_om,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    tile = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xm + cols[None, :], mask=mask)
    # stored as a BLOCK_N x BLOCK_M tile, so that consecutive lanes write consecutive rows
    dest = out_ptr + cols.to(tl.int64)[:, None] * stride_om + rows[None, :]
    tl.store(dest, tl.trans(tile), mask=tl.trans(mask))

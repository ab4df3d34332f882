"""Row statistics over the last dimension: the sum, the maximum and the maximum's first
index (greedy sampling's argmax over a vocabulary).

Each program owns BLOCK_M rows and sweeps their columns in BLOCK_N-wide tiles, keeping a
running sum, maximum and argmax per row; a later tile replaces the argmax only with a
strictly larger value, so ties go to the lowest index.
"""

import triton
import triton.language as tl


@triton.jit
def row_stats(
    x_ptr,
    sum_ptr,
    max_ptr,
    argmax_ptr,
    M,
    N,
    stride_x,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    base = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    total = tl.zeros([BLOCK_M], dtype=tl.float32)
    best = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    where = tl.zeros([BLOCK_M], dtype=tl.int32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols < N)[None, :]
        x = tl.load(base + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        total += tl.sum(tl.where(mask, x, 0.0), axis=1)
        tile_max = tl.max(x, axis=1)
        hits = tl.where(x == tile_max[:, None], cols[None, :], N)
        tile_arg = tl.min(hits, axis=1)
        better = tile_max > best
        where = tl.where(better, tile_arg, where)
        best = tl.where(better, tile_max, best)
    tl.store(sum_ptr + rows, total, mask=row_ok)
    tl.store(max_ptr + rows, best.to(max_ptr.dtype.element_ty), mask=row_ok)
    tl.store(argmax_ptr + rows, where, mask=row_ok)

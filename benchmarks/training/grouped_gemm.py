"""Grouped GEMM over rows sorted by group (the "contiguous" layout of MoE layers and
``torch._grouped_mm``): group g owns rows ``offsets[g]:offsets[g + 1]`` of a and out, and
its own weight ``b[g]`` (K × N, row-major): ``out[rows of g] = a[rows of g] @ b[g]``.

The grid's second axis numbers row tiles group after group: ``cdiv(M, BLOCK_M) + G`` bounds
their count for any split of M rows into G groups, and the programs past the last tile
do nothing. Each program finds its group from the offsets, all G at once (``MAX_GROUPS``
is a power of two ≥ G). fp32 accumulation; K need not divide BLOCK_K; a group may be
empty."""

import triton
import triton.language as tl


@triton.jit
def grouped_gemm(
    a_ptr,
    b_ptr,
    out_ptr,
    offsets_ptr,
    M,
    N,
    K,
    G,
    stride_am,
    stride_bg,
    stride_bk,
    stride_om,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    MAX_GROUPS: tl.constexpr,
):
    pid_n = tl.program_id(0)
    tile = tl.program_id(1)
    # this program's group: the first whose row tiles, counted from group 0, pass `tile`
    gs = tl.arange(0, MAX_GROUPS)
    lo = tl.load(offsets_ptr + gs, mask=gs < G, other=0)
    hi = tl.load(offsets_ptr + gs + 1, mask=gs < G, other=0)
    tiles = (hi - lo + BLOCK_M - 1) // BLOCK_M
    ends = tl.cumsum(tiles, 0)
    g = tl.sum((ends <= tile).to(tl.int32), 0)
    mine = gs == g
    first = tl.sum(tl.where(mine, ends - tiles, 0), 0)
    row_lo = tl.sum(tl.where(mine, lo, 0), 0)
    row_hi = tl.sum(tl.where(mine, hi, 0), 0)
    k_end = tl.where(g < G, K, 0)  # past the last tile: no work

    rows = row_lo + (tile - first) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < row_hi
    a_tile = a_ptr + rows.to(tl.int64)[:, None] * stride_am + ks[None, :]
    b_tile = b_ptr + g.to(tl.int64) * stride_bg + ks[:, None] * stride_bk + cols[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, k_end, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_tile, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_tile, mask=k_ok[:, None] & (cols < N)[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K
        b_tile += BLOCK_K * stride_bk
    dest = out_ptr + rows.to(tl.int64)[:, None] * stride_om + cols[None, :]
    mask = (row_ok & (g < G))[:, None] & (cols < N)[None, :]
    tl.store(dest, acc.to(out_ptr.dtype.element_ty), mask=mask)

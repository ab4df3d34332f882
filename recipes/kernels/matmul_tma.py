"""C = A @ B for Hopper: persistent programs reading A and B, and writing C, through TMA.

The same product as matmul.py, for row-major operands. The loader builds a TMA
descriptor for each of a_ptr, b_ptr and c_ptr from the caller's tensor (the recipe's
``descriptors`` give the block each config loads), so the kernel takes no strides, and
its parameters are named like matmul.py's: the two can stand behind one op, which routes
each bucket to the faster (recipes/example.toml, ``[[op]] gemm``).

``min(NUM_SMS, tiles)`` programs walk the output tiles with a stride of the grid size,
in groups of GROUP_M tile rows so that programs running together share tiles of B in L2.
Edges need no masks: a TMA load fills what lies outside the tensor with zeros, and a TMA
store drops it.
"""

import triton
import triton.language as tl


@triton.jit
def matmul_tma_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    # one loop over tiles and K steps, so the pipeliner prefetches across tiles
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0),
                         flatten=True):  # fmt: skip
        first_m = (tile // tiles_per_group) * GROUP_M
        rows = min(num_pid_m - first_m, GROUP_M)
        off_m = (first_m + (tile % tiles_per_group) % rows) * BLOCK_M
        off_n = ((tile % tiles_per_group) // rows) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_ptr.load([off_m, k]), b_ptr.load([k, off_n]), acc)
        c_ptr.store([off_m, off_n], acc.to(c_ptr.dtype))

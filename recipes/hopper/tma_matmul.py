"""C = A @ B on Hopper: persistent programs, TMA tensor descriptors, fp32 accumulation.

A [M, K], B [K, N] and C [M, N] are row-major, fp16 or bf16; C has the inputs' dtype. The
host launches ``min(NUM_SMS, cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N))`` programs and each walks
the output tiles with a stride of the grid size, so the grid alone decides how persistent
the kernel is (no SM count is compiled in). Tiles are visited in groups of GROUP_M rows of
tiles so that programs running together share tiles of B in L2.

Edges need no masks: a TMA load fills what lies outside the tensor with zeros (so a partial
K step adds nothing) and a TMA store drops what lies outside C.

Two flavours of the same kernel:
- ``matmul_tma_persistent`` takes descriptors built on the host
  (``triton.tools.tensor_descriptor.TensorDescriptor``, blocks [BLOCK_M, BLOCK_K],
  [BLOCK_K, BLOCK_N] and [BLOCK_M, BLOCK_N]);
- ``matmul_tma_device`` takes plain pointers and row strides and builds the descriptors in
  the kernel, which needs global scratch memory for them (under the JIT, an allocator given
  to ``triton.set_allocator``).

EPILOGUE_SPLIT (1 or 2): with 2, C is stored in two halves of [BLOCK_M, BLOCK_N / 2] (the C
descriptor's block), which halves the epilogue's shared memory: a 128x256 tile then fits
four pipeline stages in the H200's 227 KB, the form closest to cuBLAS at M >= 1024
(benchmarks/probe_matmul_large.py). Defaults to 1.

WARP_SPECIALIZE: Triton 3.6's warp-specialising pass for sm_90 takes the tile loop only at
num_warps=4, and the kernel then runs 12 warps (a producer warp group and two consumers:
launch with the compiled metadata's num_warps); at other warp counts the option does
nothing. With host descriptors it is honoured for BLOCK_M <= 64 only (see
``matmul_tma_persistent``).
"""

import triton
import triton.language as tl


@triton.jit
def _tile_origin(tile_id, num_pid_m, num_pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP_M: tl.constexpr):  # fmt: skip
    # Tiles are numbered down a column of GROUP_M tile rows, then across: consecutive tile
    # ids reuse the same few tiles of B while stepping through rows of A.
    tiles_per_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // tiles_per_group) * GROUP_M
    rows_in_group = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % tiles_per_group) % rows_in_group
    pid_n = (tile_id % tiles_per_group) // rows_in_group
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _persistent_matmul(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       USE_WS: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr):  # fmt: skip
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_steps = tl.cdiv(K, BLOCK_K)
    # Flattening the tile and K loops into one lets the pipeliner prefetch the next tile's
    # first K steps during this tile's last ones. The warp-specialising pass wants the
    # nest as it is (flattened, it leaves the loop alone), so only one is asked for.
    for tile_id in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0),
                            flatten=not USE_WS, warp_specialize=USE_WS):  # fmt: skip
        off_m, off_n = _tile_origin(tile_id, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_steps):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])
            b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc)
        if EPILOGUE_SPLIT == 2:
            acc0, acc1 = acc.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()
            c_desc.store([off_m, off_n], acc0.to(c_desc.dtype))
            c_desc.store([off_m, off_n + BLOCK_N // 2], acc1.to(c_desc.dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def matmul_tma_persistent(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    EPILOGUE_SPLIT: tl.constexpr = 1,
):
    # Triton 3.6 splits a 128-row tile between two consumer warp groups when it
    # warp-specialises on sm_90, and the C store then no longer matches the host
    # descriptor's block (the pass cannot re-block a descriptor it did not create): the
    # option is honoured for BLOCK_M <= 64 only.
    USE_WS: tl.constexpr = WARP_SPECIALIZE and BLOCK_M <= 64
    _persistent_matmul(a_desc, b_desc, c_desc, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                       USE_WS, EPILOGUE_SPLIT)  # fmt: skip


@triton.jit
def matmul_tma_device(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bk,
    stride_cm,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    EPILOGUE_SPLIT: tl.constexpr = 1,
):
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]
    )
    b_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N]
    )
    c_desc = tl.make_tensor_descriptor(
        c_ptr,
        shape=[M, N],
        strides=[stride_cm, 1],
        block_shape=[BLOCK_M, BLOCK_N // EPILOGUE_SPLIT],
    )
    _persistent_matmul(a_desc, b_desc, c_desc, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                       WARP_SPECIALIZE, EPILOGUE_SPLIT)  # fmt: skip

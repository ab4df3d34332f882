"""C = A @ B on Hopper with K split over SPLIT_K programs per output tile (split-K), TMA
tensor descriptors and fp32 accumulation.

Why: a small-M product has few output tiles. At M = 64 and N = 4096, 64-wide tiles make 64
programs for the H200's 132 SMs, and each streams a 4096-deep column of B alone. Splitting
K puts SPLIT_K programs on every tile, so all SMs stream B with more bytes in flight.

Each program multiplies its tile over its share of the K steps and writes the fp32 partial
to the workspace. It then counts itself in at the tile's lock. The last program to arrive
adds the tile's SPLIT_K partials in split order (the result does not depend on which
arrived last), stores the tile of C and sets the lock back to zero. At SPLIT_K = 1 the
program stores its tile directly and touches neither.

The caller owns the workspace: ``ws_ptr``, float32, ``tiles * SPLIT_K * BLOCK_M * BLOCK_N``
elements (``tiles = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)``), and ``locks_ptr``, int32, one
per tile, zeroed once. Every call leaves the locks zero again, so one pair serves every
call on a stream. ``recipes/hopper/calls.py:splitk_workspace`` sizes both from the config
the loader will launch; recipes/hopper.toml has the loader check both sizes at every call.

A, B and C are row-major, fp16 or bf16, read and written through host descriptors with
blocks [BLOCK_M, BLOCK_K], [BLOCK_K, BLOCK_N] and [BLOCK_M, BLOCK_N]; TMA pads loads past
the edges with zeros and clips stores, so the edges need no masks.
"""

import triton
import triton.language as tl
from tma_matmul import _tile_origin


@triton.jit
def matmul_tma_splitk(
    a_desc,
    b_desc,
    c_desc,
    ws_ptr,
    locks_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    # Programs are numbered tile first: the first wave holds every tile's first split.
    tile_id = tl.program_id(0) % num_tiles
    split = tl.program_id(0) // num_tiles
    off_m, off_n = _tile_origin(tile_id, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_steps, SPLIT_K)
    k_lo = split * per_split
    k_hi = tl.minimum(k_lo + per_split, k_steps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_lo, k_hi):
        a = a_desc.load([off_m, ki * BLOCK_K])
        b = b_desc.load([ki * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    if SPLIT_K == 1:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    else:
        tile = BLOCK_M * BLOCK_N
        cells = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        partials = ws_ptr + tile_id.to(tl.int64) * (SPLIT_K * tile)
        tl.store(partials + split * tile + cells, acc)
        # Every thread's partial is written before one thread releases it at the lock
        # (acq_rel: the last arrival's reads below see all the other programs' writes).
        tl.debug_barrier()
        arrived = tl.atomic_add(locks_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                # .cg: from L2, never a line this SM's L1 kept from an earlier call
                total += tl.load(partials + s * tile + cells, cache_modifier=".cg")
            c_desc.store([off_m, off_n], total.to(c_desc.dtype))
            tl.atomic_xchg(locks_ptr + tile_id, 0)

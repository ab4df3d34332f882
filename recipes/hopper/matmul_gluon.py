"""C = A @ B on Hopper in Gluon, warp-specialised: ``matmul_ws``.

Why: at M = 64 (N = K = 4096) the product streams B once through 128 thin tiles, and
cuBLAS's kernel for it (a producer warp group feeding consumer warp groups through 16
stages) stays 5-10% ahead of tma_matmul.py's and splitk_matmul.py's software pipelines.
Here one warp issues every TMA load into a ring of STAGES slots, as far ahead as the ring
allows, and one warp group multiplies, keeping one ``warpgroup_mma`` in flight and freeing
a slot when the product reading it has completed. (Two warp groups taking alternate K
steps were slower at every shape: benchmarks/data/h200-hopper/probe-gluon-matmul/.)

A [M, K], B [K, N] and C [M, N] are row-major, fp16 or bf16, passed as host descriptors
with blocks [BLOCK_M, BLOCK_K], [BLOCK_K, BLOCK_N] and [BLOCK_M, BLOCK_N]; TMA pads loads
past the edges with zeros and clips stores. BLOCK_M is 16 rows a warp (64 at
num_warps = 4). The grid is ``cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)``: tile pid covers rows
block pid % cdiv(M, BLOCK_M), so the CTAs that run together share B's column panels.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)


@gluon.jit
def _load(a_desc, b_desc, a_smem, b_smem, ready, free, off_m, off_n, k_steps,
          STAGES: gl.constexpr):  # fmt: skip
    # The load warp: K step k into slot k % STAGES once the slot's last product is done.
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for k in range(k_steps):
        slot = k % STAGES
        mbarrier.wait(free.index(slot), ((k // STAGES) + 1) & 1, pred=k >= STAGES)
        mbarrier.expect(ready.index(slot), nbytes)
        tma.async_copy_global_to_shared(a_desc, [off_m, k * BLOCK_K], ready.index(slot),
                                        a_smem.index(slot))  # fmt: skip
        tma.async_copy_global_to_shared(b_desc, [k * BLOCK_K, off_n], ready.index(slot),
                                        b_smem.index(slot))  # fmt: skip


@gluon.jit
def _multiply(a_smem, b_smem, ready, free, k_steps, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    # The warp group: the product over every K step, one warpgroup_mma in flight; a tuple
    # (a partition's results are flattened as one).
    layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[gl.num_warps(), 1], instr_shape=[16, BLOCK_N, 16]
    )
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout)
    for k in range(k_steps):
        slot = k % STAGES
        mbarrier.wait(ready.index(slot), (k // STAGES) & 1)
        acc = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])  # the product before this one is done
        mbarrier.arrive(free.index((k + STAGES - 1) % STAGES), pred=k > 0)
    acc = warpgroup_mma_wait(0, deps=[acc])
    return (acc,)


@gluon.jit
def matmul_ws(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
):
    gl.static_assert(16 * gl.num_warps() == BLOCK_M, "BLOCK_M is 16 rows a warp")
    num_pid_m = gl.cdiv(M, BLOCK_M)
    off_m = (gl.program_id(0) % num_pid_m) * BLOCK_M
    off_n = (gl.program_id(0) // num_pid_m) * BLOCK_N
    k_steps = gl.cdiv(K, BLOCK_K)
    dtype: gl.constexpr = a_desc.dtype
    a_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(free.index(i), count=1)
    fence_async_shared()
    acc = gl.warp_specialize(
        [(_multiply, (a_smem, b_smem, ready, free, k_steps, BLOCK_M, BLOCK_N, STAGES)),
         (_load, (a_desc, b_desc, a_smem, b_smem, ready, free, off_m, off_n, k_steps,
                  STAGES))],
        [1], [24])[0]  # fmt: skip
    c_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
    c_smem.store(acc.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(0)

"""Attention forward on Hopper in Gluon, persistent: ``attn_fwd_ws2p``.

attn_fwd_ws2 pays, per CTA, the wait for its first Q and K blocks and its last product
and store: at N_CTX <= 2048 a CTA walks only 4-16 key blocks, and that is a large part of
its time. attn_fwd_ws2p launches at most NUM_SMS CTAs; each walks units of work pid,
pid + NUM_SMS, ... with the same partitions, and its load warp loads the next tile's Q
(once both warp groups' last QK product of this tile has read theirs) and key blocks
while the warp groups finish this one. The K/V ring runs on across tiles (a running
block count gives each slot's phase); O goes out through buffers of its own.

A unit is one query block, or under CAUSAL two of one head's, p and n_m - 1 - p: every
pair walks n_m + 1 blocks' worth of keys, so CTAs that stride the units finish together.
Units go head by head, so one wave of CTAs reads a few heads' keys, which stay in L2.

Arguments, descriptors and limits as attention_gluon.py's ``attn_fwd_ws2``, whose loop
helpers this file shares; the grid is ``min(NUM_SMS, units)``: ``cdiv(N_CTX, BLOCK_M) * Z
* H`` units, or causal ``cdiv(cdiv(N_CTX, BLOCK_M), 2) * Z * H``.
"""

from attention_gluon import _LOG2E, _buffers, _softmax
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
def _unit(u, n_m, N_CTX, CAUSAL: gl.constexpr):
    # Unit u -> its head's first row in the flat view, its first query block, the step to
    # its second and how many it takes. Units go head by head, so the CTAs of one wave share
    # a few heads' keys in L2. A causal unit pairs query blocks p and n_m - 1 - p, whose key
    # blocks sum to n_m + 1 whatever p is: units cost alike and the CTAs that stride them
    # finish together (the middle block of an odd n_m is a unit alone).
    if CAUSAL:
        pairs = (n_m + 1) // 2
        p = u % pairs
        row0 = (u // pairs) * N_CTX
        first = n_m - 1 - p
        step = first - p
        count = gl.minimum(step, 1) + 1
    else:
        row0 = (u // n_m) * N_CTX
        first = u % n_m
        step = 0
        count = 1
    return row0, first, step, count


@gluon.jit
def _key_blocks(start_m, N_CTX, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                CAUSAL: gl.constexpr):  # fmt: skip
    # The key blocks query block start_m attends to.
    if CAUSAL:
        return (start_m + 1) * (BLOCK_M // BLOCK_N)
    else:
        return N_CTX // BLOCK_N


@gluon.jit
def _produce_tiles(q_desc, k_desc, v_desc, bufs, q1_smem, q_free, N_CTX, n_m, units,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                   CAUSAL: gl.constexpr):  # fmt: skip
    q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    half: gl.constexpr = q_desc.block_type.shape[0]
    c = 0  # key blocks loaded so far, across tiles: the ring position
    i = 0  # tiles so far
    for u in range(gl.program_id(0), units, gl.num_programs(0)):
        row0, first, step, count = _unit(u, n_m, N_CTX, CAUSAL)
        for k in range(count):
            start_m = first - k * step
            q_row = row0 + start_m * BLOCK_M
            mbarrier.wait(q_free, (i + 1) & 1, pred=i > 0)
            mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
            tma.async_copy_global_to_shared(q_desc, [q_row + half, 0], q_bar, q1_smem)
            for j in range(_key_blocks(start_m, N_CTX, BLOCK_M, BLOCK_N, CAUSAL)):
                slot = c % STAGES
                phase = ((c // STAGES) + 1) & 1
                mbarrier.wait(k_free.index(slot), phase, pred=c >= STAGES)
                mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(k_desc, [row0 + j * BLOCK_N, 0],
                                                k_ready.index(slot), k_smem.index(slot))  # fmt: skip
                mbarrier.wait(v_free.index(slot), phase, pred=c >= STAGES)
                mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(v_desc, [row0 + j * BLOCK_N, 0],
                                                v_ready.index(slot), v_smem.index(slot))  # fmt: skip
                c += 1
            i += 1


@gluon.jit
def _attend_tile(bufs, q_free, i, c, n_blocks, diag_block, start_m, qk_scale,
                 HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 STAGES: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    # _consume's loop for the i-th tile of this CTA, its key blocks at ring positions
    # c, c + 1, ...: every slot is released (the ring runs on), and Q once its last QK
    # product has read it.
    q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    dtype: gl.constexpr = q_smem.dtype
    warps: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    offs_m = start_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_s)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    mbarrier.wait(q_bar, i & 1)
    mbarrier.wait(k_ready.index(c % STAGES), (c // STAGES) & 1)
    s = warpgroup_mma(q_smem, k_smem.index(c % STAGES).permute((1, 0)), zero_s, use_acc=False,
                      is_async=True)  # fmt: skip
    s = warpgroup_mma_wait(0, deps=[s])
    mbarrier.arrive(k_free.index(c % STAGES))
    mbarrier.arrive(q_free, pred=n_blocks == 1)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, rows_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, rows_s)
    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, 0, diag_block, offs_m, qk_scale, BLOCK_N,
                                  CAUSAL)  # fmt: skip
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    for j in range(1, n_blocks):
        slot = (c + j) % STAGES
        prev = (c + j - 1) % STAGES
        mbarrier.wait(k_ready.index(slot), ((c + j) // STAGES) & 1)
        s_tok = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), zero_s,
                              use_acc=False, is_async=True)  # fmt: skip
        mbarrier.wait(v_ready.index(prev), ((c + j - 1) // STAGES) & 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        o_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
        s, p_op = warpgroup_mma_wait(1, deps=[s_tok, p_op])
        mbarrier.arrive(k_free.index(slot))
        mbarrier.arrive(q_free, pred=j == n_blocks - 1)
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, diag_block, offs_m, qk_scale, BLOCK_N,
                                      CAUSAL)  # fmt: skip
        acc, p_op = warpgroup_mma_wait(0, deps=[o_tok, p_op])
        mbarrier.arrive(v_free.index(prev))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, rows_o), 1)
    last = (c + n_blocks - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((c + n_blocks - 1) // STAGES) & 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    o_tok = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    mbarrier.arrive(v_free.index(last))
    return acc, gl.convert_layout(l_i, rows_o)


@gluon.jit
def _consume_tiles(o_desc, o_smem, second, bufs, q_free, N_CTX, n_m, units, qk_scale,
                   HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                   STAGES: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    # One computing warp group (second: 0 or 1, its half of each tile's rows) over the
    # CTA's tiles; each tile's O leaves through o_smem while the next tile starts.
    half: gl.constexpr = BLOCK_M // 2
    c = 0
    i = 0
    for u in range(gl.program_id(0), units, gl.num_programs(0)):
        row0, first, step, count = _unit(u, n_m, N_CTX, CAUSAL)
        for k in range(count):
            start_m = first - k * step
            n_blocks = _key_blocks(start_m, N_CTX, BLOCK_M, BLOCK_N, CAUSAL)
            acc, l_i = _attend_tile(bufs, q_free, i, c, n_blocks,
                                    start_m * (BLOCK_M // BLOCK_N), 2 * start_m + second,
                                    qk_scale, HEAD_DIM, half, BLOCK_N, STAGES, CAUSAL)  # fmt: skip
            tma.store_wait(0)  # the previous tile's O has left o_smem
            o_smem.store((acc / gl.expand_dims(l_i, 1)).to(o_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(o_desc,
                                            [row0 + start_m * BLOCK_M + second * half, 0],
                                            o_smem)  # fmt: skip
            c += n_blocks
            i += 1
    tma.store_wait(0)


@gluon.jit
def attn_fwd_ws2p(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    sm_scale,
    Z,
    H,
    N_CTX,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    # attn_fwd_ws2, persistent: the grid is min(NUM_SMS, units) (the module's docstring).
    HALF: gl.constexpr = BLOCK_M // 2
    gl.static_assert(q_desc.block_type.shape[0] == HALF, "Q's block is BLOCK_M // 2 rows")
    gl.static_assert(not CAUSAL or BLOCK_M % BLOCK_N == 0, "causal needs BLOCK_M % BLOCK_N == 0")
    n_m = gl.cdiv(N_CTX, BLOCK_M)
    if CAUSAL:
        units = (n_m + 1) // 2 * Z * H
    else:
        units = n_m * Z * H
    qk_scale = sm_scale * _LOG2E
    bufs = _buffers(q_desc, k_desc, v_desc, STAGES, 2)
    _, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    q1_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    o_smem = gl.allocate_shared_memory(o_desc.dtype, o_desc.block_type.shape, o_desc.layout)
    o1_smem = gl.allocate_shared_memory(o_desc.dtype, o_desc.block_type.shape, o_desc.layout)
    q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_free, count=2)
    fence_async_shared()
    gl.warp_specialize(
        [(_consume_tiles, (o_desc, o_smem, 0, bufs, q_free, N_CTX, n_m, units, qk_scale,
                           HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL)),
         (_consume_tiles, (o_desc, o1_smem, 1,
                           (q1_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free),
                           q_free, N_CTX, n_m, units, qk_scale, HEAD_DIM, BLOCK_M,
                           BLOCK_N, STAGES, CAUSAL)),
         (_produce_tiles, (q_desc, k_desc, v_desc, bufs, q1_smem, q_free, N_CTX, n_m, units,
                           BLOCK_M, BLOCK_N, STAGES, CAUSAL))],
        [gl.num_warps(), 1], [240, 24])  # fmt: skip

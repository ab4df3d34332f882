"""Attention forward on Hopper in Gluon, persistent, with three computing warp groups:
``attn_fwd_ws3p``, for head dim 64 (FlashAttention-3's tile there: 192 query rows, 64 a
warp group).

attn_fwd_ws2p (attention_gluon_persistent.py) splits a 128-row tile between two warp
groups. Here a tile is 192 rows and three warp groups each multiply their 64 against the
same ring of key blocks (a slot is free once all three have read it): one load of K and V
feeds 1.5 times the work, and a warp group waiting on its product leaves two to issue.
Each warp group's loop is attn_fwd_ws2p's ``_attend_tile``; the load warp is
attn_fwd_ws2p's, non-causal, with three Q blocks a tile.

A head's last tile can reach past N_CTX (4096 tokens: 21 tiles and a third): its rows
past the end are computed from whatever the flat view holds there (the next head's rows,
or TMA's zeros past the tensor) and never stored. N_CTX must be a multiple of 64, so that
each warp group's rows are all inside or all outside.

Arguments and descriptors as attn_fwd_ws2p's, non-causal only: Q and O described in
blocks of BLOCK_M // 3 rows, K and V in blocks of BLOCK_N; REGS is the computing warp
groups' register budget (the load warp keeps 24). The grid is ``min(NUM_SMS,
cdiv(N_CTX, BLOCK_M) * Z * H)``.
"""

from attention_gluon import _LOG2E, _buffers
from attention_gluon_persistent import _attend_tile, _key_blocks, _unit
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma


@gluon.jit
def _produce_tiles3(q_desc, k_desc, v_desc, bufs, q1_smem, q2_smem, q_free, N_CTX, n_m,
                    units, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                    STAGES: gl.constexpr):  # fmt: skip
    # attn_fwd_ws2p's load warp, non-causal, for three warp groups' Q blocks
    q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    rows: gl.constexpr = q_desc.block_type.shape[0]
    c = 0
    i = 0
    for u in range(gl.program_id(0), units, gl.num_programs(0)):
        row0, first, _, _ = _unit(u, n_m, N_CTX, False)
        q_row = row0 + first * BLOCK_M
        mbarrier.wait(q_free, (i + 1) & 1, pred=i > 0)
        mbarrier.expect(q_bar, 3 * q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
        tma.async_copy_global_to_shared(q_desc, [q_row + rows, 0], q_bar, q1_smem)
        tma.async_copy_global_to_shared(q_desc, [q_row + 2 * rows, 0], q_bar, q2_smem)
        for j in range(_key_blocks(first, N_CTX, BLOCK_M, BLOCK_N, False)):
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
        i += 1  # noqa: SIM113 (a Gluon loop counts by hand)


@gluon.jit
def _consume_tiles3(o_desc, o_smem, part, bufs, q_free, N_CTX, n_m, units, qk_scale,
                    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                    STAGES: gl.constexpr):  # fmt: skip
    # One of three computing warp groups (part: 0, 1 or 2, its third of each tile's rows)
    rows: gl.constexpr = BLOCK_M // 3
    c = 0
    i = 0
    for u in range(gl.program_id(0), units, gl.num_programs(0)):
        row0, first, _, _ = _unit(u, n_m, N_CTX, False)
        n_blocks = _key_blocks(first, N_CTX, BLOCK_M, BLOCK_N, False)
        acc, l_i = _attend_tile(bufs, q_free, i, c, n_blocks, 0, 3 * first + part, qk_scale,
                                HEAD_DIM, rows, BLOCK_N, STAGES, False)  # fmt: skip
        row = first * BLOCK_M + part * rows
        tma.store_wait(0)
        if row < N_CTX:  # a head's last tile: rows past its end are not stored
            o_smem.store((acc / gl.expand_dims(l_i, 1)).to(o_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(o_desc, [row0 + row, 0], o_smem)
        c += n_blocks
        i += 1  # noqa: SIM113 (a Gluon loop counts by hand)
    tma.store_wait(0)


@gluon.jit
def attn_fwd_ws3p(q_desc, k_desc, v_desc, o_desc, sm_scale, Z, H, N_CTX,
                  HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  STAGES: gl.constexpr, REGS: gl.constexpr):  # fmt: skip
    gl.static_assert(q_desc.block_type.shape[0] * 3 == BLOCK_M, "Q's block is BLOCK_M // 3 rows")
    n_m = gl.cdiv(N_CTX, BLOCK_M)
    units = n_m * Z * H
    qk_scale = sm_scale * _LOG2E
    bufs = _buffers(q_desc, k_desc, v_desc, STAGES, 3)
    _, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    q1_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    q2_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    o_smem = gl.allocate_shared_memory(o_desc.dtype, o_desc.block_type.shape, o_desc.layout)
    o1_smem = gl.allocate_shared_memory(o_desc.dtype, o_desc.block_type.shape, o_desc.layout)
    o2_smem = gl.allocate_shared_memory(o_desc.dtype, o_desc.block_type.shape, o_desc.layout)
    q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_free, count=3)
    fence_async_shared()
    bufs1 = (q1_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free)
    bufs2 = (q2_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free)
    gl.warp_specialize(
        [(_consume_tiles3, (o_desc, o_smem, 0, bufs, q_free, N_CTX, n_m, units, qk_scale,
                            HEAD_DIM, BLOCK_M, BLOCK_N, STAGES)),
         (_consume_tiles3, (o_desc, o1_smem, 1, bufs1, q_free, N_CTX, n_m, units, qk_scale,
                            HEAD_DIM, BLOCK_M, BLOCK_N, STAGES)),
         (_consume_tiles3, (o_desc, o2_smem, 2, bufs2, q_free, N_CTX, n_m, units, qk_scale,
                            HEAD_DIM, BLOCK_M, BLOCK_N, STAGES)),
         (_produce_tiles3, (q_desc, k_desc, v_desc, bufs, q1_smem, q2_smem, q_free, N_CTX,
                            n_m, units, BLOCK_M, BLOCK_N, STAGES))],
        [gl.num_warps(), gl.num_warps(), 1], [REGS, REGS, 24])  # fmt: skip

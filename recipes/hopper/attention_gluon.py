"""Attention forward on Hopper written in Gluon, FlashAttention-3 style: each warp group's
softmax of one key block runs while the tensor cores multiply the next block's scores and
the previous block's values, and two warp groups work side by side without waiting for
each other.

Why Gluon: attention.py's Triton kernel reads 0.79-0.97x cuDNN at head dim 128 on the
H200. Triton 3.6's wgmma pipeliner waits right after any dot whose result the loop body
uses, so a CTA's softmax never overlaps its own tensor-core work. Gluon (Triton's
lower-level language, in the same release) issues ``warpgroup_mma`` asynchronously and
waits where the kernel says.

``attn_fwd_ws2``: a CTA takes BLOCK_M queries of one head in three partitions
(``gl.warp_specialize``): two computing warp groups of BLOCK_M / 2 rows each, and one warp
that issues every TMA load into a ring of STAGES key and value blocks. The two warp groups
share the ring and release each slot with an mbarrier arrive (a slot is free when both
have), so neither ever waits at a barrier for the other: while one runs its softmax, the
other's products keep the tensor cores busy. (In one partition, every release would be a
barrier across both warp groups, and their softmaxes would coincide:
benchmarks/probe_gluon_attention.py measured that form at 0.74-0.89x cuDNN, this one at
0.92-1.07x, head dim 128.)

Each warp group's loop, for key block j (FlashAttention-3's intra-warpgroup pipelining):
  1. issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}, both asynchronous;
  2. wait for S_j only (wgmma groups complete in order) and release K_j's slot; compute
     the row maxima, P_j and the rescale factor alpha_j while P_{j-1} V_{j-1} is still on
     the tensor cores;
  3. wait for O and release V_{j-1}'s slot; scale O by alpha_j.

Q, K, V and O are [Z, H, N_CTX, HEAD_DIM] contiguous, fp16 or bf16, seen by the host as 2-D
tensors [Z * H * N_CTX, HEAD_DIM] through descriptors with blocks [BLOCK_M // 2, HEAD_DIM]
(Q, O: one warp group's rows) and [BLOCK_N, HEAD_DIM] (K, V), each with the default
``NVMMASharedLayout`` of its block. The grid is ``(cdiv(N_CTX, BLOCK_M), Z * H)``; launch it
with 4 warps (each computing warp group; 12 run). N_CTX must be a multiple of BLOCK_M and
BLOCK_N, and with CAUSAL BLOCK_M a multiple of BLOCK_N, as for attention.py; causal CTAs take
their query blocks last-first. Row coordinates are 32-bit: Z * H * N_CTX < 2**31.
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

# log2(e): exp(x) == exp2(x * log2(e)).
_LOG2E = gl.constexpr(1.4426950408889634)


@gluon.jit
def _load_kv(desc, bars, smem, row, j, n_blocks, STAGES: gl.constexpr):
    # Key (or value) block j into its ring slot, if there is such a block.
    if j < n_blocks:
        slot = j % STAGES
        mbarrier.expect(bars.index(slot), desc.block_type.nbytes)
        tma.async_copy_global_to_shared(desc, [row + j * desc.block_type.shape[0], 0],
                                        bars.index(slot), smem.index(slot))  # fmt: skip


@gluon.jit
def _release(desc, ready, free, smem, row, j, n_blocks, STAGES: gl.constexpr,
             WARP_SPECIALIZE: gl.constexpr):  # fmt: skip
    # Block j's slot is done with: tell the load warp, or (no load warp: every warp of the
    # CTA computes and loads) load block j + STAGES into it once every warp is done.
    if WARP_SPECIALIZE:
        mbarrier.arrive(free.index(j % STAGES))
    else:
        gl.thread_barrier()
        _load_kv(desc, ready, smem, row, j + STAGES, n_blocks, STAGES)


@gluon.jit
def _produce(q_desc, k_desc, v_desc, bufs, q1_smem, row0, q_row, n_blocks,
             STAGES: gl.constexpr, Q_BLOCKS: gl.constexpr):  # fmt: skip
    # The load warp: Q_BLOCKS blocks of Q (1, or 2 into bufs' Q and q1_smem) on one barrier,
    # then each key block's K and V into their ring slots as soon as every computing
    # partition has released the block that held the slot before.
    q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    mbarrier.expect(q_bar, Q_BLOCKS * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    if Q_BLOCKS == 2:
        tma.async_copy_global_to_shared(q_desc, [q_row + q_desc.block_type.shape[0], 0],
                                        q_bar, q1_smem)  # fmt: skip
    for j in range(n_blocks):
        slot = j % STAGES
        reused = j >= STAGES
        phase = ((j // STAGES) + 1) & 1
        mbarrier.wait(k_free.index(slot), phase, pred=reused)
        _load_kv(k_desc, k_ready, k_smem, row0, j, n_blocks, STAGES)
        mbarrier.wait(v_free.index(slot), phase, pred=reused)
        _load_kv(v_desc, v_ready, v_smem, row0, j, n_blocks, STAGES)


@gluon.jit
def _softmax(s, m_i, l_i, j, diag_block, offs_m, qk_scale,
             BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    # Block j's scores s -> its probabilities p (against the new row maxima), the factor
    # alpha that rescales what came before, and the new row statistics.
    if CAUSAL and j >= diag_block:
        offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
        visible = gl.expand_dims(offs_m, 1) >= gl.expand_dims(offs_n, 0)
        # A large finite negative (not -inf) keeps m_i - m_new finite.
        s = gl.where(visible, s, -1.0e6)
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _consume(k_desc, v_desc, bufs, row0, n_blocks, diag_block, start_m, qk_scale,
             HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             STAGES: gl.constexpr, CAUSAL: gl.constexpr,
             WARP_SPECIALIZE: gl.constexpr):  # fmt: skip
    # One computing partition: O (unnormalised, fp32) and the row sums l of the BLOCK_M
    # queries from row start_m * BLOCK_M of the head, Q in bufs' Q buffer.
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

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False,
                      is_async=True)  # fmt: skip
    s = warpgroup_mma_wait(0, deps=[s])
    _release(k_desc, k_ready, k_free, k_smem, row0, 0, n_blocks, STAGES, WARP_SPECIALIZE)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, rows_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, rows_s)
    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, 0, diag_block, offs_m, qk_scale, BLOCK_N,
                                  CAUSAL)  # fmt: skip
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    for j in range(1, n_blocks):
        slot = j % STAGES
        prev = (j - 1) % STAGES
        mbarrier.wait(k_ready.index(slot), (j // STAGES) & 1)
        s_tok = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), zero_s,
                              use_acc=False, is_async=True)  # fmt: skip
        mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        o_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
        # The scores are the older group: wait for them only, and run the softmax while
        # P_{j-1} V_{j-1} is still in flight.
        s, p_op = warpgroup_mma_wait(1, deps=[s_tok, p_op])
        _release(k_desc, k_ready, k_free, k_smem, row0, j, n_blocks, STAGES, WARP_SPECIALIZE)
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, diag_block, offs_m, qk_scale, BLOCK_N,
                                      CAUSAL)  # fmt: skip
        acc, p_op = warpgroup_mma_wait(0, deps=[o_tok, p_op])
        _release(v_desc, v_ready, v_free, v_smem, row0, j - 1, n_blocks, STAGES,
                 WARP_SPECIALIZE)  # fmt: skip
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, rows_o), 1)
    last = (n_blocks - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((n_blocks - 1) // STAGES) & 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    o_tok = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    return acc, gl.convert_layout(l_i, rows_o)


@gluon.jit
def _buffers(q_desc, k_desc, v_desc, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    # Q's buffer, K's and V's rings, and their barriers (ready: a TMA load landed; free:
    # each of the CONSUMERS computing partitions is done with the slot).
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, q_desc.block_type.shape, q_desc.layout)
    kv_shape: gl.constexpr = [STAGES, k_desc.block_type.shape[0], k_desc.block_type.shape[1]]
    k_smem = gl.allocate_shared_memory(dtype, kv_shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, kv_shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_free.index(i), count=CONSUMERS)
        mbarrier.init(v_free.index(i), count=CONSUMERS)
    fence_async_shared()
    return q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free


@gluon.jit
def _store_o(o_desc, o_smem, o_row, acc, l_i):
    # O = acc / l into the rows from o_row, through o_smem.
    o_smem.store((acc / gl.expand_dims(l_i, 1)).to(o_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [o_row, 0], o_smem)
    tma.store_wait(0)


@gluon.jit
def _consume_store(o_desc, o_row, k_desc, v_desc, bufs, row0, n_blocks, diag_block, start_m,
                   qk_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                   BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                   CAUSAL: gl.constexpr):  # fmt: skip
    # The second computing warp group: _consume on its own Q block, then its rows of O
    # (through its Q buffer, which its last product has finished reading).
    acc, l_i = _consume(k_desc, v_desc, bufs, row0, n_blocks, diag_block, start_m, qk_scale,
                        HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL, True)  # fmt: skip
    _store_o(o_desc, bufs[0], o_row, acc, l_i)


@gluon.jit
def attn_fwd_ws2(
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
    HALF: gl.constexpr = BLOCK_M // 2
    gl.static_assert(q_desc.block_type.shape[0] == HALF, "Q's block is BLOCK_M // 2 rows")
    gl.static_assert(not CAUSAL or BLOCK_M % BLOCK_N == 0, "causal needs BLOCK_M % BLOCK_N == 0")
    pid_m = gl.program_id(0)
    start_m = (gl.cdiv(N_CTX, BLOCK_M) - 1 - pid_m) if CAUSAL else pid_m
    row0 = gl.program_id(1) * N_CTX
    q_row = row0 + start_m * BLOCK_M
    n_blocks = (start_m + 1) * (BLOCK_M // BLOCK_N) if CAUSAL else N_CTX // BLOCK_N
    # The first key block on the diagonal: from it on, both warp groups mask (for the first,
    # one block more than it needs: those keys come out at probability 0).
    diag_block = start_m * (BLOCK_M // BLOCK_N)
    qk_scale = sm_scale * _LOG2E
    bufs = _buffers(q_desc, k_desc, v_desc, STAGES, 2)
    _, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    q1_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    # (the argument tuples written out in the call: built in a variable first, their
    # constexprs did not reach the partitions)
    acc, l_i = gl.warp_specialize(
        [(_consume, (k_desc, v_desc, bufs, row0, n_blocks, diag_block, 2 * start_m, qk_scale,
                     HEAD_DIM, HALF, BLOCK_N, STAGES, CAUSAL, True)),
         (_consume_store, (o_desc, q_row + HALF, k_desc, v_desc,
                           (q1_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free),
                           row0, n_blocks, diag_block, 2 * start_m + 1, qk_scale, HEAD_DIM,
                           HALF, BLOCK_N, STAGES, CAUSAL)),
         (_produce, (q_desc, k_desc, v_desc, bufs, q1_smem, row0, q_row, n_blocks, STAGES, 2))],
        [gl.num_warps(), 1], [240, 24])  # fmt: skip
    _store_o(o_desc, bufs[0], q_row, acc, l_i)


# -- for benchmarks/probe_gluon_attention.py: the one-partition forms ---------------------
# The loop above run by one computing partition of BLOCK_M rows (Q's and O's blocks BLOCK_M
# rows, ``num_warps`` the computing warps, BLOCK_M a multiple of 16 rows a warp): every warp
# computing and loading (WARP_SPECIALIZE=False: a slot's release is a barrier across the
# CTA, then the refill), or with one more warp that loads. Measured at 0.74-1.00x cuDNN,
# behind attn_fwd_ws2 (benchmarks/data/h200-hopper/probe-gluon-attention/). Not in the
# recipe.


@gluon.jit
def attn_fwd_fa3(
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
    WARP_SPECIALIZE: gl.constexpr,
    num_warps: gl.constexpr,
):
    gl.static_assert(BLOCK_M % (16 * num_warps) == 0, "BLOCK_M is a multiple of 16 rows a warp")
    pid_m = gl.program_id(0)
    start_m = (gl.cdiv(N_CTX, BLOCK_M) - 1 - pid_m) if CAUSAL else pid_m
    row0 = gl.program_id(1) * N_CTX
    q_row = row0 + start_m * BLOCK_M
    n_blocks = (start_m + 1) * (BLOCK_M // BLOCK_N) if CAUSAL else N_CTX // BLOCK_N
    diag_block = start_m * (BLOCK_M // BLOCK_N)  # the first block that needs the mask
    qk_scale = sm_scale * _LOG2E
    bufs = _buffers(q_desc, k_desc, v_desc, STAGES, 1)
    q_smem = bufs[0]
    if WARP_SPECIALIZE:
        # (the argument tuples written out here: a tuple variable holding constexprs does
        # not carry them into a partition)
        acc, l_i = gl.warp_specialize(
            [(_consume, (k_desc, v_desc, bufs, row0, n_blocks, diag_block, start_m, qk_scale,
                         HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL, WARP_SPECIALIZE)),
             (_produce, (q_desc, k_desc, v_desc, bufs, q_smem, row0, q_row, n_blocks, STAGES,
                         1))],
            [1], [24])  # fmt: skip
    else:
        q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, _, _ = bufs
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
        for i in gl.static_range(STAGES):
            _load_kv(k_desc, k_ready, k_smem, row0, i, n_blocks, STAGES)
            _load_kv(v_desc, v_ready, v_smem, row0, i, n_blocks, STAGES)
        acc, l_i = _consume(k_desc, v_desc, bufs, row0, n_blocks, diag_block, start_m,
                            qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                            WARP_SPECIALIZE)  # fmt: skip

    _store_o(o_desc, q_smem, q_row, acc, l_i)

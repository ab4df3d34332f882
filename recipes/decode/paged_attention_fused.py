"""Split-KV paged decode in one launch: the range programs of paged_attention.py's
``paged_decode_split``, and the reduce done by the last of each (sequence, KV head)'s
ranges to finish, as recipes/hopper/splitk_matmul.py does for split-K. Not in decode.toml
yet: written to close the gaps the two-launch pair leaves (benchmarks/RESULTS.md, issue
20: 16 sequences x 4k at 0.93-0.97x flash, one sequence x 32k at 77% of the copy
bandwidth), where the second launch and the partials' round trip through a second kernel
are what is left. Checked by Triton's interpreter on the CPU
(tests/test_decode_kernels.py); not yet run on a GPU.

``paged_decode_split_fused``: grid (num_seqs, num_kv_heads, NUM_SPLITS), the arguments of
``paged_decode_split`` plus ``locks_ptr`` (int32, one per (sequence, KV head) of the grid,
zero before the first call; every call leaves them zero) and the output with its strides.
Each program calls ``paged_decode_split`` itself to write its range's partials to the
scratch (an empty range only its neutral maximum and sum), then counts itself in at its
(sequence, KV head)'s lock. The last to arrive combines the NUM_SPLITS partials of the
group's QUERIES_PER_KV query heads, as ``paged_decode_reduce`` does, writes the output and
sets the lock back to zero. The result does not depend on which range arrived last.
"""

import triton
import triton.language as tl
from paged_attention import paged_decode_split


@triton.jit
def _combine(part_out_ptr, part_max_ptr, part_sum_ptr, out_ptr, seq, head, num_q_heads,
             stride_o_seq, stride_o_head, HEAD_DIM: tl.constexpr,
             NUM_SPLITS: tl.constexpr):  # fmt: skip
    """out[seq, head] from its NUM_SPLITS partials, as paged_decode_reduce computes it; the
    loads bypass L1 (.cg), which may hold lines from before the other ranges' stores."""
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, HEAD_DIM)
    row = (seq.to(tl.int64) * num_q_heads + head) * NUM_SPLITS + offs_s
    m_s = tl.load(part_max_ptr + row, cache_modifier=".cg")
    l_s = tl.load(part_sum_ptr + row, cache_modifier=".cg")
    m = tl.max(m_s, 0)  # NEUTRAL_MAX only for an empty context: then w = 1, total = 0
    w = tl.math.exp2(m_s - m)
    total = tl.sum(l_s * w, 0)
    o_s = tl.load(part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :],
                  mask=(l_s > 0)[:, None], other=0.0, cache_modifier=".cg")  # fmt: skip
    o = tl.sum(o_s * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    o_ptrs = out_ptr + seq.to(tl.int64) * stride_o_seq + head * stride_o_head + offs_d
    tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty))


@triton.jit
def paged_decode_split_fused(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    context_lens_ptr,
    part_out_ptr,
    part_max_ptr,
    part_sum_ptr,
    locks_ptr,
    out_ptr,
    sm_scale,
    num_seqs,
    max_blocks_per_seq,
    stride_q_seq,
    stride_q_head,
    stride_kc_block,
    stride_kc_head,
    stride_kc_tok,
    stride_vc_block,
    stride_vc_head,
    stride_vc_tok,
    stride_bt_seq,
    stride_o_seq,
    stride_o_head,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    MIN_SPLIT: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    if seq >= num_seqs:
        return
    # The range's partials, written as the two-launch pair's first kernel writes them.
    paged_decode_split(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, context_lens_ptr,
                       part_out_ptr, part_max_ptr, part_sum_ptr, sm_scale, num_seqs,
                       max_blocks_per_seq, stride_q_seq, stride_q_head, stride_kc_block,
                       stride_kc_head, stride_kc_tok, stride_vc_block, stride_vc_head,
                       stride_vc_tok, stride_bt_seq, HEAD_DIM, BLOCK_SIZE, QUERIES_PER_KV,
                       BLOCK_N, NUM_SPLITS, MIN_SPLIT)  # fmt: skip
    # Every thread's partials are written before one thread counts the range in (acq_rel:
    # the last arrival's loads below see every other range's stores).
    tl.debug_barrier()
    lock = locks_ptr + seq * tl.num_programs(1) + kv_head
    arrived = tl.atomic_add(lock, 1, sem="acq_rel", scope="gpu")
    if arrived == NUM_SPLITS - 1:
        for g in tl.static_range(QUERIES_PER_KV):
            _combine(part_out_ptr, part_max_ptr, part_sum_ptr, out_ptr, seq,
                     kv_head * QUERIES_PER_KV + g, tl.num_programs(1) * QUERIES_PER_KV,
                     stride_o_seq, stride_o_head, HEAD_DIM, NUM_SPLITS)  # fmt: skip
        tl.atomic_xchg(lock, 0)


def fused_locks(num_seqs: int, num_kv_heads: int, like):
    """The locks for paged_decode_split_fused: int32 zeros, one per (sequence, KV head)."""
    import torch

    return torch.zeros(num_seqs, num_kv_heads, dtype=torch.int32, device=like.device)


def paged_attention_fused(q, k_cache, v_cache, block_table, context_lens, out, sm_scale,
                          scratch, locks, block_n=64, num_splits=32, num_warps=4,
                          num_stages=2, min_split=0):  # fmt: skip
    """out = decode attention of q over the paged cache, split-KV in one launch
    (``scratch`` from paged_attention.split_scratch, ``locks`` from fused_locks)."""
    num_seqs, num_q_heads, head_dim = q.shape
    _, num_kv_heads, block_size, _ = k_cache.shape
    paged_decode_split_fused[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_table, context_lens, *scratch, locks, out, sm_scale,
        num_seqs, block_table.shape[1], q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_SIZE=block_size, QUERIES_PER_KV=num_q_heads // num_kv_heads,
        BLOCK_N=block_n, NUM_SPLITS=num_splits, MIN_SPLIT=min_split,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out

"""Paged-attention decode: one new query token per sequence against a block-paged KV cache.

Layouts (the last dimension of every tensor contiguous):
- q and out: [num_seqs, num_q_heads, HEAD_DIM], fp16 or bf16;
- k_cache and v_cache: [num_blocks, num_kv_heads, BLOCK_SIZE, HEAD_DIM], the query's dtype;
- block_table: [num_seqs, max_blocks_per_seq] int32, physical block of each logical block;
- context_lens: [num_seqs] int32, the tokens in the cache for each sequence (0 allowed: the
  output is then zero, so a CUDA graph captured for more sequences than a call has can be
  replayed with the extra sequences given length 0).

Query head h reads KV head h // QUERIES_PER_KV (GQA). One program takes the QUERIES_PER_KV
heads of one KV head together, as the rows of a tl.dot, so that each K/V tile is read once
for the whole group; the group is padded to 16 rows, the smallest a tensor-core dot takes.
Keys are walked BLOCK_N tokens at a time (BLOCK_N / BLOCK_SIZE cache blocks, each token's
block looked up in the table) with an online softmax in fp32: base-2 exponentials, log2(e)
folded into the scale, normalisation deferred to the end. Tokens at or past the context
length are masked both in the scores and in the K/V loads, so that whatever the cache holds
there (a freed block's stale values, NaN included) cannot reach the output.

``paged_decode``: grid (num_seqs, num_kv_heads); programs with a sequence index at or past
``num_seqs`` return at once, so the grid may be a bucket's size.

``paged_decode_split`` (flash-decoding, for few sequences with long contexts): grid
(num_seqs, num_kv_heads, NUM_SPLITS). Each sequence's context is cut into NUM_SPLITS equal
ranges (rounded up to whole cache blocks, so that the partials do not depend on BLOCK_N and
a build can verify them), of at least MIN_SPLIT tokens (a short context uses fewer ranges,
the others returning at once: one kernel serves every context length); each program writes
its range's unnormalised output, running
maximum (log2 domain) and sum to fp32 scratch laid out contiguously as
[num_seqs, num_q_heads, NUM_SPLITS, HEAD_DIM] (part_out) and [num_seqs, num_q_heads,
NUM_SPLITS] (part_max, part_sum). A range past a short sequence's end writes only the
neutral maximum and sum (NEUTRAL_MAX, 0): a finite maximum that no score reaches, so that
every weight is a number; its output row is neither written nor read (a short context
costs its empty ranges almost nothing). ``paged_decode_reduce`` (grid (num_seqs,
num_q_heads)) combines them.

Offsets into the cache are 64-bit: a cache of 2**31 elements is a few GB.
"""

import triton
import triton.language as tl

# log2(e): exp(x) == exp2(x * log2(e)).
_LOG2E = tl.constexpr(1.4426950408889634)
NEUTRAL_MAX = tl.constexpr(-3.0e38)  # an empty range's maximum: exp2(NEUTRAL_MAX - m) == 0


@triton.jit
def _load_queries(q_ptr, seq, kv_head, stride_q_seq, stride_q_head, HEAD_DIM: tl.constexpr,
                  QUERIES_PER_KV: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    """The group's queries, [ROWS, HEAD_DIM], zero in the padding rows."""
    offs_g = tl.arange(0, ROWS)
    offs_d = tl.arange(0, HEAD_DIM)
    heads = kv_head * QUERIES_PER_KV + offs_g
    ptrs = q_ptr + seq.to(tl.int64) * stride_q_seq + heads[:, None] * stride_q_head
    return tl.load(ptrs + offs_d[None, :], mask=(offs_g < QUERIES_PER_KV)[:, None], other=0.0)


@triton.jit
def _attend(q, k_cache_ptr, v_cache_ptr, table_row, kv_head, lo, hi, qk_scale,
            stride_kc_block, stride_kc_head, stride_kc_tok,
            stride_vc_block, stride_vc_head, stride_vc_tok,
            HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
            ROWS: tl.constexpr):  # fmt: skip
    """Online softmax over the tokens [lo, hi): (acc, row sum, row max), unnormalised."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    k_head = k_cache_ptr + kv_head.to(tl.int64) * stride_kc_head
    v_head = v_cache_ptr + kv_head.to(tl.int64) * stride_vc_head
    for start in range(lo, hi, BLOCK_N):
        tok = start + offs_n
        valid = tok < hi
        # every token of a BLOCK_SIZE run reads the same table entry (one cache line)
        block = tl.load(table_row + tok // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
        slot = tok % BLOCK_SIZE
        k_off = block * stride_kc_block + slot * stride_kc_tok
        k = tl.load(k_head + k_off[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        # each walked block holds a valid token, so m_new is finite and exp2 never sees nan
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v_off = block * stride_vc_block + slot * stride_vc_tok
        v = tl.load(v_head + v_off[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _context(context_lens_ptr, seq, max_blocks_per_seq, BLOCK_SIZE: tl.constexpr):
    # A length beyond the table is the caller's error; clamped, it cannot read past the row.
    n = tl.load(context_lens_ptr + seq)
    return tl.minimum(n, max_blocks_per_seq * BLOCK_SIZE)


@triton.jit
def paged_decode(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    context_lens_ptr,
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
):
    tl.static_assert(BLOCK_N % BLOCK_SIZE == 0, "BLOCK_N must be a multiple of BLOCK_SIZE")
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    if seq >= num_seqs:
        return
    # the group padded to a power of two, and to 16 rows: tl.dot's smallest M
    ROWS: tl.constexpr = max(16, triton.next_power_of_2(QUERIES_PER_KV))
    qk_scale = sm_scale * _LOG2E
    q = _load_queries(q_ptr, seq, kv_head, stride_q_seq, stride_q_head,
                      HEAD_DIM, QUERIES_PER_KV, ROWS)  # fmt: skip
    n_ctx = _context(context_lens_ptr, seq, max_blocks_per_seq, BLOCK_SIZE)
    table_row = block_table_ptr + seq.to(tl.int64) * stride_bt_seq
    acc, l_i, _ = _attend(q, k_cache_ptr, v_cache_ptr, table_row, kv_head, 0, n_ctx,
                            qk_scale, stride_kc_block, stride_kc_head, stride_kc_tok,
                            stride_vc_block, stride_vc_head, stride_vc_tok,
                            HEAD_DIM, BLOCK_SIZE, BLOCK_N, ROWS)  # fmt: skip
    # an empty context leaves l_i == 0: its output is zero, not 0/0
    acc = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    offs_g = tl.arange(0, ROWS)
    offs_d = tl.arange(0, HEAD_DIM)
    heads = kv_head * QUERIES_PER_KV + offs_g
    o_ptrs = out_ptr + seq.to(tl.int64) * stride_o_seq + heads[:, None] * stride_o_head
    mask = (offs_g < QUERIES_PER_KV)[:, None]
    tl.store(o_ptrs + offs_d[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def paged_decode_split(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    context_lens_ptr,
    part_out_ptr,
    part_max_ptr,
    part_sum_ptr,
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
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    MIN_SPLIT: tl.constexpr,
    LOOKAHEAD: tl.constexpr = False,
):
    tl.static_assert(BLOCK_N % BLOCK_SIZE == 0, "BLOCK_N must be a multiple of BLOCK_SIZE")
    tl.static_assert(MIN_SPLIT % BLOCK_SIZE == 0, "MIN_SPLIT must be a multiple of BLOCK_SIZE")
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    if seq >= num_seqs:
        return
    # the group padded to a power of two, and to 16 rows: tl.dot's smallest M
    ROWS: tl.constexpr = max(16, triton.next_power_of_2(QUERIES_PER_KV))
    qk_scale = sm_scale * _LOG2E
    n_ctx = _context(context_lens_ptr, seq, max_blocks_per_seq, BLOCK_SIZE)
    per_split = tl.maximum(tl.cdiv(tl.cdiv(n_ctx, NUM_SPLITS), BLOCK_SIZE) * BLOCK_SIZE,
                           MIN_SPLIT)  # fmt: skip
    lo = split * per_split
    hi = tl.minimum(lo + per_split, n_ctx)
    offs_g = tl.arange(0, ROWS)
    num_q_heads = tl.num_programs(1) * QUERIES_PER_KV
    heads = kv_head * QUERIES_PER_KV + offs_g
    row = (seq.to(tl.int64) * num_q_heads + heads) * NUM_SPLITS + split
    mask = offs_g < QUERIES_PER_KV
    if lo >= hi:  # past the end: the neutral maximum and sum, and no output row to read
        tl.store(part_max_ptr + row, tl.full([ROWS], NEUTRAL_MAX, tl.float32), mask=mask)
        tl.store(part_sum_ptr + row, tl.zeros([ROWS], tl.float32), mask=mask)
        return
    q = _load_queries(q_ptr, seq, kv_head, stride_q_seq, stride_q_head,
                      HEAD_DIM, QUERIES_PER_KV, ROWS)  # fmt: skip
    table_row = block_table_ptr + seq.to(tl.int64) * stride_bt_seq
    if LOOKAHEAD:
        acc, l_i, m_i = _attend_ahead(q, k_cache_ptr + kv_head.to(tl.int64) * stride_kc_head,
                                      v_cache_ptr + kv_head.to(tl.int64) * stride_vc_head,
                                      table_row, lo, hi, qk_scale, stride_kc_block,
                                      stride_kc_tok, stride_vc_block, stride_vc_tok,
                                      HEAD_DIM, BLOCK_SIZE, BLOCK_N, ROWS)  # fmt: skip
    else:
        acc, l_i, m_i = _attend(q, k_cache_ptr, v_cache_ptr, table_row, kv_head, lo, hi,
                                qk_scale, stride_kc_block, stride_kc_head, stride_kc_tok,
                                stride_vc_block, stride_vc_head, stride_vc_tok,
                                HEAD_DIM, BLOCK_SIZE, BLOCK_N, ROWS)  # fmt: skip
    offs_d = tl.arange(0, HEAD_DIM)
    tl.store(part_max_ptr + row, tl.maximum(m_i, NEUTRAL_MAX), mask=mask)
    tl.store(part_sum_ptr + row, l_i, mask=mask)
    tl.store(part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=mask[:, None])


@triton.jit
def paged_decode_reduce(
    part_out_ptr,
    part_max_ptr,
    part_sum_ptr,
    out_ptr,
    num_seqs,
    stride_o_seq,
    stride_o_head,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    READ_ALL: tl.constexpr = False,
):
    """out[seq, head] from the NUM_SPLITS partials of paged_decode_split (NUM_SPLITS a
    power of two; grid (num_seqs, num_q_heads)). An empty range's output row (sum 0) was
    never written and never counts. READ_ALL: every range's row is read together with the
    maxima and sums, in one round trip, and an empty range's is discarded by a select
    (whatever it holds, NaN included); otherwise only non-empty ranges' rows are read, once
    the sums have arrived. The first is faster for few sequences (the reduce is latency:
    0.5-0.7 µs of a 40 µs pair at one sequence × 32k), the second where many ranges are
    empty (benchmarks/probe_decode_combine.py)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    if seq >= num_seqs:
        return
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, HEAD_DIM)
    row = (seq.to(tl.int64) * tl.num_programs(1) + head) * NUM_SPLITS + offs_s
    m_s = tl.load(part_max_ptr + row)
    l_s = tl.load(part_sum_ptr + row)
    m = tl.max(m_s, 0)  # NEUTRAL_MAX only for an empty context: then w = 1, total = 0
    w = tl.math.exp2(m_s - m)
    total = tl.sum(l_s * w, 0)
    o_rows = part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :]
    if READ_ALL:
        o_s = tl.where((l_s > 0)[:, None], tl.load(o_rows), 0.0)
    else:
        o_s = tl.load(o_rows, mask=(l_s > 0)[:, None], other=0.0)
    o = tl.sum(o_s * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    o_ptrs = out_ptr + seq.to(tl.int64) * stride_o_seq + head * stride_o_head + offs_d
    tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty))


# Below the kernels above, not beside _attend: Triton's source hash, which keys the tuning
# records, counts a function's first line, and so do the hashes of its callers.


@triton.jit
def _tile_blocks(table_row, start, hi, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """The cache block of each of the BLOCK_N tokens from ``start`` (0 past ``hi``)."""
    tok = start + tl.arange(0, BLOCK_N)
    return tl.load(table_row + tok // BLOCK_SIZE, mask=tok < hi, other=0).to(tl.int64)


@triton.jit
def _attend_ahead(q, k_head, v_head, table_row, lo, hi, qk_scale,
                  stride_k_block, stride_k_tok, stride_v_block, stride_v_tok,
                  HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                  ROWS: tl.constexpr):  # fmt: skip
    """_attend with each tile's table entries loaded one iteration ahead: in _attend the
    next tile's K and V addresses wait for a table load issued in the same iteration, so
    each tile costs two memory latencies in a row. Loaded ahead, its addresses are ready
    when the pipeline issues its loads (one sequence × 32k: the split kernel from 38.4 to
    36.3 µs, benchmarks/probe_decode_stream.py). A separate function, not a flag of
    _attend, so that paged_decode's source, and so its tuning records, stay as they are."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    ahead = _tile_blocks(table_row, lo, hi, BLOCK_SIZE, BLOCK_N)
    for start in range(lo, hi, BLOCK_N):
        block = ahead
        ahead = _tile_blocks(table_row, start + BLOCK_N, hi, BLOCK_SIZE, BLOCK_N)
        valid = start + offs_n < hi
        slot = (start + offs_n) % BLOCK_SIZE
        k_off = block * stride_k_block + slot * stride_k_tok
        k = tl.load(k_head + k_off[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        s = tl.where(valid[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v_off = block * stride_v_block + slot * stride_v_tok
        v = tl.load(v_head + v_off[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


# -- the host side, as a service would call it ------------------------------------------


def split_scratch(num_seqs: int, num_q_heads: int, num_splits: int, head_dim: int, like):
    """(part_out, part_max, part_sum) for paged_decode_split, fp32 on ``like``'s device."""
    import torch

    rows = (num_seqs, num_q_heads, num_splits)
    part_out = torch.empty(*rows, head_dim, dtype=torch.float32, device=like.device)
    part_max = torch.empty(rows, dtype=torch.float32, device=like.device)
    part_sum = torch.empty(rows, dtype=torch.float32, device=like.device)
    return part_out, part_max, part_sum


def paged_attention(q, k_cache, v_cache, block_table, context_lens, out, sm_scale,
                    block_n=64, num_splits=1, scratch=None, num_warps=4, num_stages=2,
                    min_split=0, read_all=False, lookahead=False):  # fmt: skip
    """out = decode attention of q over the paged cache; split-KV when num_splits > 1 (a
    power of two; ``scratch`` from split_scratch, made here when None), each range of at
    least ``min_split`` tokens, the table read ahead when ``lookahead``, the reduce with
    READ_ALL = ``read_all``."""
    num_seqs, num_q_heads, head_dim = q.shape
    _, num_kv_heads, block_size, _ = k_cache.shape
    common = (
        sm_scale, num_seqs, block_table.shape[1], q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
    )  # fmt: skip
    meta = dict(HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
                QUERIES_PER_KV=num_q_heads // num_kv_heads, BLOCK_N=block_n,
                num_warps=num_warps, num_stages=num_stages)  # fmt: skip
    if num_splits == 1:
        paged_decode[(num_seqs, num_kv_heads)](
            q, k_cache, v_cache, block_table, context_lens, out, *common,
            out.stride(0), out.stride(1), **meta,
        )  # fmt: skip
        return out
    if scratch is None:
        scratch = split_scratch(num_seqs, num_q_heads, num_splits, head_dim, q)
    paged_decode_split[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_table, context_lens, *scratch, *common,
        NUM_SPLITS=num_splits, MIN_SPLIT=min_split, LOOKAHEAD=lookahead, **meta,
    )  # fmt: skip
    paged_decode_reduce[(num_seqs, num_q_heads)](
        *scratch, out, num_seqs, out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, NUM_SPLITS=num_splits, READ_ALL=read_all, num_warps=num_warps,
    )  # fmt: skip
    return out

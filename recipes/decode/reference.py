"""Inputs and float64 references for the decode kernels (paged_attention.py, moe.py).

Paged attention: ``paged_inputs`` fills a KV cache whose blocks are handed to the sequences
in a shuffled order, with every slot no sequence owns (the tail of each sequence's last
block, the blocks no one owns) set to NaN when ``poison``: a kernel that reads a token past
a context length then returns NaN. Table entries past a sequence's last block point at such
poisoned blocks. ``paged_reference`` gathers each sequence's cache into contiguous K/V and
computes softmax(q K^T * scale) V in float64.

MoE: ``moe_inputs`` makes the activations, router logits and the two expert weights;
``topk_reference``, ``align_reference`` and ``moe_reference`` (a loop over experts) give
what the kernels must produce, in float64 where there is arithmetic.
"""

from __future__ import annotations

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    return DTYPES[dtype] if isinstance(dtype, str) else dtype


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- paged attention ---------------------------------------------------------------------


def ragged_context_lens(num_seqs: int, max_len: int, block_size: int, seed: int = 0) -> list[int]:
    """Lengths in [1, max_len]: 1, max_len, one past a whole block, one short of it, the rest
    random (most not multiples of anything)."""
    g = torch.Generator().manual_seed(seed)
    fixed = [1, max_len, min(max_len, block_size + 1), max(1, min(max_len, 2 * block_size - 1))]
    rand = torch.randint(1, max_len + 1, (num_seqs,), generator=g).tolist()
    return (fixed + rand)[:num_seqs] if num_seqs > len(fixed) else fixed[:num_seqs]


def block_table_for(context_lens: list[int], block_size: int, spare: int, seed: int = 0):
    """(block_table [num_seqs, max_blocks] int32, num_blocks): each sequence's blocks drawn
    from a shuffled pool; ``spare`` blocks belong to no one, and the table's unused entries
    point at them (or at block 0 when spare is 0)."""
    g = torch.Generator().manual_seed(seed)
    needed = [cdiv(n, block_size) for n in context_lens]
    max_blocks = max(1, *needed)
    num_blocks = sum(needed) + spare
    pool = torch.randperm(num_blocks, generator=g)
    owned, unowned = pool[: sum(needed)], pool[sum(needed) :]
    table = torch.zeros(len(context_lens), max_blocks, dtype=torch.int32)
    at = 0
    for i, n in enumerate(needed):
        table[i, :n] = owned[at : at + n]
        at += n
        if spare:
            fill = torch.randint(0, spare, (max_blocks - n,), generator=g)
            table[i, n:] = unowned[fill]
    return table, num_blocks


def paged_inputs(context_lens, num_q_heads, num_kv_heads, head_dim, block_size, dtype="fp16",
                 device="cuda", seed=0, spare=2, poison=True):  # fmt: skip
    """(q, k_cache, v_cache, block_table, context_lens) for paged_decode, entries ~N(0, 1)
    (keys ~N(0, 4), so that the scores spread over a few units)."""
    dt = _dtype(dtype)
    g = torch.Generator(device=device).manual_seed(seed)
    table, num_blocks = block_table_for(list(context_lens), block_size, spare, seed)
    shape = (num_blocks, num_kv_heads, block_size, head_dim)
    q = torch.randn(len(context_lens), num_q_heads, head_dim, generator=g, device=device)
    k = torch.randn(shape, generator=g, device=device) * 2.0
    v = torch.randn(shape, generator=g, device=device)
    if poison:
        valid = torch.zeros(num_blocks, block_size, dtype=torch.bool)
        for i, n in enumerate(context_lens):
            blocks = table[i, : cdiv(n, block_size)].long()
            tok = torch.arange(len(blocks) * block_size)
            valid[blocks[tok // block_size], tok % block_size] = tok < n
        stale = (~valid.to(device))[:, None, :, None].expand(shape)
        k[stale] = float("nan")
        v[stale] = float("nan")
    lens = torch.tensor(list(context_lens), dtype=torch.int32, device=device)
    return q.to(dt), k.to(dt), v.to(dt), table.to(device), lens


def paged_from_contiguous(k, v, block_size: int, seed: int = 0):
    """(k_cache, v_cache, block_table) holding K and V [num_seqs, num_kv_heads, n, head_dim]
    (n a multiple of block_size) in shuffled blocks."""
    num_seqs, num_kv_heads, n, head_dim = k.shape
    per_seq = n // block_size
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_seqs * per_seq, generator=g).to(k.device)

    def paged(t):
        blocks = t.reshape(num_seqs, num_kv_heads, per_seq, block_size, head_dim).transpose(1, 2)
        cache = torch.empty_like(t).reshape(-1, num_kv_heads, block_size, head_dim)
        cache[perm] = blocks.reshape(-1, num_kv_heads, block_size, head_dim)
        return cache

    table = perm.reshape(num_seqs, per_seq).to(torch.int32)
    return paged(k), paged(v), table


def gather_kv(cache, table_row, n: int):
    """One sequence's first n tokens of a paged cache: [num_kv_heads, n, head_dim]."""
    block_size = cache.shape[2]
    blocks = table_row[: cdiv(n, block_size)].long()
    kv = cache[blocks].transpose(0, 1)  # [num_kv_heads, blocks, block_size, head_dim]
    return kv.reshape(kv.shape[0], -1, kv.shape[-1])[:, :n]


def paged_reference(q, k_cache, v_cache, block_table, context_lens, sm_scale):
    """Decode attention in float64, [num_seqs, num_q_heads, head_dim] (zero for length 0)."""
    num_seqs, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    out = torch.zeros(num_seqs, num_kv_heads, num_q_heads // num_kv_heads, head_dim,
                      dtype=torch.float64, device=q.device)  # fmt: skip
    for i, n in enumerate(context_lens.tolist()):
        if n == 0:
            continue
        k = gather_kv(k_cache, block_table[i], n).double()
        v = gather_kv(v_cache, block_table[i], n).double()
        qi = q[i].double().reshape(num_kv_heads, -1, head_dim)  # [kv head, group, head_dim]
        s = torch.einsum("hgd,hnd->hgn", qi, k) * sm_scale
        out[i] = torch.einsum("hgn,hnd->hgd", torch.softmax(s, -1), v)
    return out.reshape(num_seqs, num_q_heads, head_dim)


NEUTRAL_MAX = -3.0e38  # paged_attention.py's: an empty range's running maximum


def split_reference(q, k_cache, v_cache, block_table, context_lens, sm_scale, num_splits,
                    min_split=0):  # fmt: skip
    """paged_decode_split's partials in float64, (part_out [S, Hq, splits, D], part_max and
    part_sum [S, Hq, splits]): each context cut into num_splits ranges of whole cache
    blocks (at least ``min_split`` tokens); over a range, the scores' maximum in the log2
    domain, the sum of 2 ** (score - maximum), and those weights' sum of values; the
    neutral (0, NEUTRAL_MAX, 0) past the end."""
    num_seqs, num_q_heads, head_dim = q.shape
    num_kv_heads, block_size = k_cache.shape[1], k_cache.shape[2]
    rows = (num_seqs, num_q_heads, num_splits)
    out = torch.zeros(*rows, head_dim, dtype=torch.float64, device=q.device)
    mx = torch.full(rows, NEUTRAL_MAX, dtype=torch.float64, device=q.device)
    total = torch.zeros(rows, dtype=torch.float64, device=q.device)
    scale = sm_scale * 1.4426950408889634
    for i, n in enumerate(context_lens.tolist()):
        n = min(n, block_table.shape[1] * block_size)
        per = max(cdiv(cdiv(n, num_splits), block_size) * block_size, min_split)
        if n == 0:
            continue
        k = gather_kv(k_cache, block_table[i], n).double().repeat_interleave(
            num_q_heads // num_kv_heads, 0)  # [Hq, n, D]
        v = gather_kv(v_cache, block_table[i], n).double().repeat_interleave(
            num_q_heads // num_kv_heads, 0)
        s = torch.einsum("hd,hnd->hn", q[i].double(), k) * scale
        for j in range(num_splits):
            lo, hi = j * per, min((j + 1) * per, n)
            if lo >= hi:
                continue
            m = s[:, lo:hi].max(-1).values
            w = torch.exp2(s[:, lo:hi] - m[:, None])
            mx[i, :, j], total[i, :, j] = m, w.sum(-1)
            out[i, :, j] = torch.einsum("hn,hnd->hd", w, v[:, lo:hi])
    return out, mx, total


def contiguous_reference(q, k, v, sm_scale):
    """Decode attention in float64 over contiguous K, V [num_seqs, num_kv_heads, n, head_dim]
    (what scaled_dot_product_attention computes with the query heads of a KV head as its
    query rows): [num_seqs, num_q_heads, head_dim]."""
    num_seqs, num_q_heads, head_dim = q.shape
    qg = q.double().reshape(num_seqs, k.shape[1], -1, head_dim)
    s = torch.einsum("bhgd,bhnd->bhgn", qg, k.double()) * sm_scale
    out = torch.einsum("bhgn,bhnd->bhgd", torch.softmax(s, -1), v.double())
    return out.reshape(num_seqs, num_q_heads, head_dim)


# -- MoE ---------------------------------------------------------------------------------


def moe_inputs(num_tokens, num_experts, hidden, ffn, dtype="fp16", device="cuda", seed=0):
    """(x [T, H], logits [T, E], w_gate_up [E, H, 2F], w_down [E, F, H]), scaled so that
    every intermediate is about N(0, 1)."""
    dt = _dtype(dtype)
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(shape, generator=g, device=device) * scale).to(dt)

    x = randn(num_tokens, hidden)
    logits = randn(num_tokens, num_experts)
    w1 = randn(num_experts, hidden, 2 * ffn, scale=hidden**-0.5)
    w2 = randn(num_experts, ffn, hidden, scale=ffn**-0.5)
    return x, logits, w1, w2


def topk_reference(logits, top_k: int, renormalize: bool = True):
    """(weights [T, top_k] float64, ids [T, top_k] int64), largest first."""
    p = torch.softmax(logits.double(), -1)
    w, ids = torch.topk(p, top_k, -1)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w, ids


def align_reference(ids, num_experts: int, block_m: int):
    """What moe_align writes: (sorted_ids, expert_ids, num_post_padded), int64 on the CPU."""
    flat = ids.reshape(-1).long().cpu()
    pairs = flat.numel()
    capacity = pairs + num_experts * (block_m - 1)
    sorted_ids = torch.full((capacity,), pairs, dtype=torch.int64)
    expert_ids = torch.full((capacity // block_m,), -1, dtype=torch.int64)
    at = 0
    for e in range(num_experts):
        mine = torch.nonzero(flat == e).reshape(-1)
        sorted_ids[at : at + len(mine)] = mine
        padded = cdiv(len(mine), block_m) * block_m
        expert_ids[at // block_m : (at + padded) // block_m] = e
        at += padded
    return sorted_ids, expert_ids, at


def expert_up(x, w_gate_up, e: int):
    """silu(x @ W_gate[e]) * (x @ W_up[e]) in float64."""
    ffn = w_gate_up.shape[2] // 2
    h = x.double() @ w_gate_up[e].double()
    return torch.nn.functional.silu(h[:, :ffn]) * h[:, ffn:]


def moe_reference(x, w_gate_up, w_down, weights, ids):
    """The layer in float64, expert by expert, for given routing: [T, H]."""
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for e in range(w_gate_up.shape[0]):
        token, slot = torch.nonzero(ids == e, as_tuple=True)
        if token.numel() == 0:
            continue
        y = expert_up(x[token], w_gate_up, e) @ w_down[e].double()
        out.index_add_(0, token, y * weights[token, slot].double()[:, None])
    return out

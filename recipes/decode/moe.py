"""A mixture-of-experts layer (Mixtral-style: SwiGLU experts, top-k routing) in five kernels.

For T tokens of width H routed to TOP_K of E experts of FFN width F ("pairs" are the T * TOP_K
(token, slot) choices, pair p = token * TOP_K + slot):
1. ``topk_softmax``: router logits [T, E] -> weights [T, TOP_K] fp32 (softmax over the
   experts, then the TOP_K largest, optionally renormalised to sum to 1) and ids [T, TOP_K]
   int32. Ties go to the lower expert id.
2. ``moe_align``: one program orders the pairs by expert (stably: by pair index within an
   expert) and pads each expert's run to a multiple of BLOCK_M, so that every BLOCK_M rows of
   the grouped GEMM belong to one expert. Its outputs are sized for the worst case, known
   from T alone, so nothing is read back to the host:
   - sorted_ids [num_pairs + E * (BLOCK_M - 1)] int32: pair ids, padding slots hold
     ``num_pairs`` (the sentinel);
   - expert_ids [(num_pairs + E * (BLOCK_M - 1)) // BLOCK_M] int32: each M-block's expert,
     -1 past the padded total;
   - num_post_padded [1] int32: the padded total, a multiple of BLOCK_M.
3. ``moe_gemm``: C[pair] = A[row(pair)] @ W[expert(block)] over the sorted rows, W [E, K, N]
   given by strides (so an [E, N, K] weight is passed transposed, as a view). A's row is the
   token (pair // TOP_K) for the first projection and the pair for the second
   (A_PER_PAIR). FUSE_SILU_MUL: W holds [gate | up] along N (2 * N columns) and
   C = silu(A @ W_gate) * (A @ W_up), [num_pairs, N]. MUL_ROUTING_WEIGHT scales each row by
   its pair's weight. Sentinel rows load nothing and store nothing; M-blocks past the padded
   total, or of sentinels only, return at once. Grid (max M-blocks, cdiv(N, BLOCK_N)), M
   fastest, so that the programs reading one expert's W tile run together and share it in
   L2. ALIGN: the block size the pairs were aligned to (moe_align's BLOCK_M, expert_ids one
   per ALIGN rows), a multiple of BLOCK_M; 0 means BLOCK_M. A CUDA graph aligns once to the
   largest BLOCK_M it may launch, whatever the tuned one.
4. ``moe_combine``: out[t] = sum over slots of C[t * TOP_K + slot] (times the weight when
   MUL_ROUTING_WEIGHT), accumulated in fp32, plus res[t] with ADD_RESIDUAL (``res`` laid out
   as ``out``). Grid (T, cdiv(H, BLOCK_H)).

``fused_moe`` runs the layer with these kernels, as a service would, from Triton's JIT.
"""

import triton
import triton.language as tl

_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def topk_softmax(
    logits_ptr,
    weights_ptr,
    ids_ptr,
    num_tokens,
    stride_logits,
    NUM_EXPERTS: tl.constexpr,
    TOP_K: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """Grid (cdiv(num_tokens, BLOCK_T),); weights and ids are [num_tokens, TOP_K], contiguous."""
    E_PAD: tl.constexpr = triton.next_power_of_2(NUM_EXPERTS)
    K_PAD: tl.constexpr = triton.next_power_of_2(TOP_K)
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, E_PAD)
    row_ok = rows < num_tokens
    # rows past the end read zeros (kept finite, never stored); padded experts read -inf
    x = tl.load(
        logits_ptr + rows.to(tl.int64)[:, None] * stride_logits + cols[None, :],
        mask=row_ok[:, None] & (cols < NUM_EXPERTS)[None, :],
        other=0.0,
    ).to(tl.float32)
    x = tl.where((cols < NUM_EXPERTS)[None, :], x, float("-inf"))
    p = tl.math.exp2((x - tl.max(x, 1)[:, None]) * _LOG2E)
    p = p / tl.sum(p, 1)[:, None]
    slots = tl.arange(0, K_PAD)
    top_w = tl.zeros([BLOCK_T, K_PAD], dtype=tl.float32)
    top_i = tl.zeros([BLOCK_T, K_PAD], dtype=tl.int32)
    for k in tl.static_range(TOP_K):
        best = tl.argmax(p, 1, tie_break_left=True)
        top_w = tl.where(slots[None, :] == k, tl.max(p, 1)[:, None], top_w)
        top_i = tl.where(slots[None, :] == k, best[:, None], top_i)
        # a probability is >= 0: -1 is never chosen again
        p = tl.where(cols[None, :] == best[:, None], -1.0, p)
    if RENORMALIZE:
        top_w = top_w / tl.sum(top_w, 1)[:, None]
    out = rows.to(tl.int64)[:, None] * TOP_K + slots[None, :]
    mask = row_ok[:, None] & (slots < TOP_K)[None, :]
    tl.store(weights_ptr + out, top_w, mask=mask)
    tl.store(ids_ptr + out, top_i, mask=mask)


@triton.jit
def _one_hot(ids_ptr, start, num_pairs, experts, BLOCK_P: tl.constexpr):
    offs = start + tl.arange(0, BLOCK_P)
    # -1 matches no expert: pairs past the end count for none
    e = tl.load(ids_ptr + offs, mask=offs < num_pairs, other=-1)
    return offs, (e[:, None] == experts[None, :]).to(tl.int32)


@triton.jit
def _expert_of(slot, starts, ends, experts):
    """(expert whose padded run holds each slot, whether one does)."""
    inside = (slot[:, None] >= starts[None, :]) & (slot[:, None] < ends[None, :])
    expert = tl.sum(tl.where(inside, experts[None, :], 0), 1)
    return expert, tl.sum(inside.to(tl.int32), 1) > 0


@triton.jit
def moe_align(
    topk_ids_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_padded_ptr,
    num_pairs,
    NUM_EXPERTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    """Grid (1,). topk_ids: the num_pairs expert ids, contiguous int32. BLOCK_P pairs are
    taken at a time, as a [BLOCK_P, next_power_of_2(NUM_EXPERTS)] one-hot tile."""
    E_PAD: tl.constexpr = triton.next_power_of_2(NUM_EXPERTS)
    experts = tl.arange(0, E_PAD)
    counts = tl.zeros([E_PAD], dtype=tl.int32)
    for start in range(0, num_pairs, BLOCK_P):
        _, hot = _one_hot(topk_ids_ptr, start, num_pairs, experts, BLOCK_P)
        counts += tl.sum(hot, 0)
    ends = tl.cumsum((counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M, 0)
    starts = ends - (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    tl.store(num_post_padded_ptr, tl.max(ends, 0))

    # each pair to its expert's start + its rank among the expert's earlier pairs
    seen = starts
    for start in range(0, num_pairs, BLOCK_P):
        offs, hot = _one_hot(topk_ids_ptr, start, num_pairs, experts, BLOCK_P)
        rank = tl.cumsum(hot, 0) - 1 + seen[None, :]
        pos = tl.sum(hot * rank, 1)
        tl.store(sorted_ids_ptr + pos, offs, mask=offs < num_pairs)
        seen += tl.sum(hot, 0)

    # the sentinel into every other slot: disjoint from the slots written above, so the
    # two loops need no ordering between the threads that write them
    capacity = num_pairs + NUM_EXPERTS * (BLOCK_M - 1)
    for start in range(0, capacity, BLOCK_P):
        slot = start + tl.arange(0, BLOCK_P)
        expert, used = _expert_of(slot, starts, ends, experts)
        first = tl.sum(tl.where(experts[None, :] == expert[:, None], starts[None, :], 0), 1)
        count = tl.sum(tl.where(experts[None, :] == expert[:, None], counts[None, :], 0), 1)
        pad = (slot < capacity) & ~(used & (slot - first < count))
        tl.store(sorted_ids_ptr + slot, num_pairs, mask=pad)

    num_blocks = capacity // BLOCK_M
    for start in range(0, num_blocks, BLOCK_P):
        block = start + tl.arange(0, BLOCK_P)
        expert, used = _expert_of(block * BLOCK_M, starts, ends, experts)
        tl.store(expert_ids_ptr + block, tl.where(used, expert, -1), mask=block < num_blocks)


@triton.jit
def moe_gemm(
    a_ptr,
    w_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_padded_ptr,
    num_pairs,
    N,
    K,
    stride_am,
    stride_we,
    stride_wk,
    stride_wn,
    stride_cm,
    TOP_K: tl.constexpr,
    A_PER_PAIR: tl.constexpr,
    MUL_ROUTING_WEIGHT: tl.constexpr,
    FUSE_SILU_MUL: tl.constexpr,
    ALIGN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """C [num_pairs, N] (row stride stride_cm); A's and C's last dimensions contiguous."""
    GROUP: tl.constexpr = BLOCK_M if ALIGN == 0 else ALIGN
    tl.static_assert(GROUP % BLOCK_M == 0, "ALIGN must be a multiple of BLOCK_M")
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    first = pid_m * BLOCK_M
    if first >= tl.load(num_post_padded_ptr):
        return
    # an expert's pairs come first in its run: a block starting on a sentinel has no pair
    if tl.load(sorted_ids_ptr + first) >= num_pairs:
        return
    expert = tl.load(expert_ids_ptr + first // GROUP).to(tl.int64)
    pair = tl.load(sorted_ids_ptr + first + tl.arange(0, BLOCK_M))
    row_ok = pair < num_pairs
    a_row = pair if A_PER_PAIR else pair // TOP_K
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_row.to(tl.int64)[:, None] * stride_am + offs_k[None, :]
    w_ptrs = w_ptr + expert * stride_we + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    n_ok = offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = offs_k < K - k0
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, w, acc)
        if FUSE_SILU_MUL:
            w_up = tl.load(w_ptrs + N * stride_wn, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc_up = tl.dot(a, w_up, acc_up)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K * stride_wk
    if FUSE_SILU_MUL:
        acc = acc * tl.sigmoid(acc) * acc_up
    if MUL_ROUTING_WEIGHT:
        acc = acc * tl.load(topk_weights_ptr + pair, mask=row_ok, other=0.0)[:, None]
    c_ptrs = c_ptr + pair.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])


@triton.jit
def moe_combine(
    c_ptr,
    topk_weights_ptr,
    res_ptr,
    out_ptr,
    num_tokens,
    H,
    stride_cm,
    stride_om,
    TOP_K: tl.constexpr,
    MUL_ROUTING_WEIGHT: tl.constexpr,
    ADD_RESIDUAL: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """out [num_tokens, H] = sum over the TOP_K rows of C [num_tokens * TOP_K, H] of each token
    (+ res [num_tokens, H], row stride stride_om, with ADD_RESIDUAL)."""
    token = tl.program_id(0)
    if token >= num_tokens:
        return
    offs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = offs < H
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    if ADD_RESIDUAL:
        res = res_ptr + token.to(tl.int64) * stride_om + offs
        acc += tl.load(res, mask=mask, other=0.0).to(tl.float32)
    for slot in tl.static_range(TOP_K):
        pair = token.to(tl.int64) * TOP_K + slot
        row = tl.load(c_ptr + pair * stride_cm + offs, mask=mask, other=0.0).to(tl.float32)
        if MUL_ROUTING_WEIGHT:
            row = row * tl.load(topk_weights_ptr + pair)
        acc += row
    tl.store(out_ptr + token.to(tl.int64) * stride_om + offs, acc.to(out_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


# -- the host side, as a service would call it ------------------------------------------


def align_sizes(num_pairs: int, num_experts: int, block_m: int) -> tuple[int, int]:
    """(len(sorted_ids), len(expert_ids)): the worst case, every expert's run padded."""
    capacity = num_pairs + num_experts * (block_m - 1)
    return capacity, capacity // block_m


def route(logits, top_k: int, renormalize: bool = True, block_t: int = 16):
    """(weights [T, top_k] fp32, ids [T, top_k] int32) from router logits [T, E]."""
    import torch

    T, E = logits.shape
    weights = torch.empty(T, top_k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(T, top_k, dtype=torch.int32, device=logits.device)
    topk_softmax[(triton.cdiv(T, block_t),)](
        logits, weights, ids, T, logits.stride(0),
        NUM_EXPERTS=E, TOP_K=top_k, RENORMALIZE=renormalize, BLOCK_T=block_t,
    )  # fmt: skip
    return weights, ids


def align(ids, num_experts: int, block_m: int, block_p: int = 0):
    """(sorted_ids, expert_ids, num_post_padded) for int32 expert ids of any shape."""
    import torch

    num_pairs = ids.numel()
    capacity, blocks = align_sizes(num_pairs, num_experts, block_m)
    sorted_ids = torch.empty(capacity, dtype=torch.int32, device=ids.device)
    expert_ids = torch.empty(blocks, dtype=torch.int32, device=ids.device)
    total = torch.empty(1, dtype=torch.int32, device=ids.device)
    # a one-hot tile of about 4096 entries
    block_p = block_p or max(16, 4096 // triton.next_power_of_2(num_experts))
    moe_align[(1,)](ids, sorted_ids, expert_ids, total, num_pairs,
                    NUM_EXPERTS=num_experts, BLOCK_M=block_m, BLOCK_P=block_p)  # fmt: skip
    return sorted_ids, expert_ids, total


def grouped_gemm(a, w, c, weights, aligned, top_k: int, *, per_pair: bool, mul_weight: bool,
                 silu_mul: bool, config: dict, align: int = 0):  # fmt: skip
    """c[pair] = a[row(pair)] @ w[expert] for every routed pair (moe_gemm); w [E, K, N or 2N].
    ``align``: the block size ``aligned`` was made for, if not config's BLOCK_M."""
    sorted_ids, expert_ids, total = aligned
    n = c.shape[1]
    meta = {k: config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")}
    grid = (sorted_ids.numel() // config["BLOCK_M"], triton.cdiv(n, config["BLOCK_N"]))
    moe_gemm[grid](
        a, w, c, weights, sorted_ids, expert_ids, total, c.shape[0], n, a.shape[1],
        a.stride(0), w.stride(0), w.stride(1), w.stride(2), c.stride(0),
        TOP_K=top_k, A_PER_PAIR=per_pair, MUL_ROUTING_WEIGHT=mul_weight,
        FUSE_SILU_MUL=silu_mul, ALIGN=align, **meta,
    )  # fmt: skip
    return c


def combine(down, weights, top_k: int, residual=None, block_h: int = 1024):
    """out [T, H] = the sum of each token's top_k rows of down (+ residual)."""
    t, h = down.shape[0] // top_k, down.shape[1]
    out = down.new_empty(t, h)
    moe_combine[(t, triton.cdiv(h, block_h))](
        down, weights, out if residual is None else residual, out, t, h, down.stride(0),
        out.stride(0), TOP_K=top_k, MUL_ROUTING_WEIGHT=False,
        ADD_RESIDUAL=residual is not None, BLOCK_H=block_h,
    )  # fmt: skip
    return out


def fused_moe(x, w_gate_up, w_down, logits, top_k: int, config: dict, block_h: int = 1024):
    """The layer: x [T, H], w_gate_up [E, H, 2F], w_down [E, F, H], logits [T, E] -> [T, H]."""
    T, H = x.shape
    E, _, two_f = w_gate_up.shape
    weights, ids = route(logits, top_k)
    aligned = align(ids, E, config["BLOCK_M"])
    act = x.new_empty(T * top_k, two_f // 2)
    grouped_gemm(x, w_gate_up, act, weights, aligned, top_k, per_pair=False, mul_weight=False,
                 silu_mul=True, config=config)  # fmt: skip
    down = x.new_empty(T * top_k, H)
    grouped_gemm(act, w_down, down, weights, aligned, top_k, per_pair=True, mul_weight=True,
                 silu_mul=False, config=config)  # fmt: skip
    return combine(down, weights, top_k, block_h=block_h)

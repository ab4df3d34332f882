"""The decode step that recipes/decode.toml's pipeline ``decode_step`` runs, in PyTorch: its
weights and per-call inputs at its sizes, a float64 reference, and the eager bf16 step a
PyTorch user would write (the benchmarks' baseline, also given to torch.compile).

Sizes: Llama-3-8B's attention (hidden 4096, 32 query heads sharing 8 KV heads of 128,
rotary base 500000) and Mixtral-8x7B's MoE (8 experts, top 2, FFN 14336); a KV cache of
16384 blocks of 16 tokens, block tables 2048 blocks wide (32k tokens).

One decode token per sequence: sequence i has context_lens[i] tokens, the last of which is
the one being decoded, at position context_lens[i] - 1 and cache slot
block_table[i, pos // 16] * 16 + pos % 16. The step writes that token's key and value into
the cache and attends over all context_lens[i] tokens.
"""

import math

import torch
import torch.nn.functional as F

HIDDEN, NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 4096, 32, 8, 128, 16
NUM_EXPERTS, TOP_K, FFN = 8, 2, 14336
CACHE_BLOCKS, TABLE_WIDTH = 16384, 2048
ROPE_THETA, EPS = 500000.0, 1e-5
SM_SCALE = HEAD_DIM**-0.5
QKV = (NUM_Q_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM
WEIGHTS = ("w_norm", "w_qkv", "w_o", "w_norm2", "w_router", "w_up", "w_down", "k_cache", "v_cache")
INPUTS = ("x", "positions", "slots", "block_table", "context_lens")


def make_weights(device="cuda", seed=0):
    """Random bf16 weights scaled so that every activation is about N(0, 1), the router's
    logits about N(0, 4), and a KV cache of random contents (the earlier tokens')."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(shape, generator=g, device=device) * scale).to(torch.bfloat16)

    w = {
        "w_norm": randn(HIDDEN, scale=0.1) + 1,
        "w_qkv": randn(HIDDEN, QKV, scale=HIDDEN**-0.5),
        "w_o": randn(HIDDEN, HIDDEN, scale=HIDDEN**-0.5),
        "w_norm2": randn(HIDDEN, scale=0.1) + 1,
        "w_router": randn(HIDDEN, NUM_EXPERTS, scale=2 * HIDDEN**-0.5),
        "w_up": randn(NUM_EXPERTS, HIDDEN, 2 * FFN, scale=HIDDEN**-0.5),
        "w_down": randn(NUM_EXPERTS, FFN, HIDDEN, scale=FFN**-0.5),
    }
    shape = (CACHE_BLOCKS, NUM_KV_HEADS, BLOCK_SIZE, HEAD_DIM)
    w["k_cache"], w["v_cache"] = randn(*shape), randn(*shape)
    return w


def make_inputs(context_lens, device="cuda", seed=0):
    """The per-call inputs for sequences of these context lengths, their blocks drawn at
    random from the cache (block tables past a context hold block 0, never read)."""
    g = torch.Generator().manual_seed(seed)
    t = len(context_lens)
    need = [math.ceil(n / BLOCK_SIZE) for n in context_lens]
    assert all(n >= 1 for n in context_lens) and sum(need) <= CACHE_BLOCKS, "cache too small"
    assert max(need) <= TABLE_WIDTH, "context longer than the block table"
    blocks = torch.randperm(CACHE_BLOCKS, generator=g)
    table = torch.zeros(t, TABLE_WIDTH, dtype=torch.int32)
    at = 0
    for i, n in enumerate(need):
        table[i, :n] = blocks[at : at + n]
        at += n
    lens = torch.tensor(context_lens, dtype=torch.int32)
    positions = lens - 1
    rows = torch.arange(t)
    slots = table[rows, positions // BLOCK_SIZE] * BLOCK_SIZE + positions % BLOCK_SIZE
    x = torch.randn(t, HIDDEN, generator=g).to(torch.bfloat16)
    return {
        "x": x.to(device),
        "positions": positions.to(device),
        "slots": slots.to(torch.int32).to(device),
        "block_table": table.to(device),
        "context_lens": lens.to(device),
    }


def make_verify_inputs(context_lens, tokens=4, device="cuda", seed=0):
    """Speculative decoding's verification: each sequence's last ``tokens`` (the accepted
    token and the drafts) in one step, one row per token. A sequence of n tokens gives rows
    at positions n - tokens .. n - 1 with context lengths n - tokens + 1 .. n, sharing the
    sequence's block table row."""
    per_seq = make_inputs(context_lens, device, seed)
    rows = torch.arange(len(context_lens), device=device).repeat_interleave(tokens)
    back = torch.arange(tokens - 1, -1, -1, device=device, dtype=torch.int32).repeat(
        len(context_lens)
    )
    lens = per_seq["context_lens"][rows] - back
    assert int(lens.min()) >= 1, "a sequence shorter than the tokens verified"
    table = per_seq["block_table"][rows]
    positions = lens - 1
    index = torch.arange(len(rows), device=device)
    slots = table[index, positions // BLOCK_SIZE] * BLOCK_SIZE + positions % BLOCK_SIZE
    x = torch.randn(len(rows), HIDDEN, generator=torch.Generator(device=device).manual_seed(seed),
                    device=device).to(torch.bfloat16)  # fmt: skip
    return {"x": x, "positions": positions, "slots": slots.to(torch.int32), "block_table": table,
            "context_lens": lens}  # fmt: skip


def ragged_lens(t, longest, seed=0):
    """t context lengths from 1 to ``longest`` (both ends included once there are two)."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, longest + 1, (t,), generator=g).tolist()
    if t >= 2:
        lens[0], lens[1] = 1, longest
    return lens


def _rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def _rotate(x, positions):
    """Rotary embedding, rotate-half form, over the last dimension (x [T, heads, D])."""
    half = HEAD_DIM // 2
    i = torch.arange(half, dtype=torch.float64, device=x.device)
    angle = positions.double()[:, None] * ROPE_THETA ** (-2.0 * i / HEAD_DIM)
    c, s = torch.cos(angle)[:, None, :].to(x.dtype), torch.sin(angle)[:, None, :].to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def _written(cache, slots, new):
    """The cache in float64 after the step writes ``new`` [T, KV heads, D] at ``slots``."""
    out = cache.double()
    out[(slots // BLOCK_SIZE).long(), :, (slots % BLOCK_SIZE).long()] = new
    return out


def _context(cache, blocks, n):
    """A token's context of n keys (or values) [KV heads, n, D] through its blocks."""
    return cache[blocks].permute(1, 0, 2, 3).reshape(NUM_KV_HEADS, -1, HEAD_DIM)[:, :n]


def reference(inputs, weights):
    """The step in float64, from the cache as it is before the step: (out [T, H], router
    logits [T, E], the new keys and values [T, KV heads, D]). Every token's key and value
    are written before any token attends, as the graph does: tokens of one sequence
    verified together (speculative decoding) see the earlier ones."""
    w = {k: v for k, v in weights.items() if k not in ("w_up", "w_down", "k_cache", "v_cache")}
    w = {k: v.double() for k, v in w.items()}
    x = inputs["x"].double()
    t = x.shape[0]
    qkv = _rmsnorm(x, w["w_norm"]) @ w["w_qkv"]
    heads = qkv.reshape(t, -1, HEAD_DIM)
    rot = _rotate(heads[:, : NUM_Q_HEADS + NUM_KV_HEADS], inputs["positions"])
    q, k_new = rot[:, :NUM_Q_HEADS], rot[:, NUM_Q_HEADS:]
    v_new = heads[:, NUM_Q_HEADS + NUM_KV_HEADS :]
    attn = torch.empty(t, NUM_Q_HEADS, HEAD_DIM, dtype=torch.float64, device=x.device)
    group = NUM_Q_HEADS // NUM_KV_HEADS
    k_cache = _written(weights["k_cache"], inputs["slots"], k_new)
    v_cache = _written(weights["v_cache"], inputs["slots"], v_new)
    for i, n in enumerate(inputs["context_lens"].tolist()):
        blocks = inputs["block_table"][i, : math.ceil(n / BLOCK_SIZE)].long()
        k, v = _context(k_cache, blocks, n), _context(v_cache, blocks, n)
        qi = q[i].reshape(NUM_KV_HEADS, group, HEAD_DIM)
        p = torch.softmax(torch.einsum("hgd,hnd->hgn", qi, k) * SM_SCALE, -1)
        attn[i] = torch.einsum("hgn,hnd->hgd", p, v).reshape(NUM_Q_HEADS, HEAD_DIM)
    h1 = attn.reshape(t, -1) @ w["w_o"] + x
    h2 = _rmsnorm(h1, w["w_norm2"])
    logits = h2 @ w["w_router"]
    probs, ids = torch.topk(torch.softmax(logits, -1), TOP_K, -1)
    probs = probs / probs.sum(-1, keepdim=True)
    out = h1.clone()
    for e in range(NUM_EXPERTS):
        token, slot = torch.nonzero(ids == e, as_tuple=True)
        if token.numel():
            up = h2[token] @ weights["w_up"][e].double()
            y = (F.silu(up[:, :FFN]) * up[:, FFN:]) @ weights["w_down"][e].double()
            out.index_add_(0, token, y * probs[token, slot][:, None])
    return out, logits, k_new, v_new


def eager_step(x, positions, slots, block_table, context_lens, w, num_blocks):
    """The step as a PyTorch user writes it, in bf16 (fp32 where a kernel would accumulate):
    the KV cache written by index, the context gathered through the block table (its first
    ``num_blocks`` blocks: the longest context's) for SDPA with a length mask, and the MoE
    as a loop over the experts. Returns the step's output; the cache is written in place."""
    t = x.shape[0]
    h = _rmsnorm(x.float(), w["w_norm"].float()).to(x.dtype)
    heads = (h @ w["w_qkv"]).reshape(t, -1, HEAD_DIM)
    rot = _rotate(heads[:, : NUM_Q_HEADS + NUM_KV_HEADS].float(), positions).to(x.dtype)
    q, k, v = rot[:, :NUM_Q_HEADS], rot[:, NUM_Q_HEADS:], heads[:, NUM_Q_HEADS + NUM_KV_HEADS :]
    block, within = (slots // BLOCK_SIZE).long(), (slots % BLOCK_SIZE).long()
    w["k_cache"][block, :, within] = k
    w["v_cache"][block, :, within] = v
    table = block_table[:, :num_blocks].long()
    length = num_blocks * BLOCK_SIZE

    def gathered(cache):
        return cache[table].permute(0, 2, 1, 3, 4).reshape(t, NUM_KV_HEADS, length, HEAD_DIM)

    mask = (torch.arange(length, device=x.device)[None, :] < context_lens[:, None])[:, None, None]
    attn = F.scaled_dot_product_attention(
        q[:, :, None], gathered(w["k_cache"]), gathered(w["v_cache"]), attn_mask=mask,
        scale=SM_SCALE, enable_gqa=True,
    )  # fmt: skip
    h1 = attn.reshape(t, -1) @ w["w_o"] + x
    h2 = _rmsnorm(h1.float(), w["w_norm2"].float()).to(x.dtype)
    probs, ids = torch.topk(torch.softmax((h2 @ w["w_router"]).float(), -1), TOP_K, -1)
    probs = probs / probs.sum(-1, keepdim=True)
    out = h1.float()
    for e in range(NUM_EXPERTS):
        token, slot = torch.nonzero(ids == e, as_tuple=True)
        up = h2[token] @ w["w_up"][e]
        y = (F.silu(up[:, :FFN]) * up[:, FFN:]) @ w["w_down"][e]
        out.index_add_(0, token, y.float() * probs[token, slot][:, None])
    return out.to(x.dtype)

"""The decode kernels' example arguments and references, as aotc's recipe keys ``inputs``
and ``reference`` call them (recipes/decode.toml). Sizes of a Llama-3-8B-like model: 32
query heads sharing 8 KV heads, head dim 128, KV-cache blocks of 16 tokens."""

import importlib.util
import math
from pathlib import Path

import torch


def _sibling(name):
    """A module of this folder by file (several recipe folders have a reference.py)."""
    spec = importlib.util.spec_from_file_location(
        f"decode_{name}", Path(__file__).with_name(f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ref = _sibling("reference")
paged_inputs, paged_reference, ragged_context_lens = (
    _ref.paged_inputs,
    _ref.paged_reference,
    _ref.ragged_context_lens,
)

NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16


def paged_decode_inputs(sizes, dtypes, device="cuda", ragged=False):
    """One decode token per sequence, at the bucket's bound: every context fills the block
    table (what the bucket stands for, and what tune.bytes counts), but for three ragged
    ones at the end once there are four or more sequences (1 token, one past a block, one
    short of two), so that verification still meets partial blocks. ``ragged``: lengths
    from 1 to the table's width instead (the GPU tests)."""
    num_seqs, max_blocks = sizes["num_seqs"], sizes["max_blocks_per_seq"]
    max_len = max_blocks * BLOCK_SIZE
    lens = (ragged_context_lens(num_seqs, max_len, BLOCK_SIZE) if ragged
            else full_then_ragged(num_seqs, max_len))  # fmt: skip
    q, k, v, table, ctx = paged_inputs(lens, NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE,
                                       dtypes["T"], device=device)  # fmt: skip
    table = _widen(table, max_blocks)
    out = torch.empty_like(q)
    return [q, k, v, table, ctx, out, 1 / math.sqrt(HEAD_DIM), num_seqs, max_blocks,
            q.stride(0), q.stride(1), *k.stride()[:3], *v.stride()[:3], table.stride(0),
            out.stride(0), out.stride(1)]  # fmt: skip


def full_then_ragged(num_seqs, max_len):
    lens = [max_len] * num_seqs
    if num_seqs >= 4:
        lens[-3:] = [1, min(max_len, BLOCK_SIZE + 1), max(1, min(max_len, 2 * BLOCK_SIZE - 1))]
    return lens


def paged_decode_reference(q, k, v, table, ctx, out, sm_scale, *rest):
    return {"out_ptr": paged_reference(q, k, v, table, ctx, sm_scale)}


# -- split-KV (flash-decoding): few sequences, long contexts --------------------------------

# recipes/decode.toml's: 32 splits x 8 KV heads fill the SMs twice at one sequence; each
# range at least MIN_SPLIT tokens, a meta-parameter the build tunes (this is its default)
NUM_SPLITS, MIN_SPLIT = 32, 512


def paged_decode_split_inputs(sizes, dtypes, device="cuda"):
    """Every context the table's full width, partials in fp32 scratch (the narrower
    tables use fewer than 32 ranges: the others hold the neutral partial)."""
    num_seqs, max_blocks = sizes["num_seqs"], sizes["max_blocks_per_seq"]
    lens = [max_blocks * BLOCK_SIZE] * num_seqs
    q, k, v, table, ctx = paged_inputs(lens, NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE,
                                       dtypes["T"], device=device)  # fmt: skip
    rows = (num_seqs, NUM_Q_HEADS, NUM_SPLITS)  # an empty range's output row stays zero
    scratch = [torch.zeros(*rows, HEAD_DIM, dtype=torch.float32, device=device),
               torch.empty(rows, dtype=torch.float32, device=device),
               torch.empty(rows, dtype=torch.float32, device=device)]  # fmt: skip
    table = _widen(table, max_blocks)
    strides = [q.stride(0), q.stride(1), *k.stride()[:3], *v.stride()[:3], table.stride(0)]
    return [q, k, v, table, ctx, *scratch, 1 / math.sqrt(HEAD_DIM), num_seqs, max_blocks,
            *strides]  # fmt: skip


def paged_decode_split_reference(q, k, v, table, ctx, part_out, part_max, part_sum, sm_scale,
                                 *rest, config=None):  # fmt: skip
    """The partials of the candidate's ranges: MIN_SPLIT is in the search space."""
    min_split = (config or {}).get("MIN_SPLIT", MIN_SPLIT)
    out, mx, total = _ref.split_reference(q, k, v, table, ctx, sm_scale, NUM_SPLITS, min_split)
    return {"part_out_ptr": out, "part_max_ptr": mx, "part_sum_ptr": total}


def paged_decode_reduce_inputs(sizes, dtypes, device="cuda"):
    """Partials of a few sequences, some splits neutral (an empty range's), whose output
    rows hold NaN: the split kernel never writes them, so nothing may read them into a sum."""
    num_seqs = sizes["num_seqs"]
    g = torch.Generator().manual_seed(num_seqs)
    rows = (num_seqs, NUM_Q_HEADS, NUM_SPLITS)
    part_out = torch.randn(*rows, HEAD_DIM, generator=g)
    part_max = torch.randn(rows, generator=g) * 4
    part_sum = torch.rand(rows, generator=g) * 8 + 1
    empty = torch.rand(rows, generator=g) < 0.25
    empty[..., 0] = False
    part_out[empty], part_max[empty], part_sum[empty] = float("nan"), _ref.NEUTRAL_MAX, 0.0
    dt = _ref.DTYPES[dtypes["T"]]
    out = torch.empty(num_seqs, NUM_Q_HEADS, HEAD_DIM, dtype=dt, device=device)
    return [part_out.to(device), part_max.to(device), part_sum.to(device), out, num_seqs,
            out.stride(0), out.stride(1)]  # fmt: skip


def paged_decode_reduce_reference(part_out, part_max, part_sum, out, *rest):
    m = part_max.double().max(-1, keepdim=True).values
    w = torch.exp2(part_max.double() - m)
    total = (part_sum.double() * w).sum(-1)
    written = torch.where((part_sum > 0)[..., None], part_out.double(), 0.0)
    return {"out_ptr": (written * w[..., None]).sum(-2) / total[..., None]}


def _i32(values, device):
    return torch.as_tensor(values, dtype=torch.int32).to(device)


def _widen(table, max_blocks):
    """The block table padded (with its first block: never read past a context) to the
    bucket's width, as a serving engine allocates it."""
    if table.shape[1] >= max_blocks:
        return table[:, :max_blocks].contiguous()
    pad = table[:, :1].expand(-1, max_blocks - table.shape[1])
    return torch.cat([table, pad], dim=1).contiguous()


# -- MoE: the gate/up grouped GEMM with SiLU-and-mul fused, Mixtral-8x7B sizes -------------

NUM_EXPERTS, TOP_K, HIDDEN, FFN = 8, 2, 4096, 14336


def moe_up_inputs(sizes, dtypes, device="cuda", config=None):
    """The routed pairs of num_pairs // 2 tokens, aligned to the candidate's BLOCK_M, as the
    service aligns them with launch_config()'s BLOCK_M (the routing is torch's, so that
    preparing inputs compiles nothing)."""
    block_m = (config or {}).get("BLOCK_M", 16)
    tokens = max(1, sizes["num_pairs"] // TOP_K)
    x, logits, w1, _ = _ref.moe_inputs(tokens, NUM_EXPERTS, HIDDEN, FFN, dtypes["T"], device)
    weights, ids = _ref.topk_reference(logits, TOP_K)
    sorted_ids, expert_ids, total = _ref.align_reference(ids, NUM_EXPERTS, block_m)
    pairs = ids.numel()
    c = torch.empty(pairs, FFN, device=device, dtype=x.dtype)
    return [x, w1, c, weights.float().to(device), _i32(sorted_ids, device),
            _i32(expert_ids, device), _i32([total], device), pairs, FFN, HIDDEN, x.stride(0),
            w1.stride(0), w1.stride(1), w1.stride(2), c.stride(0)]  # fmt: skip


def moe_up_reference(x, w1, c, weights, sorted_ids, expert_ids, total, pairs, *rest):
    """c[pair] = silu(x[token] @ W_gate[e]) * (x[token] @ W_up[e]) for each routed pair."""
    out = torch.zeros(c.shape, dtype=torch.float64, device=c.device)
    ids = torch.full((pairs,), -1, dtype=torch.long)
    blocks = expert_ids.long().cpu()
    block_m = (len(sorted_ids) - pairs) // NUM_EXPERTS + 1  # its length: pairs + E (BM - 1)
    for slot, pair in enumerate(sorted_ids.long().cpu().tolist()):
        if pair < pairs:
            ids[pair] = blocks[slot // block_m]
    for e in range(w1.shape[0]):
        mine = torch.nonzero(ids == e).reshape(-1).to(c.device)
        if mine.numel():
            out[mine] = _ref.expert_up(x[mine // TOP_K], w1, e)
    return {"c_ptr": out}


# -- the decode step's rotary embedding and KV-cache write ---------------------------------

ROPE_THETA = 500000.0  # Llama 3's
_rot = _sibling("rotary")


def rotary_cache_inputs(sizes, dtypes, device="cuda"):
    """num_tokens tokens at scattered positions, written to scattered slots of a cache one
    block larger than they need; the last token, once there are two, has slot -1 (a
    graph's padded row), which must write nothing."""
    t = sizes["num_tokens"]
    dt = _ref.DTYPES[dtypes["T"]]
    g = torch.Generator().manual_seed(t)
    width = (NUM_Q_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM
    qkv = torch.randn(t, width, generator=g).to(dt).to(device)
    positions = torch.randint(0, 32768, (t,), generator=g, dtype=torch.int32).to(device)
    blocks = -(-t // BLOCK_SIZE) + 1
    slots = torch.randperm(blocks * BLOCK_SIZE, generator=g)[:t].to(torch.int32)
    if t >= 2:
        slots[-1] = -1
    k_cache = torch.zeros(blocks, NUM_KV_HEADS, BLOCK_SIZE, HEAD_DIM, dtype=dt, device=device)
    v_cache = torch.zeros_like(k_cache)
    q_out = torch.empty(t, NUM_Q_HEADS * HEAD_DIM, dtype=dt, device=device)
    return [qkv, positions, slots.to(device), q_out, k_cache, v_cache, t, blocks * BLOCK_SIZE,
            ROPE_THETA, qkv.stride(0), q_out.stride(0), *k_cache.stride()[:3],
            *v_cache.stride()[:3]]  # fmt: skip


def rotary_cache_reference(qkv, positions, slots, q_out, k_cache, v_cache, t, num_slots,
                           theta, *strides):  # fmt: skip
    q, k, v = _rot.rotary_reference(qkv, positions, slots, k_cache, v_cache, NUM_Q_HEADS,
                                    NUM_KV_HEADS, HEAD_DIM, theta)  # fmt: skip
    return {"q_out_ptr": q, "k_cache_ptr": k, "v_cache_ptr": v}


# -- the decode step's MoE, as its CUDA graph runs it ----------------------------------------
# A graph aligns the routed pairs once to GRAPH_ALIGN rows (the largest BLOCK_M the GEMMs may
# launch), whatever BLOCK_M each GEMM was tuned to (moe_gemm's ALIGN).

GRAPH_ALIGN = 64


def topk_inputs(sizes, dtypes, device="cuda"):
    """Router logits with no two equal in a row (distinct multiples of a row's step, exact in
    bf16): the build compares the ids exactly, and which of two equal logits a top-k keeps
    is its own rule (the kernel's: the lower expert; torch.topk's on a GPU: unspecified).
    The steps differ from row to row, and so do the weights."""
    t = sizes["num_tokens"]
    g = torch.Generator().manual_seed(t)
    ranks = torch.stack([torch.randperm(NUM_EXPERTS, generator=g) for _ in range(t)])
    step = torch.randint(1, 6, (t, 1), generator=g) * 0.25
    dt = _ref.DTYPES[dtypes["T"]]
    logits = (ranks.float() * step - 2.0).to(dt).to(device)
    weights = torch.empty(t * TOP_K, dtype=torch.float32, device=device)
    ids = torch.empty(t * TOP_K, dtype=torch.int32, device=device)
    return [logits, weights, ids, t, logits.stride(0)]


def topk_reference(logits, weights, ids, *rest):
    w, i = _ref.topk_reference(logits, TOP_K)
    return {"weights_ptr": w.reshape(-1), "ids_ptr": i.reshape(-1)}


def align_inputs(sizes, dtypes, device="cuda"):
    """num_pairs // 2 tokens' two distinct experts each, aligned to GRAPH_ALIGN."""
    pairs = sizes["num_pairs"]
    g = torch.Generator().manual_seed(pairs)
    ids = torch.stack([torch.randperm(NUM_EXPERTS, generator=g)[:TOP_K]
                       for _ in range(-(-pairs // TOP_K))]).reshape(-1)[:pairs]  # fmt: skip
    capacity = pairs + NUM_EXPERTS * (GRAPH_ALIGN - 1)
    out = [torch.empty(n, dtype=torch.int32, device=device)
           for n in (capacity, capacity // GRAPH_ALIGN, 1)]  # fmt: skip
    return [_i32(ids, device), *out, pairs]


def align_reference(ids, sorted_ids, expert_ids, total, pairs):
    s, e, at = _ref.align_reference(ids, NUM_EXPERTS, GRAPH_ALIGN)  # on the CPU
    return {"sorted_ids_ptr": s.to(ids.device), "expert_ids_ptr": e.to(ids.device),
            "num_post_padded_ptr": torch.tensor([at], device=ids.device)}  # fmt: skip


def moe_step_up_inputs(sizes, dtypes, device="cuda", config=None):
    """As moe_up_inputs, but aligned to GRAPH_ALIGN, whatever the candidate's BLOCK_M."""
    return moe_up_inputs(sizes, dtypes, device, config={"BLOCK_M": GRAPH_ALIGN})


def moe_step_down_inputs(sizes, dtypes, device="cuda"):
    """The down projection of num_pairs routed rows of the FFN activation, each scaled by
    its routing weight, aligned to GRAPH_ALIGN."""
    pairs = sizes["num_pairs"]
    dt = _ref.DTYPES[dtypes["T"]]
    logits = torch.randn(-(-pairs // TOP_K), NUM_EXPERTS, device=device)
    weights, ids = (t.reshape(-1)[:pairs] for t in _ref.topk_reference(logits, TOP_K))
    act = torch.randn(pairs, FFN, device=device).to(dt)
    w2 = (torch.randn(NUM_EXPERTS, FFN, HIDDEN, device=device) * FFN**-0.5).to(dt)
    sorted_ids, expert_ids, total = _ref.align_reference(ids, NUM_EXPERTS, GRAPH_ALIGN)
    c = torch.empty(pairs, HIDDEN, device=device, dtype=dt)
    return [act, w2, c, weights.float().to(device), _i32(sorted_ids, device),
            _i32(expert_ids, device), _i32([total], device), pairs, HIDDEN, FFN, act.stride(0),
            w2.stride(0), w2.stride(1), w2.stride(2), c.stride(0)]  # fmt: skip


def moe_step_down_reference(act, w2, c, weights, sorted_ids, expert_ids, total, pairs, *rest):
    """c[pair] = weight[pair] * act[pair] @ W_down[expert(pair)]."""
    out = torch.zeros(c.shape, dtype=torch.float64, device=c.device)
    expert = torch.full((pairs,), -1, dtype=torch.long)
    blocks = expert_ids.long().cpu()
    for slot, pair in enumerate(sorted_ids.long().cpu().tolist()):
        if pair < pairs:
            expert[pair] = blocks[slot // GRAPH_ALIGN]
    for e in range(NUM_EXPERTS):
        mine = torch.nonzero(expert == e).reshape(-1).to(c.device)
        if mine.numel():
            out[mine] = (act[mine].double() @ w2[e].double()) * weights[mine].double()[:, None]
    return {"c_ptr": out}


def combine_inputs(sizes, dtypes, device="cuda"):
    t = sizes["num_tokens"]
    dt = _ref.DTYPES[dtypes["T"]]
    down = torch.randn(t * TOP_K, HIDDEN, device=device).to(dt)
    weights = torch.rand(t * TOP_K, device=device)
    res = torch.randn(t, HIDDEN, device=device).to(dt)
    out = torch.empty_like(res)
    return [down, weights, res, out, t, HIDDEN, down.stride(0), out.stride(0)]


def combine_reference(down, weights, res, out, t, *rest):
    return {"out_ptr": down.double().reshape(t, TOP_K, -1).sum(1) + res.double()}

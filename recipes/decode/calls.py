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


def paged_decode_inputs(sizes, dtypes, device="cuda"):
    """One decode token per sequence; ragged contexts up to the bucket's table width."""
    num_seqs, max_blocks = sizes["num_seqs"], sizes["max_blocks_per_seq"]
    lens = ragged_context_lens(num_seqs, max_blocks * BLOCK_SIZE, BLOCK_SIZE)
    q, k, v, table, ctx = paged_inputs(lens, NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE,
                                       dtypes["T"], device=device)  # fmt: skip
    table = _widen(table, max_blocks)
    out = torch.empty_like(q)
    return [q, k, v, table, ctx, out, 1 / math.sqrt(HEAD_DIM), num_seqs, max_blocks,
            q.stride(0), q.stride(1), *k.stride()[:3], *v.stride()[:3], table.stride(0),
            out.stride(0), out.stride(1)]  # fmt: skip


def paged_decode_reference(q, k, v, table, ctx, out, sm_scale, *rest):
    return {"out_ptr": paged_reference(q, k, v, table, ctx, sm_scale)}


def _widen(table, max_blocks):
    """The block table padded (with its first block: never read past a context) to the
    bucket's width, as a serving engine allocates it."""
    if table.shape[1] >= max_blocks:
        return table[:, :max_blocks].contiguous()
    pad = table[:, :1].expand(-1, max_blocks - table.shape[1])
    return torch.cat([table, pad], dim=1).contiguous()

"""Probe: the split-KV paged decode reading its K/V pages through TMA (issue 20), through
Triton's JIT. Not a benchmark of the bundle.

    python benchmarks/probe_decode_tma.py [--json out.json] [--modes pair,tma]
        [--shapes 1x32768,16x4096]

At one sequence × 32k the pair reads 77–80% of the copy bandwidth and its split kernel
alone 82–83% (benchmarks/RESULTS.md, issue 20). The recipe's split kernel gathers its keys
token by token with pointer loads (each token's block looked up in the table). But the
cache's layout, [num_blocks, num_kv_heads, BLOCK_SIZE, HEAD_DIM], keeps one head's block of
16 tokens contiguous (4 KiB at fp16): one TMA box of [BLOCK_SIZE, HEAD_DIM] over the cache
viewed as [num_blocks * num_kv_heads * BLOCK_SIZE, HEAD_DIM], whose row is (block *
num_kv_heads + head) * BLOCK_SIZE. ``split_tma`` walks PAGES such blocks per iteration,
each a descriptor load, with the same online softmax and the same scratch as the recipe's
split kernel, so the recipe's reduce combines it. Stale rows past a context's end are
masked out of the scores, and zeroed in V (a freed block may hold NaN).

Modes, each over its configs, timed as CUDA-graph replays (medians):
- ``pair``: the recipe's split kernel and its reduce (``READ_ALL`` true and false);
- ``tma``: ``split_tma`` and the recipe's reduce;
- ``tma alone`` and ``split alone``: the split kernels without the reduce (bounds);
- ``read``: a kernel that only reads the same K and V bytes, contiguous, and sums them:
  the ceiling any decode kernel has on this GPU.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from benchmarks.probe_split_kv import (  # noqa: E402
    BLOCK,
    HKV,
    HQ,
    D,
    modes_main,
    pa,
    time_modes,
)

_split = pa.paged_decode_split
_reduce = pa.paged_decode_reduce
SHAPES = [(1, 32768), (1, 8192), (2, 32768), (16, 4096)]
MODES = ("pair", "tma", "split alone", "tma alone", "read")
_LOG2E = tl.constexpr(1.4426950408889634)
NEUTRAL_MAX = tl.constexpr(-3.0e38)


@triton.jit
def _page(desc, table_row, page, n_pages, kv_head, num_kv_heads, BLOCK_SIZE: tl.constexpr):
    """One head's block of the cache, [BLOCK_SIZE, HEAD_DIM], through the descriptor (a page
    past the range reads block 0, masked by the caller)."""
    block = tl.load(table_row + page, mask=page < n_pages, other=0)
    return desc.load([(block * num_kv_heads + kv_head) * BLOCK_SIZE, 0])


@triton.jit
def split_tma(q_ptr, k_desc, v_desc, block_table_ptr, context_lens_ptr, part_out_ptr,  # noqa: PLR0915
              part_max_ptr, part_sum_ptr, sm_scale, num_seqs, max_blocks_per_seq,
              stride_q_seq, stride_q_head, stride_bt_seq, num_kv_heads,
              HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, QUERIES_PER_KV: tl.constexpr,
              NUM_SPLITS: tl.constexpr, MIN_SPLIT: tl.constexpr, PAGES: tl.constexpr):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    if seq >= num_seqs:
        return
    ROWS: tl.constexpr = max(16, triton.next_power_of_2(QUERIES_PER_KV))
    qk_scale = sm_scale * _LOG2E
    n_ctx = tl.minimum(tl.load(context_lens_ptr + seq), max_blocks_per_seq * BLOCK_SIZE)
    per_split = tl.maximum(tl.cdiv(tl.cdiv(n_ctx, NUM_SPLITS), BLOCK_SIZE) * BLOCK_SIZE,
                           MIN_SPLIT)  # fmt: skip
    lo = split * per_split
    hi = tl.minimum(lo + per_split, n_ctx)
    offs_g = tl.arange(0, ROWS)
    heads = kv_head * QUERIES_PER_KV + offs_g
    row = (seq.to(tl.int64) * num_kv_heads * QUERIES_PER_KV + heads) * NUM_SPLITS + split
    mask = offs_g < QUERIES_PER_KV
    if lo >= hi:
        tl.store(part_max_ptr + row, tl.full([ROWS], NEUTRAL_MAX, tl.float32), mask=mask)
        tl.store(part_sum_ptr + row, tl.zeros([ROWS], tl.float32), mask=mask)
        return
    q_ptrs = q_ptr + seq.to(tl.int64) * stride_q_seq + heads[:, None] * stride_q_head
    q = tl.load(q_ptrs + tl.arange(0, HEAD_DIM)[None, :], mask=mask[:, None], other=0.0)
    table_row = block_table_ptr + seq.to(tl.int64) * stride_bt_seq
    n_pages = tl.cdiv(hi, BLOCK_SIZE)
    offs_n = tl.arange(0, BLOCK_SIZE)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_SIZE * PAGES):
        p0 = start // BLOCK_SIZE
        k0 = _page(k_desc, table_row, p0, n_pages, kv_head, num_kv_heads, BLOCK_SIZE)
        ok0 = start + offs_n < hi
        s0 = tl.where(ok0[None, :], tl.dot(q, tl.trans(k0)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s0, 1))
        if PAGES >= 2:
            k1 = _page(k_desc, table_row, p0 + 1, n_pages, kv_head, num_kv_heads, BLOCK_SIZE)
            ok1 = start + BLOCK_SIZE + offs_n < hi
            s1 = tl.where(ok1[None, :], tl.dot(q, tl.trans(k1)) * qk_scale, float("-inf"))
            m_new = tl.maximum(m_new, tl.max(s1, 1))
        if PAGES >= 4:
            k2 = _page(k_desc, table_row, p0 + 2, n_pages, kv_head, num_kv_heads, BLOCK_SIZE)
            ok2 = start + 2 * BLOCK_SIZE + offs_n < hi
            s2 = tl.where(ok2[None, :], tl.dot(q, tl.trans(k2)) * qk_scale, float("-inf"))
            k3 = _page(k_desc, table_row, p0 + 3, n_pages, kv_head, num_kv_heads, BLOCK_SIZE)
            ok3 = start + 3 * BLOCK_SIZE + offs_n < hi
            s3 = tl.where(ok3[None, :], tl.dot(q, tl.trans(k3)) * qk_scale, float("-inf"))
            m_new = tl.maximum(m_new, tl.maximum(tl.max(s2, 1), tl.max(s3, 1)))
        alpha = tl.math.exp2(m_i - m_new)
        acc = acc * alpha[:, None]
        pr0 = tl.math.exp2(s0 - m_new[:, None])
        l_i = l_i * alpha + tl.sum(pr0, 1)
        v0 = _page(v_desc, table_row, p0, n_pages, kv_head, num_kv_heads, BLOCK_SIZE)
        acc = tl.dot(pr0.to(v0.dtype), tl.where(ok0[:, None], v0, 0.0), acc)
        if PAGES >= 2:
            pr1 = tl.math.exp2(s1 - m_new[:, None])
            l_i += tl.sum(pr1, 1)
            v1 = _page(v_desc, table_row, p0 + 1, n_pages, kv_head, num_kv_heads, BLOCK_SIZE)
            acc = tl.dot(pr1.to(v1.dtype), tl.where(ok1[:, None], v1, 0.0), acc)
        if PAGES >= 4:
            pr2 = tl.math.exp2(s2 - m_new[:, None])
            pr3 = tl.math.exp2(s3 - m_new[:, None])
            l_i += tl.sum(pr2, 1) + tl.sum(pr3, 1)
            v2 = _page(v_desc, table_row, p0 + 2, n_pages, kv_head, num_kv_heads, BLOCK_SIZE)
            acc = tl.dot(pr2.to(v2.dtype), tl.where(ok2[:, None], v2, 0.0), acc)
            v3 = _page(v_desc, table_row, p0 + 3, n_pages, kv_head, num_kv_heads, BLOCK_SIZE)
            acc = tl.dot(pr3.to(v3.dtype), tl.where(ok3[:, None], v3, 0.0), acc)
        m_i = m_new
    offs_d = tl.arange(0, HEAD_DIM)
    tl.store(part_max_ptr + row, tl.maximum(m_i, NEUTRAL_MAX), mask=mask)
    tl.store(part_sum_ptr + row, l_i, mask=mask)
    tl.store(part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=mask[:, None])


@triton.jit
def read_sum(x_ptr, y_ptr, out_ptr, per_program, BLOCK: tl.constexpr):
    """Sum per_program elements of x and of y from this program's start: bytes read, no
    more (the ceiling of a kernel that reads K and V once)."""
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * per_program
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, per_program, BLOCK):
        offs = base + start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs).to(tl.float32) + tl.load(y_ptr + offs).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, 0))


def configs(mode: str) -> list[dict[str, Any]]:
    if mode == "read":
        return [dict(programs=p, block=b, num_warps=w, num_stages=s)
                for p, b, w, s in itertools.product((264, 528, 1056), (2048, 4096),
                                                    (4, 8), (2, 3, 4))]  # fmt: skip
    if mode.startswith("tma"):
        return [dict(min_split=m, pages=g, num_warps=w, num_stages=s)
                for m, g, w, s in itertools.product((256, 512), (1, 2, 4), (4,),
                                                    (2, 3, 4, 6))]  # fmt: skip
    return [dict(min_split=m, block_n=b, num_warps=w, num_stages=s, read_all=r)
            for m, b, w, s, r in itertools.product((256, 512), (64, 128), (4,), (2, 3, 4),
                                                   (False, True))
            if not (r and mode.endswith("alone"))]  # no reduce to vary  # fmt: skip


def launcher(mode: str, p: Any, out: Any, scratch: Any, cfg: dict[str, Any]) -> Any:
    q, kc, vc, table, lens, scale = p.q, p.k_cache, p.v_cache, p.table, p.lens, p.scale
    seqs = q.shape[0]
    grid_s, grid_r = (seqs, HKV, 32), (seqs, HQ)
    if mode == "read":
        x, y = kc.view(-1), vc.view(-1)
        per = x.numel() // cfg["programs"] // cfg["block"] * cfg["block"]  # in bounds
        sums = torch.empty(cfg["programs"], dtype=torch.float32, device=q.device)
        return lambda: read_sum[(cfg["programs"],)](x, y, sums, per, BLOCK=cfg["block"],
                                                    num_warps=cfg["num_warps"],
                                                    num_stages=cfg["num_stages"])  # fmt: skip
    common = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], HEAD_DIM=D,
                  BLOCK_SIZE=BLOCK, QUERIES_PER_KV=HQ // HKV, NUM_SPLITS=32,
                  MIN_SPLIT=cfg["min_split"])  # fmt: skip
    if mode.startswith("tma"):
        k2, v2 = (t.view(-1, D) for t in (kc, vc))
        kd, vd = (TensorDescriptor(t, list(t.shape), list(t.stride()), [BLOCK, D])
                  for t in (k2, v2))  # fmt: skip

        def split() -> None:
            split_tma[grid_s](q, kd, vd, table, lens, *scratch, scale, seqs, table.shape[1],
                              q.stride(0), q.stride(1), table.stride(0), HKV,
                              PAGES=cfg["pages"], **common)  # fmt: skip
    else:

        def split() -> None:
            _split[grid_s](q, kc, vc, table, lens, *scratch, scale, seqs, table.shape[1],
                           q.stride(0), q.stride(1), kc.stride(0), kc.stride(1),
                           kc.stride(2), vc.stride(0), vc.stride(1), vc.stride(2),
                           table.stride(0), BLOCK_N=cfg["block_n"], **common)  # fmt: skip

    def run() -> None:
        split()
        if not mode.endswith("alone"):
            _reduce[grid_r](*scratch, out, seqs, out.stride(0), out.stride(1), HEAD_DIM=D,
                            NUM_SPLITS=32, READ_ALL=cfg.get("read_all", seqs <= 4),
                            num_warps=1)  # fmt: skip

    return run


def read_bytes(mode: str, cfg: dict[str, Any], kv_bytes: int) -> int:
    """The read-only kernel reads each program's share rounded down to whole blocks."""
    if mode != "read":
        return kv_bytes
    return 4 * (kv_bytes // 4 // cfg["programs"] // cfg["block"] * cfg["block"]) * cfg["programs"]


def probe(seqs: int, ctx: int, copy: float, modes: list[str]) -> dict[str, Any]:
    return time_modes(seqs, ctx, copy, modes, configs, launcher,
                      lambda mode: mode in ("pair", "tma"), read_bytes)  # fmt: skip


def main() -> int:
    return modes_main(__doc__ or "", MODES, SHAPES, probe, "{cfg}")


if __name__ == "__main__":
    raise SystemExit(main())

"""Probe: why the split-KV paged decode reads the cache at 82% of the copy bandwidth where a
kernel that only reads the same bytes reaches 97% (issue 20), through Triton's JIT. Not a
benchmark of the bundle.

    python benchmarks/probe_decode_stream.py [--json out.json] [--modes split,prefetch]
        [--shapes 1x32768,16x4096]

At one sequence × 32k, the split kernel's best config (BLOCK_N 128, two stages, 256
programs) holds 64 KiB of K and V in flight per SM, yet each SM reads only ~27 GB/s: about
2.4 µs per tile, three times the memory's latency. One suspect is the block table: a
tile's K and V addresses come from a load of its table entries in the same iteration, so
the next tile's loads wait for that load first. Modes, CUDA-graph medians:
- ``split``: the recipe's split kernel alone, at 32, 64 and 128 ranges;
- ``prefetch``: the same kernel with each tile's table entries loaded one iteration
  ahead, so that the next tile's K and V addresses are ready when its loads are issued;
- ``prefetch evict``: and its K and V loads marked evict-first (read once);
- ``gather``: a kernel that reads the same tiles through the table, no arithmetic but a
  sum (the ceiling of the paged layout at this parallelism);
- ``pair``: the recipe's split kernel and its reduce (``READ_ALL``), at 32, 64 and 128
  ranges; ``prefetch pair``: the prefetching kernel and the recipe's reduce.

The recipe's split kernel has since taken the prefetch as ``LOOKAHEAD``
(``_attend_ahead``); the copy here, with its eviction option, is the probe as it ran
(benchmarks/data/h200-decode-step/probe-stream/).
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

from benchmarks.probe_split_kv import (  # noqa: E402
    BLOCK,
    HKV,
    HQ,
    D,
    decode_problem,
    graph_us,
    modes_main,
    pa,
)

SHAPES = [(1, 32768), (16, 4096), (2, 32768)]
MODES = ("split", "prefetch", "prefetch evict", "gather", "pair", "prefetch pair")
_LOG2E = tl.constexpr(1.4426950408889634)
NEUTRAL_MAX = tl.constexpr(-3.0e38)


@triton.jit
def _tile_blocks(table_row, start, hi, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    tok = start + tl.arange(0, BLOCK_N)
    return tl.load(table_row + tok // BLOCK_SIZE, mask=tok < hi, other=0).to(tl.int64)


@triton.jit
def _attend_prefetch(q, k_head, v_head, table_row, lo, hi, qk_scale, stride_k_block,
                     stride_k_tok, stride_v_block, stride_v_tok, HEAD_DIM: tl.constexpr,
                     BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                     EVICT: tl.constexpr):  # fmt: skip
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    nxt = _tile_blocks(table_row, lo, hi, BLOCK_SIZE, BLOCK_N)
    for start in range(lo, hi, BLOCK_N):
        block = nxt
        nxt = _tile_blocks(table_row, start + BLOCK_N, hi, BLOCK_SIZE, BLOCK_N)
        valid = start + offs_n < hi
        slot = (start + offs_n) % BLOCK_SIZE
        k_off = block * stride_k_block + slot * stride_k_tok
        k = tl.load(k_head + k_off[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0,
                    eviction_policy=EVICT)  # fmt: skip
        s = tl.where(valid[None, :], tl.dot(q, tl.trans(k)) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v_off = block * stride_v_block + slot * stride_v_tok
        v = tl.load(v_head + v_off[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0,
                    eviction_policy=EVICT)  # fmt: skip
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def split_prefetch(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, context_lens_ptr,
                   part_out_ptr, part_max_ptr, part_sum_ptr, sm_scale, num_seqs,
                   max_blocks_per_seq, stride_q_seq, stride_q_head, stride_kc_block,
                   stride_kc_head, stride_kc_tok, stride_vc_block, stride_vc_head,
                   stride_vc_tok, stride_bt_seq, HEAD_DIM: tl.constexpr,
                   BLOCK_SIZE: tl.constexpr, QUERIES_PER_KV: tl.constexpr,
                   BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr, MIN_SPLIT: tl.constexpr,
                   EVICT: tl.constexpr):  # fmt: skip
    """The recipe's paged_decode_split, its table entries loaded one tile ahead."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    if seq >= num_seqs:
        return
    ROWS: tl.constexpr = max(16, triton.next_power_of_2(QUERIES_PER_KV))
    n_ctx = pa._context(context_lens_ptr, seq, max_blocks_per_seq, BLOCK_SIZE)
    per_split = tl.maximum(tl.cdiv(tl.cdiv(n_ctx, NUM_SPLITS), BLOCK_SIZE) * BLOCK_SIZE,
                           MIN_SPLIT)  # fmt: skip
    lo = split * per_split
    hi = tl.minimum(lo + per_split, n_ctx)
    offs_g = tl.arange(0, ROWS)
    heads = kv_head * QUERIES_PER_KV + offs_g
    row = (seq.to(tl.int64) * tl.num_programs(1) * QUERIES_PER_KV + heads) * NUM_SPLITS + split
    mask = offs_g < QUERIES_PER_KV
    if lo >= hi:
        tl.store(part_max_ptr + row, tl.full([ROWS], NEUTRAL_MAX, tl.float32), mask=mask)
        tl.store(part_sum_ptr + row, tl.zeros([ROWS], tl.float32), mask=mask)
        return
    q = pa._load_queries(q_ptr, seq, kv_head, stride_q_seq, stride_q_head,
                         HEAD_DIM, QUERIES_PER_KV, ROWS)  # fmt: skip
    acc, l_i, m_i = _attend_prefetch(
        q, k_cache_ptr + kv_head.to(tl.int64) * stride_kc_head,
        v_cache_ptr + kv_head.to(tl.int64) * stride_vc_head,
        block_table_ptr + seq.to(tl.int64) * stride_bt_seq, lo, hi, sm_scale * _LOG2E,
        stride_kc_block, stride_kc_tok, stride_vc_block, stride_vc_tok,
        HEAD_DIM, BLOCK_SIZE, BLOCK_N, ROWS, EVICT)  # fmt: skip
    offs_d = tl.arange(0, HEAD_DIM)
    tl.store(part_max_ptr + row, tl.maximum(m_i, NEUTRAL_MAX), mask=mask)
    tl.store(part_sum_ptr + row, l_i, mask=mask)
    tl.store(part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=mask[:, None])


@triton.jit
def gather(k_cache_ptr, v_cache_ptr, block_table_ptr, out_ptr, ctx, stride_block,
           stride_head, stride_tok, stride_bt_seq, HEAD_DIM: tl.constexpr,
           BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr):  # fmt: skip
    """Sum this program's range of K and V, read through the table: the bytes, no math."""
    seq, head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    per = ctx // NUM_SPLITS
    table_row = block_table_ptr + seq.to(tl.int64) * stride_bt_seq
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    base = head.to(tl.int64) * stride_head
    end = split * per + per
    for start in range(split * per, end, BLOCK_N):
        tok = start + offs_n
        ok = tok < end
        block = tl.load(table_row + tok // BLOCK_SIZE, mask=ok, other=0).to(tl.int64)
        off = base + block * stride_block + (tok % BLOCK_SIZE) * stride_tok
        ptrs = off[:, None] + offs_d[None, :]
        k = tl.load(k_cache_ptr + ptrs, mask=ok[:, None], other=0.0)
        acc += k.to(tl.float32) + tl.load(v_cache_ptr + ptrs, mask=ok[:, None], other=0.0)
    pid = (seq * tl.num_programs(1) + head) * NUM_SPLITS + split
    tl.store(out_ptr + pid, tl.sum(tl.sum(acc, 1), 0))


def configs(mode: str) -> list[dict[str, Any]]:
    space = itertools.product((32, 64, 128), (64, 128), (2, 3, 4))
    return [dict(splits=s, block_n=b, num_warps=4, num_stages=st) for s, b, st in space]


def launcher(mode: str, p: Any, out: Any, scratch: Any, cfg: dict[str, Any]) -> Any:
    q, kc, vc, table, lens = p.q, p.k_cache, p.v_cache, p.table, p.lens
    seqs, splits = q.shape[0], cfg["splits"]
    grid = (seqs, HKV, splits)
    warps = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if mode == "gather":
        sums = torch.empty(seqs * HKV * splits, dtype=torch.float32, device=q.device)
        ctx = int(lens[0])
        return lambda: gather[grid](kc, vc, table, sums, ctx, kc.stride(0), kc.stride(1),
                                    kc.stride(2), table.stride(0), HEAD_DIM=D,
                                    BLOCK_SIZE=BLOCK, BLOCK_N=cfg["block_n"],
                                    NUM_SPLITS=splits, **warps)  # fmt: skip
    args = (q, kc, vc, table, lens, *scratch, p.scale, seqs, table.shape[1], q.stride(0),
            q.stride(1), kc.stride(0), kc.stride(1), kc.stride(2), vc.stride(0),
            vc.stride(1), vc.stride(2), table.stride(0))  # fmt: skip
    meta = dict(HEAD_DIM=D, BLOCK_SIZE=BLOCK, QUERIES_PER_KV=HQ // HKV,
                BLOCK_N=cfg["block_n"], NUM_SPLITS=splits, MIN_SPLIT=128, **warps)  # fmt: skip
    if mode.startswith("prefetch"):
        evict = "evict_first" if mode.endswith("evict") else ""
        kernel = split_prefetch[grid]
        split = lambda: kernel(*args, EVICT=evict, **meta)  # noqa: E731
    else:
        split = lambda: pa.paged_decode_split[grid](*args, **meta)  # noqa: E731

    def run() -> None:
        split()
        if mode.endswith("pair"):
            pa.paged_decode_reduce[(seqs, HQ)](*scratch, out, seqs, out.stride(0), out.stride(1),
                                               HEAD_DIM=D, NUM_SPLITS=splits,
                                               READ_ALL=seqs <= 4, num_warps=1)  # fmt: skip

    return run


def probe(seqs: int, ctx: int, copy: float, modes: list[str]) -> dict[str, Any]:
    p = decode_problem(seqs, ctx)
    rows = []
    for mode in modes:
        for cfg in configs(mode):
            scratch = pa.split_scratch(seqs, HQ, cfg["splits"], D, p.q)
            out = torch.full_like(p.q, float("nan"))
            try:
                us = graph_us(launcher(mode, p, out, scratch, cfg))
            except Exception as exc:  # a config that does not compile or launch
                print(f"  {mode} {cfg}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
                continue
            err = float((out.float() - p.expected).abs().max()) if "pair" in mode else 0.0
            label = " ".join(f"{k}={v}" for k, v in cfg.items())
            rows.append({**cfg, "cfg": label, "mode": mode, "us": us, "max_error": err,
                         "of_copy": p.kv_bytes / (us * 1e-6) / 1e9 / copy})  # fmt: skip
    best = {m: min((r for r in rows if r["mode"] == m), key=lambda r: r["us"]) for m in modes}
    for m, b in best.items():  # as it goes, in case a later shape fails
        print(f"  {seqs}x{ctx} {m}: {b['us']:.1f} us, {100 * b['of_copy']:.0f}% of copy, "
              f"{b['cfg']}", file=sys.stderr, flush=True)  # fmt: skip
    return {"seqs": seqs, "context": ctx, "flash_us": p.flash_us, "best": best, "rows": rows}


def main() -> int:
    return modes_main(__doc__ or "", MODES, SHAPES, probe, "{cfg}")


if __name__ == "__main__":
    raise SystemExit(main())

"""Probe: what the split-KV paged decode's combine costs, and two cheaper forms of it
(issue 20), through Triton's JIT. Not a benchmark of the bundle.

    python benchmarks/probe_decode_combine.py [--json out.json] [--modes pair,flat]
        [--shapes 1x32768,16x4096]

At one sequence × 32k the split kernel alone runs at 82% of the copy bandwidth and the
pair at 76% (benchmarks/data/h200-decode-step/probe-pdl/): the reduce costs 3 µs of 41.
Its loads are two round trips, one after the other: the partial outputs are read under a
mask made from the partial sums, so they wait for those. Ways to run the split kernel and
its combine, each over the same configs, timed as CUDA-graph replays (medians):
- ``pair``: the recipe's two kernels as they are (reduce at 1 and 4 warps);
- ``flat``: the recipe's split kernel, then its reduce with ``READ_ALL``: maxima, sums and
  every range's output row in one round trip, an empty range's row discarded by a select
  (the run in benchmarks/data/h200-decode-step/read-all/ timed this script's own copy of
  that reduce without the select, the scratch zeroed, before READ_ALL was in the recipe);
- ``fused``: one launch; the last range of each (sequence, KV head) to finish combines its
  group's query heads in one round trip (the one-launch form of b71ea4c combined the four
  heads one after another, two round trips each, and lost at every shape);
- ``split alone``: the split kernel without its combine (a bound, not a result).
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

_split = pa.paged_decode_split
_reduce = pa.paged_decode_reduce
SHAPES = [(1, 32768), (1, 8192), (2, 32768), (16, 4096), (8, 32768), (16, 32768)]
MODES = ("pair", "flat", "fused", "split alone")


@triton.jit
def split_fused(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, context_lens_ptr,
                part_out_ptr, part_max_ptr, part_sum_ptr, locks_ptr, out_ptr, sm_scale,
                num_seqs, max_blocks_per_seq, stride_q_seq, stride_q_head, stride_kc_block,
                stride_kc_head, stride_kc_tok, stride_vc_block, stride_vc_head,
                stride_vc_tok, stride_bt_seq, stride_o_seq, stride_o_head,
                HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                QUERIES_PER_KV: tl.constexpr, BLOCK_N: tl.constexpr,
                NUM_SPLITS: tl.constexpr, MIN_SPLIT: tl.constexpr):  # fmt: skip
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    if seq >= num_seqs:
        return
    _split(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, context_lens_ptr,
           part_out_ptr, part_max_ptr, part_sum_ptr, sm_scale, num_seqs,
           max_blocks_per_seq, stride_q_seq, stride_q_head, stride_kc_block,
           stride_kc_head, stride_kc_tok, stride_vc_block, stride_vc_head,
           stride_vc_tok, stride_bt_seq, HEAD_DIM, BLOCK_SIZE, QUERIES_PER_KV,
           BLOCK_N, NUM_SPLITS, MIN_SPLIT)  # fmt: skip
    tl.debug_barrier()
    lock = locks_ptr + seq * tl.num_programs(1) + kv_head
    arrived = tl.atomic_add(lock, 1, sem="acq_rel", scope="gpu")
    if arrived == NUM_SPLITS - 1:
        offs_g = tl.arange(0, QUERIES_PER_KV)
        offs_s = tl.arange(0, NUM_SPLITS)
        offs_d = tl.arange(0, HEAD_DIM)
        heads = kv_head * QUERIES_PER_KV + offs_g
        num_q_heads = tl.num_programs(1) * QUERIES_PER_KV
        row = (seq.to(tl.int64) * num_q_heads + heads[:, None]) * NUM_SPLITS + offs_s[None, :]
        m_s = tl.load(part_max_ptr + row, cache_modifier=".cg")  # [G, S]
        l_s = tl.load(part_sum_ptr + row, cache_modifier=".cg")
        o_s = tl.load(part_out_ptr + row[:, :, None] * HEAD_DIM + offs_d[None, None, :],
                      cache_modifier=".cg")  # fmt: skip
        m = tl.max(m_s, 1)
        w = tl.math.exp2(m_s - m[:, None])
        total = tl.sum(l_s * w, 1)
        o = tl.sum(o_s * w[:, :, None], 1) / tl.where(total > 0, total, 1.0)[:, None]
        o_ptrs = (out_ptr + seq.to(tl.int64) * stride_o_seq + heads[:, None] * stride_o_head
                  + offs_d[None, :])  # fmt: skip
        tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(lock, 0)


def configs() -> list[dict[str, int]]:
    space = itertools.product((128, 256, 512), (64, 128), (2, 3, 4), (1, 4))
    return [dict(num_splits=32, min_split=m, block_n=b, num_warps=4, num_stages=st,
                 reduce_warps=rw) for m, b, st, rw in space]  # fmt: skip


def launcher(mode: str, q, kc, vc, table, lens, out, scale, cfg, scratch, locks):
    seqs = q.shape[0]
    common = (scale, seqs, table.shape[1], q.stride(0), q.stride(1), kc.stride(0),
              kc.stride(1), kc.stride(2), vc.stride(0), vc.stride(1), vc.stride(2),
              table.stride(0))  # fmt: skip
    meta = dict(HEAD_DIM=D, BLOCK_SIZE=BLOCK, QUERIES_PER_KV=HQ // HKV, BLOCK_N=cfg["block_n"],
                NUM_SPLITS=cfg["num_splits"], MIN_SPLIT=cfg["min_split"],
                num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])  # fmt: skip
    grid_s, grid_r = (seqs, HKV, cfg["num_splits"]), (seqs, HQ)

    def run() -> None:
        if mode == "fused":
            split_fused[grid_s](q, kc, vc, table, lens, *scratch, locks, out, scale, *common[1:],
                                out.stride(0), out.stride(1), **meta)  # fmt: skip
            return
        _split[grid_s](q, kc, vc, table, lens, *scratch, *common, **meta)
        if mode != "split alone":
            _reduce[grid_r](*scratch, out, seqs, out.stride(0), out.stride(1), HEAD_DIM=D,
                            NUM_SPLITS=cfg["num_splits"], READ_ALL=mode == "flat",
                            num_warps=cfg["reduce_warps"])  # fmt: skip

    return run


def probe(seqs: int, ctx: int, copy: float, modes: list[str]) -> dict[str, Any]:
    p = decode_problem(seqs, ctx)
    q, kc, vc, table, lens, scale = p.q, p.k_cache, p.v_cache, p.table, p.lens, p.scale
    rows = []
    for cfg, mode in itertools.product(configs(), modes):
        if mode in ("fused", "split alone") and cfg["reduce_warps"] != 1:
            continue  # no reduce launch to vary
        # zeroed: an empty range never writes its output row, which fused reads
        scratch = tuple(torch.zeros_like(t) for t in pa.split_scratch(seqs, HQ, 32, D, q))
        locks = torch.zeros(seqs, HKV, dtype=torch.int32, device=q.device)
        out = torch.full_like(q, float("nan"))
        run = launcher(mode, q, kc, vc, table, lens, out, scale, cfg, scratch, locks)
        try:
            us = graph_us(run)
        except Exception as exc:  # a config that does not compile or launch
            print(f"  {mode} {cfg}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
            continue
        err = 0.0 if mode == "split alone" else float((out.float() - p.expected).abs().max())
        left = int(locks.abs().sum())
        rows.append({**cfg, "mode": mode, "us": us, "max_error": err, "locks_left": left,
                     "of_copy": p.kv_bytes / (us * 1e-6) / 1e9 / copy})  # fmt: skip
    best = {m: min((r for r in rows if r["mode"] == m), key=lambda r: r["us"]) for m in modes}
    return {"seqs": seqs, "context": ctx, "flash_us": p.flash_us, "best": best, "rows": rows}


def main() -> int:
    config = "min {min_split} block_n {block_n} w{num_warps} s{num_stages} r{reduce_warps}"
    return modes_main(__doc__ or "", MODES, SHAPES, probe, config)


if __name__ == "__main__":
    raise SystemExit(main())

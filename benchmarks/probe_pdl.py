"""Probe: programmatic dependent launch (PDL) for the split-KV paged decode pair
(recipes/decode/paged_attention.py), through Triton's JIT, at the shapes where the pair
trails flash or the copy bandwidth (issue 20). Not a benchmark of the bundle.

    python benchmarks/probe_pdl.py [--json out.json] [--modes pair,pdl] [--shapes 1x32768,16x4096]

Four ways to run the pair, each over the same configs, timed as CUDA-graph replays
(``do_bench_cudagraph``, medians):
- ``pair``: the recipe's two kernels as they are;
- ``pdl``: the reduce launched with PDL (``launch_pdl=True``), waiting in ``gdc_wait``
  for the split kernel's results: its launch overlaps the split kernel's tail;
- ``pdl+trigger``: the same, and every split program signals ``gdc_launch_dependents``
  as it starts, so the reduce's programs may become resident before the split ends;
- ``split alone``: the split kernel without its reduce (a bound, not a result).

(The number of ranges is the recipe's, 32: benchmarks/probe_split_kv.py varies it.)
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
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

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
MODES = ("pair", "pdl", "pdl+trigger", "split alone")


@triton.jit
def split_trigger(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, context_lens_ptr,
                  part_out_ptr, part_max_ptr, part_sum_ptr, sm_scale, num_seqs,
                  max_blocks_per_seq, stride_q_seq, stride_q_head, stride_kc_block,
                  stride_kc_head, stride_kc_tok, stride_vc_block, stride_vc_head,
                  stride_vc_tok, stride_bt_seq, HEAD_DIM: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, QUERIES_PER_KV: tl.constexpr,
                  BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
                  MIN_SPLIT: tl.constexpr):  # fmt: skip
    gdc_launch_dependents()
    _split(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, context_lens_ptr,
           part_out_ptr, part_max_ptr, part_sum_ptr, sm_scale, num_seqs,
           max_blocks_per_seq, stride_q_seq, stride_q_head, stride_kc_block,
           stride_kc_head, stride_kc_tok, stride_vc_block, stride_vc_head,
           stride_vc_tok, stride_bt_seq, HEAD_DIM, BLOCK_SIZE, QUERIES_PER_KV,
           BLOCK_N, NUM_SPLITS, MIN_SPLIT)  # fmt: skip


@triton.jit
def reduce_wait(part_out_ptr, part_max_ptr, part_sum_ptr, out_ptr, num_seqs, stride_o_seq,
                stride_o_head, HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr):  # fmt: skip
    gdc_wait()
    _reduce(part_out_ptr, part_max_ptr, part_sum_ptr, out_ptr, num_seqs, stride_o_seq,
            stride_o_head, HEAD_DIM, NUM_SPLITS)  # fmt: skip


def configs() -> list[dict[str, int]]:
    space = itertools.product((128, 256, 512), (64, 128), (2, 3, 4))
    return [dict(num_splits=32, min_split=m, block_n=b, num_warps=4, num_stages=st)
            for m, b, st in space]  # fmt: skip


def launcher(mode: str, q, kc, vc, table, lens, out, scale, cfg, scratch):
    seqs = q.shape[0]
    common = (scale, seqs, table.shape[1], q.stride(0), q.stride(1), kc.stride(0),
              kc.stride(1), kc.stride(2), vc.stride(0), vc.stride(1), vc.stride(2),
              table.stride(0))  # fmt: skip
    meta = dict(HEAD_DIM=D, BLOCK_SIZE=BLOCK, QUERIES_PER_KV=HQ // HKV, BLOCK_N=cfg["block_n"],
                NUM_SPLITS=cfg["num_splits"], MIN_SPLIT=cfg["min_split"],
                num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])  # fmt: skip
    split = split_trigger if mode == "pdl+trigger" else _split
    reduce = _reduce if mode == "pair" else reduce_wait
    grid_s, grid_r = (seqs, HKV, cfg["num_splits"]), (seqs, HQ)
    extra = {} if mode == "pair" else {"launch_pdl": True}

    def run() -> None:
        split[grid_s](q, kc, vc, table, lens, *scratch, *common, **meta)
        if mode != "split alone":
            reduce[grid_r](*scratch, out, seqs, out.stride(0), out.stride(1), HEAD_DIM=D,
                           NUM_SPLITS=cfg["num_splits"], num_warps=cfg["num_warps"],
                           **extra)  # fmt: skip

    return run


def probe(seqs: int, ctx: int, copy: float, modes: list[str]) -> dict[str, Any]:
    p = decode_problem(seqs, ctx)
    q, kc, vc, table, lens, scale = p.q, p.k_cache, p.v_cache, p.table, p.lens, p.scale
    expected, flash, kv_bytes = p.expected, p.flash_us, p.kv_bytes
    rows = []
    for cfg, mode in itertools.product(configs(), modes):
        scratch = pa.split_scratch(seqs, HQ, cfg["num_splits"], D, q)
        out = torch.full_like(q, float("nan"))
        run = launcher(mode, q, kc, vc, table, lens, out, scale, cfg, scratch)
        try:
            us = graph_us(run)
        except Exception as exc:  # a config that does not compile or launch
            print(f"  {mode} {cfg}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
            continue
        err = 0.0 if mode == "split alone" else float((out.float() - expected).abs().max())
        rows.append({**cfg, "mode": mode, "us": us, "max_error": err,
                     "of_copy": kv_bytes / (us * 1e-6) / 1e9 / copy})  # fmt: skip
    best = {m: min((r for r in rows if r["mode"] == m), key=lambda r: r["us"]) for m in modes}
    return {"seqs": seqs, "context": ctx, "flash_us": flash, "best": best, "rows": rows}


def main() -> int:
    return modes_main(__doc__ or "", MODES, SHAPES, probe,
                      "min {min_split} block_n {block_n} w{num_warps} s{num_stages}")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())

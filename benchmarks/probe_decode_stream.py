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
  ahead, so that the next tile's K and V addresses are ready when its loads are issued
  (the recipe's ``LOOKAHEAD``, which came from this probe);
- ``gather``: a kernel that reads the same tiles through the table, no arithmetic but a
  sum (the ceiling of the paged layout at this parallelism);
- ``pair``: the recipe's split kernel and its reduce (``READ_ALL``), at 32, 64 and 128
  ranges; ``prefetch pair``: the prefetching kernel and the recipe's reduce.

The run in benchmarks/data/h200-decode-step/probe-stream/ was this script at commit
a1c14d2, with its own copy of the prefetching kernel and one more mode, ``prefetch evict``
(its K and V loads marked evict-first), which timed as ``prefetch``.
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
    modes_main,
    pa,
    time_modes,
)

SHAPES = [(1, 32768), (16, 4096), (2, 32768)]
MODES = ("split", "prefetch", "gather", "pair", "prefetch pair")


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
    kernel = pa.paged_decode_split[grid]
    ahead = mode.startswith("prefetch")

    def run() -> None:
        kernel(*args, LOOKAHEAD=ahead, **meta)
        if mode.endswith("pair"):
            pa.paged_decode_reduce[(seqs, HQ)](*scratch, out, seqs, out.stride(0), out.stride(1),
                                               HEAD_DIM=D, NUM_SPLITS=splits,
                                               READ_ALL=seqs <= 4, num_warps=1)  # fmt: skip

    return run


def probe(seqs: int, ctx: int, copy: float, modes: list[str]) -> dict[str, Any]:
    return time_modes(seqs, ctx, copy, modes, configs, launcher, lambda mode: "pair" in mode)


def main() -> int:
    return modes_main(__doc__ or "", MODES, SHAPES, probe, "{cfg}")


if __name__ == "__main__":
    raise SystemExit(main())

"""Probe: does a third computing warp group (FlashAttention-3's tile for head dim 64:
192 query rows, 64 a warp group) take the persistent Gluon attention past cuDNN at head
dim 64, non-causal, on the H200 (issue 21: from 4096 tokens it reads 0.95-1.04x)?

``attn_fwd_ws3p`` (recipes/hopper/attention_gluon_3wg.py; written in this probe, then
moved there unchanged) is ``attn_fwd_ws2p`` with three computing warp groups instead of
two: a tile is 192 query rows, 64 a warp group, one K/V ring for all three.

Times it, through Triton's JIT and interleaved, beside ``attn_fwd_ws2p`` at the bundle's
pick and PyTorch's fastest SDPA backend, Z * N = 16384 and 32 heads; each output is
checked against SDPA's:

    python benchmarks/probe_attention_3wg.py [--lengths 1024,4096,16384] [--dtypes fp16,bf16]
        [--json out.json]

"cuDNN / x" above 1 means x is faster. Not a benchmark of the bundle.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.probe_attention_regs import probe
from benchmarks.probe_gluon_attention import persistent
from benchmarks.probe_splitk import HOPPER

sys.path.insert(0, str(HOPPER))  # the recipe's kernel files import each other by name

from attention_gluon_3wg import attn_fwd_ws3p
from attention_gluon_persistent import attn_fwd_ws2p


def runner(cfg: tuple, q, k, v, o, causal: bool):
    kind, bm, bn, stages, regs = cfg
    if kind == "ws3p":
        return persistent(attn_fwd_ws3p, q, k, v, o, False, bm, bn, stages, bm // 3, REGS=regs)
    return persistent(attn_fwd_ws2p, q, k, v, o, False, bm, bn, stages, bm // 2, CAUSAL=False)


def label(cfg: tuple) -> str:
    kind, bm, bn, stages, regs = cfg
    return f"{kind}-{bm}x{bn}-s{stages}" + (f"-r{regs}" if regs else "")


# the bundle's pick for attn_fwd_ws2p at 1024-16384, then the three-group kernel's configs
CONFIGS = {(64, False): [("ws2p", 128, 128, 4, 0), ("ws3p", 192, 64, 4, 160),
                         ("ws3p", 192, 64, 6, 160), ("ws3p", 192, 64, 8, 160),
                         ("ws3p", 192, 128, 3, 152), ("ws3p", 192, 128, 4, 152)]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="1024,4096,16384")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = [probe(64, False, n, args.rounds, dtype, CONFIGS, runner, label)
               for dtype in args.dtypes.split(",")
               for n in (int(x) for x in args.lengths.split(","))]  # fmt: skip
    print("\nsummary: cuDNN (or the best SDPA) / x")
    for r in results:
        cells = "  ".join(f"{row['cfg']} {r['ref_us'] / row['us']:.3f}" for row in r["rows"])
        print(f"{r['dtype']:<5} {r['N']:>6}  {cells}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

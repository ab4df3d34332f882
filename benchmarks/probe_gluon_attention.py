"""Probe: does a Gluon attention forward that overlaps its softmax with its own tensor-core
work (recipes/hopper/attention_gluon.py: FlashAttention-3's intra-warpgroup pipelining, in
one partition with or without a warp that issues the loads, or in two) reach cuDNN on the
H200, where the Triton kernel (recipes/hopper/attention.py) reads 0.79-0.97x at head dim
128 (issue 21)?

Times, through Triton's JIT and interleaved, the Gluon kernel at a few configs beside the
Triton kernel's bundle picks at 4096-16384 and PyTorch's SDPA backends, fp16, Z * N = 16384
and 32 heads as benchmarks/hopper_bench.py does. Each output is checked against SDPA's first:

    python benchmarks/probe_gluon_attention.py [--lengths 1024,4096,16384] [--dims 128,64]
        [--dtypes fp16,bf16] [--json out.json]

"cuDNN / x" above 1 means x is faster. Not a benchmark of the bundle.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.probe_attention_regs import CONFIGS, _label, _runner, probe
from benchmarks.probe_splitk import gluon_descriptor, hopper_module

KERNELS = hopper_module("attention_gluon")

# (head dim, causal) -> Gluon configs (KERNEL, BLOCK_M, BLOCK_N, num_warps, STAGES, maxnreg),
# after the Triton kernel's pick. KERNEL "fa3": every warp computes and loads; "ws"
# (WARP_SPECIALIZE): one more warp loads; "two" (recipes/hopper/attention_gluon.py's
# attn_fwd_ws2): two warp groups of 4 warps in partitions of their own, BLOCK_M / 2 rows
# each, and the load warp.
# BLOCK_M is a multiple of 16 rows a warp. A cap of 128 registers fits two CTAs of 4 (+1)
# warps on an SM.
GLUON = {
    (128, False): [("fa3", 128, 128, 8, 2, None), ("fa3", 64, 64, 4, 3, None),
                   ("ws", 64, 64, 4, 2, 128), ("ws", 64, 64, 4, 3, 128),
                   ("ws", 128, 128, 8, 2, None), ("ws", 128, 64, 8, 3, None),
                   ("two", 128, 128, 4, 2, None), ("two", 128, 64, 4, 3, None),
                   ("two", 128, 64, 4, 4, None)],
    (128, True): [("fa3", 64, 64, 4, 3, None), ("ws", 64, 64, 4, 3, 128),
                  ("ws", 128, 128, 8, 2, None), ("ws", 128, 64, 8, 3, None)],
    (64, False): [("fa3", 128, 64, 8, 4, None), ("ws", 64, 128, 4, 3, 128),
                  ("ws", 64, 64, 4, 3, 128), ("ws", 128, 64, 4, 3, 128),
                  ("ws", 128, 128, 8, 3, None), ("two", 128, 128, 4, 3, None),
                  ("two", 128, 64, 4, 4, None)],
    (64, True): [("fa3", 64, 64, 4, 3, None), ("ws", 64, 64, 4, 3, 128),
                 ("ws", 128, 64, 4, 3, 128), ("ws", 128, 128, 8, 3, None)],
}  # fmt: skip
# The Triton kernel's pick at 4096-16384 (attention_d64: the register-capped tile).
TRITON = {**{key: cfgs[0] for key, cfgs in CONFIGS.items()}, (64, False): (128, 128, 8, 3, 128)}
CONFIGS_GLUON = {key: [TRITON[key], *cfgs]
                 for key, cfgs in GLUON.items()}  # fmt: skip


def gluon_descriptors(q, k, v, o, block_m: int, block_n: int) -> tuple:
    """Gluon host descriptors: each tensor seen as [Z * H * N_CTX, HEAD_DIM], with the
    default NVMMA shared layout of its block."""
    d = q.shape[-1]

    def flat(t, rows):
        return gluon_descriptor(t.reshape(-1, d), [rows, d])

    return flat(q, block_m), flat(k, block_n), flat(v, block_n), flat(o, block_m)


def persistent(kernel, q, k, v, o, causal: bool, bm: int, bn: int, stages: int, rows: int,
               **meta):  # fmt: skip
    """A persistent Gluon attention's call (recipes/hopper/attention_gluon_persistent.py and
    its variants): min(132, units) programs, a unit one query tile of ``bm`` rows (causal:
    two), Q and O described in blocks of ``rows``; ``meta``: the kernel's other constexprs."""
    z, h, n, d = q.shape
    n_m = -(-n // bm)
    units = (n_m + 1) // 2 * z * h if causal else n_m * z * h
    descs = gluon_descriptors(q, k, v, o, rows, bn)
    return functools.partial(kernel[(min(132, units),)], *descs, d**-0.5, z, h, n,
                             HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, num_warps=4,
                             **meta)  # fmt: skip


def runner(cfg: tuple, q, k, v, o, causal: bool):
    if not isinstance(cfg[0], str):
        return _runner(cfg, q, k, v, o, causal)
    kind, bm, bn, warps, stages, cap = cfg
    z, h, n, d = q.shape
    grid = (n // bm, z * h)
    if kind == "two":
        descs = gluon_descriptors(q, k, v, o, bm // 2, bn)
        return functools.partial(KERNELS.attn_fwd_ws2[grid], *descs, d**-0.5, z, h, n,
                                 HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, STAGES=stages,
                                 CAUSAL=causal, num_warps=warps)  # fmt: skip
    descs = gluon_descriptors(q, k, v, o, bm, bn)
    options = {"num_warps": warps, **({"maxnreg": cap} if cap else {})}
    return functools.partial(KERNELS.attn_fwd_fa3[grid], *descs, d**-0.5, z, h, n, HEAD_DIM=d,
                             BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, CAUSAL=causal,
                             WARP_SPECIALIZE=kind == "ws", **options)  # fmt: skip


def label(cfg: tuple) -> str:
    if not isinstance(cfg[0], str):
        return "triton-" + _label(cfg)
    kind, bm, bn, warps, stages, cap = cfg
    return f"gluon-{kind}-{bm}x{bn}-w{warps}-s{stages}" + (f"-cap{cap}" if cap else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="1024,4096,16384")
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--dtypes", default="fp16")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = [probe(d, causal, n, args.rounds, dtype, CONFIGS_GLUON, runner, label)
               for dtype in args.dtypes.split(",")
               for d in (int(x) for x in args.dims.split(","))
               for causal in (bool(int(c)) for c in args.causal.split(","))
               for n in (int(x) for x in args.lengths.split(","))]  # fmt: skip
    print("\nsummary: cuDNN (or the best SDPA) / x")
    print(f"{'dtype':<5} {'d':>4} {'causal':<6} {'N':>6} {'triton':>7} {'gluon':>7}  gluon's best")
    for r in results:
        best = {kind: min((x for x in r["rows"] if x["cfg"].startswith(kind)),
                          key=lambda x: x["us"], default=None)
                for kind in ("triton", "gluon")}  # fmt: skip
        ratio = {k: (f"{r['ref_us'] / b['us']:.3f}" if b else "-") for k, b in best.items()}
        print(f"{r['dtype']:<5} {r['d']:>4} {r['causal']!s:<6} {r['N']:>6} {ratio['triton']:>7} "
              f"{ratio['gluon']:>7}  {best['gluon']['cfg'] if best['gluon'] else '-'}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

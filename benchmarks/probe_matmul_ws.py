"""Probe: at the small M where the split-K TMA matmul trails cuBLAS (issue 21), cuBLAS runs
a warp-specialized kernel (benchmarks/probe_cublas_kernels.py: 384 threads, 64×32 tiles,
about 210 KB of shared memory). This times the recipe's kernel at SPLIT_K = 1 beside the
same loop with Triton's warp specialization (``tl.range(..., warp_specialize=True)``)
and deeper pipelines, through the JIT, against cuBLAS. Not a benchmark of the bundle.

    python benchmarks/probe_matmul_ws.py [--ms 64,128] [--json out.json]

Medians of triton.testing.do_bench (L2 flushed), N = K = 4096, fp16; cuBLAS / config
above 1 means the config is faster.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton
import triton.language as tl

from benchmarks.probe_splitk import descriptors, hopper_module

SMEM = 227 * 1024


@triton.jit
def matmul_ws(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, WS: tl.constexpr):  # fmt: skip
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    off_m = (first_m + (pid % group) % rows) * BLOCK_M
    off_n = ((pid % group) // rows) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=WS):
        a = a_desc.load([off_m, ki * BLOCK_K])
        b = b_desc.load([ki * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def configs() -> list[dict[str, int]]:
    out = []
    for bm, bn, bk, ws, warps, stages in itertools.product(
        [64, 128], [32, 64], [64, 128], [0, 1], [4, 8], [4, 6, 8, 12, 16]
    ):
        smem = (bm * bk + bk * bn) * 2 * stages + bm * bn * 2
        if smem <= SMEM and not (ws and warps == 8):  # 4 warps: 12 when specialized
            out.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "WS": ws,
                        "num_warps": warps, "num_stages": stages})  # fmt: skip
    return out


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="64,128")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()
    splitk = hopper_module("splitk_matmul").matmul_tma_splitk
    results = []
    for m in (int(v) for v in args.ms.split(",")):
        n = k = 4096
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        ref = a.float() @ b.float()
        bench = functools.partial(triton.testing.do_bench, return_mode="median")
        cublas = bench(functools.partial(torch.mm, a, b, out=c)) * 1e3
        rows = []
        for cfg in configs():
            if cfg["BLOCK_M"] > m:
                continue
            tiles = triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"])
            if cfg["WS"] == 0:  # the recipe's kernel itself, unsplit
                ws = torch.empty(1, device="cuda")
                locks = torch.zeros(1, device="cuda", dtype=torch.int32)
                meta = {key: v for key, v in cfg.items() if key != "WS"}
                run = functools.partial(splitk[(tiles,)], *descriptors(a, b, c, cfg), ws, locks,
                                        m, n, k, GROUP_M=8, SPLIT_K=1, **meta)  # fmt: skip
            else:
                run = functools.partial(matmul_ws[(tiles,)], *descriptors(a, b, c, cfg), m, n, k,
                                        GROUP_M=8, **{**cfg, "WS": True})  # fmt: skip
            c.zero_()
            try:
                run()
                torch.cuda.synchronize()
            except Exception as exc:  # does not compile, or out of resources
                print(f"[probe] {cfg}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
                continue
            err = float((c.float() - ref).abs().max())
            rows.append({**cfg, "us": bench(run) * 1e3, "max_err": err})
        rows.sort(key=lambda r: r["us"])
        results.append({"M": m, "cublas_us": cublas, "rows": rows})
        print(f"\nfp16 M={m}: cuBLAS {cublas:.1f} us; {len(rows)} configs ran")
        for ws in (0, 1):
            mine = [r for r in rows if r["WS"] == ws][: args.top]
            print("  warp-specialized:" if ws else "  the recipe's kernel, SPLIT_K = 1:")
            for r in mine:
                print(f"    {r['BLOCK_M']:3}x{r['BLOCK_N']:<3}x{r['BLOCK_K']:<3} w{r['num_warps']} "
                      f"s{r['num_stages']:<2} {r['us']:6.1f} us  {cublas / r['us']:.2f}x  "
                      f"(max err {r['max_err']:.3f})")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

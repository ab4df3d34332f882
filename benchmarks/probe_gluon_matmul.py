"""Probe: does a warp-specialised Gluon matmul (recipes/hopper/matmul_gluon.py: one warp
loads a deep ring of TMA stages, a warp group multiplies) close the gap to cuBLAS
at M = 64 that splitk_matmul.py's software pipeline leaves (0.89-0.95x, issue 21)?

Times, through Triton's JIT and interleaved, cuBLAS, the split-K kernel at the bundle's
pick for M = 64 and 128 and matmul_ws over tile widths, K steps and stages, N = K = 4096.
Each output is checked against an fp32 product first:

    python benchmarks/probe_gluon_matmul.py [--ms 64,128] [--dtypes fp16,bf16] [--json out.json]

"cuBLAS / x" above 1 means x is faster. Not a benchmark of the bundle.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.hopper_bench import interleaved
from benchmarks.probe_splitk import SMEM, descriptors, gluon_descriptor, hopper_module

# the split-K kernel's bundle picks at M = 64 and 128 (benchmarks/RESULTS.md)
SPLITK = [{"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4,
           "num_stages": 8},
          {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4,
           "num_stages": 6}]  # fmt: skip


def gluon_configs() -> list[dict[str, int]]:
    """matmul_ws's configs: each tile shape at 4 and 8 stages and the most that fit in
    shared memory. (The probes of record also timed forms since removed, with two
    consumer warp groups and with K split: the data README says at which commits.)"""
    out = []
    for bn, bk in ((32, 64), (32, 128), (64, 64), (64, 128)):
        most = (SMEM - 64 * bn * 2) // ((64 * bk + bk * bn) * 2)
        for stages in sorted({4, 8, most} - {s for s in (4, 8) if s > most}):
            out.append({"BLOCK_M": 64, "BLOCK_N": bn, "BLOCK_K": bk, "STAGES": stages})
    return out


def _label(cfg: dict[str, int]) -> str:
    if "STAGES" in cfg:
        return f"ws 64x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['STAGES']}"
    return f"splitk 64x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['num_stages']}"


def _gluon_run(a: Any, b: Any, c: Any, cfg: dict[str, int]) -> Any:
    import triton

    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    kernel = hopper_module("matmul_gluon").matmul_ws
    descs = (gluon_descriptor(a, [bm, bk]), gluon_descriptor(b, [bk, bn]),
             gluon_descriptor(c, [bm, bn]))  # fmt: skip
    return functools.partial(kernel[grid], *descs, m, n, k, num_warps=4, **cfg)


def measure(name: str, m: int, rounds: int) -> dict[str, Any]:
    import torch
    import triton

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[name]
    n = k = 4096
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt) / k**0.5
    ref = a.float() @ b.float()
    fns: dict[str, Any] = {}
    errors: dict[str, float] = {}
    outs: dict[str, Any] = {}
    splitk = hopper_module("splitk_matmul").matmul_tma_splitk
    for cfg in SPLITK + gluon_configs():
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
        if "STAGES" in cfg:
            run = _gluon_run(a, b, c, cfg)
        else:
            ws = torch.empty(1, device="cuda", dtype=torch.float32)
            locks = torch.zeros(1, device="cuda", dtype=torch.int32)
            grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
            run = functools.partial(splitk[grid], *descriptors(a, b, c, cfg), ws, locks, m, n,
                                    k, GROUP_M=8, **cfg)  # fmt: skip
        try:
            run()
            torch.cuda.synchronize()
        except Exception as exc:  # out of resources: not a candidate
            print(f"[probe] {_label(cfg)}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
            continue
        errors[_label(cfg)] = float((c.float() - ref).abs().max())
        fns[_label(cfg)], outs[_label(cfg)] = run, c
    cout = torch.empty(m, n, device="cuda", dtype=dt)
    fns["cuBLAS"] = functools.partial(torch.mm, a, b, out=cout)
    times = {key: statistics.median(t) for key, t in interleaved(fns, rounds).items()}
    print(f"[probe] {name} M={m} done", file=sys.stderr, flush=True)
    rows = [{"kernel": key, "us": us, "ratio": times["cuBLAS"] / us, "max_err": errors.get(key)}
            for key, us in sorted(times.items(), key=lambda kv: kv[1])]  # fmt: skip
    return {"dtype": name, "M": m, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="64,128")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = [measure(name, int(m), args.rounds)
               for name in args.dtypes.split(",") for m in args.ms.split(",")]  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    for r in results:
        print(f"\n{r['dtype']} M={r['M']} (cuBLAS / kernel)")
        for row in r["rows"][: args.top]:
            err = "" if row["max_err"] is None else f"  max err {row['max_err']:.3f}"
            print(f"  {row['kernel']:28} {row['us']:6.1f} us  {row['ratio']:.3f}{err}")


if __name__ == "__main__":
    main()

"""Probe: which kernels cuBLAS launches for the small-M matmuls where the split-K TMA
matmul (recipes/hopper/splitk_matmul.py) trails it (issue 21), with their grids, block
sizes, shared memory, registers and device times, beside the recipe's best configs, from
PyTorch's profiler (device time of the kernels alone, L2 flushed between calls).

    python benchmarks/probe_cublas_kernels.py [--ms 64,128] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.probe_splitk import descriptors, hopper_module

OURS = [  # the bundle's M = 64 config, and the best of the probes at M = 64 and 128
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 4, "num_stages": 5},
    {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 8},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 6},
]
KEEP = ("grid", "block", "registers per thread", "shared memory", "dynamic shared memory")


def kernels(fn: Any, flush: Any, reps: int = 20) -> list[dict[str, Any]]:
    """Every kernel ``fn`` launches, by name: launch shape and median device time, µs."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush()
            fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.loads(Path(f.name).read_text())["traceEvents"]
    by: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("cat") != "kernel" or e["name"].startswith(
            ("vectorized_elementwise", "void at::")
        ):
            continue
        raw = e.get("args", {})
        k = by.setdefault(e["name"], {"name": e["name"], "us": [], "args": raw,
                                      **{key: raw.get(key) for key in KEEP}})  # fmt: skip
        k["us"].append(e["dur"])
    return [{**k, "calls": len(k["us"]) / reps, "us": statistics.median(k["us"])}
            for k in by.values()]  # fmt: skip


def main() -> None:
    import torch
    import triton

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="64,128")
    ap.add_argument("--json")
    args = ap.parse_args()
    kernel = hopper_module("splitk_matmul").matmul_tma_splitk
    workspace = hopper_module("calls").splitk_workspace
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    out = []
    for m in (int(v) for v in args.ms.split(",")):
        n = k = 4096
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        rows = [("cuBLAS", kernels(functools.partial(torch.mm, a, b, out=c), cache.zero_))]
        for cfg in OURS:
            ws, locks = workspace(m, n, cfg)
            grid = (
                triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]) * cfg["SPLIT_K"],
            )
            descs = descriptors(a, b, c, cfg)
            run = functools.partial(kernel[grid], *descs, ws, locks, m, n, k, GROUP_M=8, **cfg)
            label = "{BLOCK_M}x{BLOCK_N}x{BLOCK_K} split {SPLIT_K} w{num_warps} s{num_stages}"
            rows.append((label.format(**cfg), kernels(run, cache.zero_)))
        out.append({"M": m, "rows": rows})
        print(f"\nM={m}, N=K=4096, fp16: device time per kernel (median of 20, L2 flushed)")
        for who, ks in rows:
            for kk in ks:
                print(f"  {who:28} {kk['us']:6.1f} us  x{kk['calls']:.0f}  grid {kk['grid']} "
                      f"block {kk['block']} regs {kk['registers per thread']} smem "
                      f"{kk['shared memory']}/{kk['dynamic shared memory']}  "
                      f"{kk['name'][:100]}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

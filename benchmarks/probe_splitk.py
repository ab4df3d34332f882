"""Probe: the split-K TMA matmul (recipes/hopper/splitk_matmul.py) through Triton's JIT
over a hand-picked grid of tile shapes and split counts at small M, against cuBLAS, to
find where the recipe's space should reach (issue 21). Not a benchmark of the bundle:
benchmarks/hopper_bench.py is.

    python benchmarks/probe_splitk.py [--ms 64,128,256,512] [--json out.json]
        [--bns 64,128,256] [--bks 64,128] [--splits 1,2,4,8] [--stages 4,5]

Prints, per M and dtype, cuBLAS's time and the fastest configs with their ratio
(cuBLAS / config: above 1, the config is faster). Medians of triton.testing.do_bench
(L2 flushed), N = K = 4096.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

HOPPER = Path(__file__).resolve().parents[1] / "recipes" / "hopper"
SMEM = 227 * 1024


def hopper_module(name: str) -> Any:
    """recipes/hopper/NAME.py, imported as aotc imports a recipe's files."""
    sys.path.insert(0, str(HOPPER.parents[1]))
    from aot.source import load_module

    return load_module(HOPPER / f"{name}.py")


AXES = {"bns": [64, 128, 256], "bks": [64, 128], "splits": [1, 2, 4, 8], "stages": [4, 5]}


def configs(axes: dict[str, list[int]]) -> list[dict[str, int]]:
    out = []
    for bm, bn, bk, split, warps, stages in itertools.product(
        [64, 128], axes["bns"], axes["bks"], axes["splits"], [4, 8], axes["stages"]
    ):
        smem = (bm * bk + bk * bn) * 2 * stages + bm * bn * 2
        if smem > SMEM or (bm == 128 and (split > 2 or warps == 4)):
            continue
        out.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split,
                    "num_warps": warps, "num_stages": stages})  # fmt: skip
    return out


def descriptors(a: Any, b: Any, c: Any, cfg: dict[str, int]) -> list[Any]:
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    return [TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
            TensorDescriptor.from_tensor(c, [bm, bn])]  # fmt: skip


def gluon_descriptor(t: Any, block: list[int]) -> Any:
    """A Gluon kernel's host descriptor of the 2-D tensor ``t``: the default NVMMA shared
    layout of its block, as aotc gives a Gluon kernel's descriptors (aot/descriptors.py)."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dtype = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[t.dtype]
    layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)


def _warm(item: tuple[str, dict[str, int]]) -> str:
    """Compile one config into Triton's cache (in a worker process: compiles in parallel)."""
    import torch

    name, cfg = item
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[name]
    m = n = k = 4096
    a, b, c = (torch.empty(m, k, device="cuda", dtype=dt) for _ in range(3))
    ws = torch.empty(16, device="cuda", dtype=torch.float32)
    locks = torch.zeros(16, device="cuda", dtype=torch.int32)
    try:
        hopper_module("splitk_matmul").matmul_tma_splitk.warmup(
            *descriptors(a, b, c, cfg), ws, locks, m, n, k, GROUP_M=8, grid=(1,), **cfg
        )
    except Exception as exc:
        return f"{cfg}: {type(exc).__name__}"
    return ""


def compile_all(dtypes: list[str], jobs: int, axes: dict[str, list[int]]) -> None:
    import concurrent.futures
    import multiprocessing

    todo = [(name, cfg) for name in dtypes for cfg in configs(axes)]
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
        for failed in pool.map(_warm, todo):
            if failed:
                print(f"[probe] compile {failed}", file=sys.stderr)
    print(f"[probe] {len(todo)} configs compiled", file=sys.stderr, flush=True)


def measure(name: str, m: int, axes: dict[str, list[int]]) -> dict[str, Any]:
    """cuBLAS and every config at one M and dtype, N = K = 4096."""
    import functools

    import torch
    import triton

    kernel = hopper_module("splitk_matmul").matmul_tma_splitk
    workspace = hopper_module("calls").splitk_workspace
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[name]
    n = k = 4096
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt) / k**0.5
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    cublas = triton.testing.do_bench(functools.partial(torch.mm, a, b, out=c), return_mode="median")
    rows = []
    for cfg in configs(axes):
        if cfg["BLOCK_M"] > 64 and m <= 64:
            continue
        ws, locks = workspace(m, n, cfg)
        grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]) * cfg["SPLIT_K"],)
        run = functools.partial(kernel[grid], *descriptors(a, b, c, cfg), ws, locks, m, n, k,
                                GROUP_M=8, **cfg)  # fmt: skip
        try:
            run()
            torch.cuda.synchronize()
        except Exception as exc:  # out of resources: not a candidate
            print(f"[probe] {cfg}: {type(exc).__name__}", file=sys.stderr)
            continue
        err = float((c.float() - ref).abs().max())
        t = triton.testing.do_bench(run, return_mode="median")
        rows.append({**cfg, "us": t * 1e3, "max_err": err})
    rows.sort(key=lambda r: r["us"])
    print(f"[probe] {name} M={m} done", file=sys.stderr, flush=True)
    return {"dtype": name, "M": m, "cublas_us": cublas * 1e3, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="64,128,256,512")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--json")
    for axis, values in AXES.items():
        ap.add_argument(f"--{axis}", default=",".join(map(str, values)))
    args = ap.parse_args()
    axes = {axis: [int(v) for v in getattr(args, axis).split(",")] for axis in AXES}
    dtypes = args.dtypes.split(",")
    compile_all(dtypes, args.jobs, axes)
    results = [measure(name, int(m), axes) for name in dtypes for m in args.ms.split(",")]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    for r in results:
        print(f"\n{r['dtype']} M={r['M']}: cuBLAS {r['cublas_us']:.1f} us")
        for row in r["rows"][: args.top]:
            print(f"  {row['BLOCK_M']:3}x{row['BLOCK_N']:<3}x{row['BLOCK_K']:<3} split "
                  f"{row['SPLIT_K']} w{row['num_warps']} s{row['num_stages']}  "
                  f"{row['us']:6.1f} us  {r['cublas_us'] / row['us']:.2f}x  "
                  f"(max err {row['max_err']:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()

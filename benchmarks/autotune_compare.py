"""aotc's tuned matmul against @triton.autotune over the same space and against cuBLAS.

    python benchmarks/autotune_compare.py --bundle B.aotc [--recipe R.toml] [--sizes 16 4096]

@triton.autotune gets exactly the configs the recipe's plan keeps for sm_90 and the same
kernel, with M left unspecialized as in aotc's variants. It is timed on its first call
(what a service pays at start: its benchmarking, plus compiling where Triton's cache is
cold) and then steady-state; all steady-state times use the tuner's method (CUDA events,
L2 flushed before every repetition, median).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--recipe", default=str(ROOT / "benchmarks" / "recipes" / "exhaustive.toml"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 4096])
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch
    import triton

    import loader
    from aot.plan import make_plan
    from aot.recipe import load
    from aot.source import jit_function
    from aot.tune.worker import Worker

    plan = make_plan(load(args.recipe))
    inst = next(
        i for i in plan.instances
        if i.kernel.name == "matmul" and i.target.arch == "sm_90"
        and dict(i.dtypes)["T"] == args.dtype
    )  # fmt: skip
    kr = inst.kernel
    configs = [
        triton.Config({**dict(c.meta), **kr.fixed}, num_warps=c.num_warps, num_stages=c.num_stages)
        for c in inst.configs
    ]
    base = jit_function(kr.source, kr.function)
    autotuned = triton.autotune(configs=configs, key=["M", "N", "K"])(
        triton.jit(base.fn, do_not_specialize=["M"])
    )
    w = Worker(0)
    kernel = loader.open(args.bundle).kernel("matmul")
    inputs = f"{plan.recipe.root / kr.inputs.split(':')[0]}:{kr.inputs.split(':')[1]}"
    rows = []
    for m in args.sizes:
        sizes = {**kr.sizes, "M": m}
        sets = w.input_sets(inputs, sizes, {"T": args.dtype})
        a = sets[0]
        M, N = a[3], a[4]

        def grid(meta, M=M, N=N):  # type: ignore[no-untyped-def]
            return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

        def run_autotuned(x, grid=grid):  # type: ignore[no-untyped-def]
            autotuned[grid](*x)

        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run_autotuned(a)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        chosen = str(autotuned.best_config)
        auto = statistics.median(w.time(run_autotuned, sets, 25.0))
        ours = statistics.median(w.time(lambda x: kernel(*x), sets, 25.0))
        cublas = statistics.median(w.time(lambda x: torch.mm(x[0], x[1], out=x[2]), sets, 25.0))
        rows.append({"M": m, "N": N, "K": a[5], "configs": len(configs),
                     "autotune_first_call_s": first, "autotune_us": auto * 1e3,
                     "autotune_config": chosen, "aotc_us": ours * 1e3,
                     "cublas_us": cublas * 1e3})  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n@triton.autotune over {len(configs)} configs vs aotc vs cuBLAS ({args.dtype})")
    print(f"{'M':>6}{'autotune 1st call':>19}{'autotune µs':>13}{'aotc µs':>10}{'cuBLAS µs':>11}"
          f"{'aotc/autotune':>15}{'aotc/cuBLAS':>13}")  # fmt: skip
    for r in rows:
        print(
            f"{r['M']:>6}{r['autotune_first_call_s']:>18.1f}s{r['autotune_us']:>13.1f}"
            f"{r['aotc_us']:>10.1f}{r['cublas_us']:>11.1f}"
            f"{r['autotune_us'] / r['aotc_us']:>14.2f}x{r['cublas_us'] / r['aotc_us']:>12.2f}x"
        )
    for r in rows:
        print(f"M={r['M']}: autotune chose {r['autotune_config']}")


if __name__ == "__main__":
    main()

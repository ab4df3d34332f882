"""Model mode against eager PyTorch and torch.compile, on a GPU (issue 5's goals).

    python benchmarks/model_bench.py --bundle artifacts/layer-0.1.0.aotc   # built already
    python benchmarks/model_bench.py --build                               # build it first
    python benchmarks/model_bench.py --dry-run                             # print the plan

Measures, for recipes/layer.toml (or --recipe):
1. Time to ready, each in a fresh process with empty Inductor/Triton caches: aotc
   (import, load_model, warm-up of every bucket: load + CUDA graph capture, first result)
   against torch.compile default and max-autotune, cold (empty caches) and warm (the
   caches the cold run left), compiling --compile-buckets buckets (default 1: the time
   to ready for ONE bucket, which the goal compares against).
2. Per-bucket latency (CUDA events, median of --reps after warm-up): eager, torch.compile
   max-autotune (its own CUDA graphs), aotc; ratios.
Goals printed with PASS/FAIL: ready for all buckets in under a tenth of max-autotune's cold
time for one bucket; every bucket at least as fast as eager and max-autotune; batch 1 at
least 2x eager.

NOT YET RUN: written on a CPU-only machine; checked by --dry-run, py_compile and ruff.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

READY_AOTC = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
sys.path.insert(0, sys.argv[3])
import loader
from layer import make_layer
kw = json.loads(sys.argv[2])
m = make_layer(**kw).cuda().half().eval()
runner = loader.load_model(sys.argv[1], m, warmup=True)
b, t = json.loads(sys.argv[4])
y = runner(torch.randn(b, t, kw["d_model"], device="cuda", dtype=torch.half))
torch.cuda.synchronize()
print(json.dumps({"ready_s": time.perf_counter() - t0}))
"""

READY_COMPILE = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
sys.path.insert(0, sys.argv[3])
from layer import make_layer
kw = json.loads(sys.argv[2])
m = make_layer(**kw).cuda().half().eval()
mode = None if sys.argv[1] == "default" else sys.argv[1]
f = torch.compile(m, mode=mode, dynamic=False)
with torch.no_grad():
    for b, t in json.loads(sys.argv[4]):
        f(torch.randn(b, t, kw["d_model"], device="cuda", dtype=torch.half))
torch.cuda.synchronize()
print(json.dumps({"ready_s": time.perf_counter() - t0}))
"""


def _run(code: str, args: list[str], env: dict[str, str], timeout: int) -> float:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
        timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["ready_s"])


def _fresh_env(tmp: str, tag: str) -> dict[str, str]:
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, tag, "inductor"),
            "TRITON_CACHE_DIR": os.path.join(tmp, tag, "triton")}  # fmt: skip


def time_to_ready(bundle: Path, model: Any, compile_buckets: list[tuple[int, int]],
                  timeout: int) -> dict[str, float]:  # fmt: skip
    models = str(ROOT / "recipes" / "models")
    kw = json.dumps(dict(model.kwargs))
    first = json.dumps(list(compile_buckets[0]))
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out["aotc_all_buckets"] = _run(
            READY_AOTC, [str(bundle), kw, models, first], _fresh_env(tmp, "aotc"), timeout
        )
        shapes = json.dumps([list(b) for b in compile_buckets])
        for mode in ("default", "max-autotune"):
            env = _fresh_env(tmp, mode)
            out[f"compile_{mode}_cold"] = _run(READY_COMPILE, [mode, kw, models, shapes], env,
                                               timeout)  # fmt: skip
            out[f"compile_{mode}_warm"] = _run(READY_COMPILE, [mode, kw, models, shapes], env,
                                               timeout)  # fmt: skip
    return out


def _median_us(torch: Any, fn: Any, reps: int) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000)
    return statistics.median(times)


def latencies(
    bundle: Path, model: Any, buckets: list[tuple[int, int]], reps: int
) -> list[dict[str, Any]]:
    import torch

    import loader

    sys.path.insert(0, str(ROOT / "recipes" / "models"))
    from layer import make_layer

    torch.manual_seed(0)
    m = make_layer(**model.kwargs).cuda().half().eval()
    runner = loader.load_model(bundle, m, warmup=True)
    compiled = torch.compile(m, mode="max-autotune", dynamic=False)
    rows = []
    with torch.no_grad():
        for b, t in buckets:
            x = torch.randn(b, t, model.kwargs["d_model"], device="cuda", dtype=torch.half)
            ref = m(x)
            err = float((runner(x).float() - ref.float()).abs().max() / ref.float().abs().max())
            row = {"batch": b, "seq": t, "rel_err": err,
                   "eager_us": _median_us(torch, lambda: m(x), reps),  # noqa: B023
                   "max_autotune_us": _median_us(torch, lambda: compiled(x), reps),  # noqa: B023
                   "aotc_us": _median_us(torch, lambda: runner(x), reps)}  # noqa: B023 # fmt: skip
            row["vs_eager"] = row["eager_us"] / row["aotc_us"]
            row["vs_max_autotune"] = row["max_autotune_us"] / row["aotc_us"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def goals(ready: dict[str, float], rows: list[dict[str, Any]]) -> list[str]:
    out = []
    if ready:
        limit = ready["compile_max-autotune_cold"] / 10
        ok = ready["aotc_all_buckets"] < limit
        out.append(f"{'PASS' if ok else 'FAIL'} ready for all buckets "
                   f"{ready['aotc_all_buckets']:.2f}s < {limit:.2f}s (1/10 of max-autotune "
                   "cold for the compiled buckets)")  # fmt: skip
    if rows:
        slow = [r for r in rows if r["vs_eager"] < 1 or r["vs_max_autotune"] < 1]
        out.append(
            f"{'PASS' if not slow else 'FAIL'} every bucket >= eager and max-autotune"
            + (f" (not: {[(r['batch'], r['seq']) for r in slow]})" if slow else "")
        )
        b1 = [r for r in rows if r["batch"] == 1]
        bad = [r for r in b1 if r["vs_eager"] < 2]
        out.append(f"{'PASS' if b1 and not bad else 'FAIL'} batch 1 >= 2x eager"
                   + (f" (not: {[(r['seq'], round(r['vs_eager'], 2)) for r in bad]})"
                      if bad else ""))  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "layer.toml")
    p.add_argument("--bundle", type=Path, help="a bundle built from the recipe")
    p.add_argument("--build", action="store_true", help="build the recipe first")
    p.add_argument("--compile-buckets", type=int, default=1,
                   help="buckets torch.compile compiles for its time to ready")  # fmt: skip
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--skip-ready", action="store_true")
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    args = p.parse_args()

    sys.path.insert(0, str(ROOT))
    from aot.recipe import load

    recipe = load(args.recipe)
    model = recipe.model
    if model is None:
        sys.exit(f"{args.recipe} has no [model]")
    buckets = [(b[0], b[1]) for b in model.bucket_grid]
    bundle = args.bundle or ROOT / "artifacts" / recipe.bundle_filename
    plan = {
        "recipe": str(args.recipe), "bundle": str(bundle), "build": args.build,
        "buckets": len(buckets), "compile_buckets": buckets[: args.compile_buckets],
        "ready": not args.skip_ready, "latency": not args.skip_latency, "reps": args.reps,
    }  # fmt: skip
    if args.dry_run:
        print(json.dumps(plan, indent=1))
        return
    if args.build:
        from aot.build import build
        from aot.env import from_environ

        r = build(args.recipe, bundle, from_environ(), ROOT)
        print(json.dumps({"build_s": r.seconds, "bundle_bytes": r.size}), flush=True)
    ready = {} if args.skip_ready else time_to_ready(
        bundle, model, buckets[: args.compile_buckets], args.timeout)  # fmt: skip
    if ready:
        print(json.dumps(ready), flush=True)
    rows = [] if args.skip_latency else latencies(bundle, model, buckets, args.reps)
    for line in goals(ready, rows):
        print(line)


if __name__ == "__main__":
    main()

"""Host overhead per kernel call (aotc loader vs Triton's JIT launcher) and time to ready.

Run on a GPU machine from the repository root:

    python benchmarks/launch_overhead.py --bundle artifacts/example-0.1.0.aotc

Per-call overhead: the same RMSNorm kernel (M=1, N=4096, BLOCK_N=2048, 8 warps: a few
microseconds of GPU work) launched N times back to back; wall time / N is the host cost
because the host, not the GPU, is the bottleneck (the GPU time per kernel is printed too).
Rows: ``aotc`` is a plain call with tensors (the loader's fast path once it has seen the
argument signature, see loader/fastcall.py); ``aotc_checked`` forces the checked path that
converts every argument, as every call did before the fast path; ``aotc_raw_ptrs`` passes
raw pointers and ``dtypes=``, which always take the checked path.
Time to ready: a fresh Python process each, from interpreter start to the first correct
result: aotc (import loader, open, first call), Triton JIT with an empty cache, and Triton
JIT with a warm cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

READY_AOTC = r"""
import time, sys
t0 = time.perf_counter()
import torch
x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
w = torch.ones(4096, device="cuda", dtype=torch.float16)
out = torch.empty_like(x); torch.cuda.synchronize()
t1 = time.perf_counter()
import loader
t2 = time.perf_counter()
b = loader.open(sys.argv[1])
t3 = time.perf_counter()
b["rmsnorm"](x, w, out, 1, 4096, 4096, 4096, 1e-6); torch.cuda.synchronize()
t4 = time.perf_counter()
n = b.warmup()
t5 = time.perf_counter()
print({"torch_setup": t1 - t0, "import": t2 - t1, "open": t3 - t2, "first_call": t4 - t3,
       "warmup_all": t5 - t4, "modules": n, "ready": t4 - t1})
"""

READY_TRITON = r"""
import time, sys
t0 = time.perf_counter()
import torch
x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
w = torch.ones(4096, device="cuda", dtype=torch.float16)
out = torch.empty_like(x); torch.cuda.synchronize()
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from rmsnorm import rmsnorm_kernel
t2 = time.perf_counter()
rmsnorm_kernel[(1,)](x, w, out, 1, 4096, 4096, 4096, 1e-6, BLOCK_N=2048, num_warps=8)
torch.cuda.synchronize()
t3 = time.perf_counter()
print({"torch_setup": t1 - t0, "import": t2 - t1, "first_call": t3 - t2, "ready": t3 - t1})
"""


def per_call(bundle_path: str, n: int, repeats: int) -> dict[str, float]:
    import torch

    import loader
    from recipes.kernels.rmsnorm import rmsnorm_kernel

    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    w = torch.ones(4096, device="cuda", dtype=torch.float16)
    out = torch.empty_like(x)
    b = loader.open(bundle_path)
    k = b["rmsnorm"]
    args = (x, w, out, 1, 4096, 4096, 4096, 1e-6)
    raw = (x.data_ptr(), w.data_ptr(), out.data_ptr(), 1, 4096, 4096, 4096, 1e-6)
    meta = k.variant_for(*args).meta
    assert meta["BLOCK_N"] == 2048, meta
    # The call's pieces (loader/profile.py); it makes the call once, which teaches the fast
    # path, and refuses arguments that would miss it.
    host = k.host_path(*args)

    def triton_call() -> None:
        rmsnorm_kernel[(1,)](*args, BLOCK_N=2048, num_warps=8, num_stages=1)

    def aotc_call() -> None:
        k(*args)

    def aotc_raw() -> None:
        k(*raw, dtypes={"T": "fp16"})

    aotc_checked = host.checked

    results: dict[str, list[float]] = {}
    paths = (
        ("triton_jit", triton_call),
        ("aotc", aotc_call),
        ("aotc_checked", aotc_checked),
        ("aotc_raw_ptrs", aotc_raw),
    )
    for name, fn in paths:
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            samples.append((t1 - t0) / n * 1e6)
        results[name] = samples
    # GPU time per kernel, to show the loop is host-bound.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(100):
            triton_call()
    g.replay()
    torch.cuda.synchronize()
    start.record()
    g.replay()
    end.record()
    torch.cuda.synchronize()
    out_stats = {name: statistics.median(s) for name, s in results.items()}
    out_stats["gpu_kernel_us"] = start.elapsed_time(end) * 1000 / 100
    out_stats.update(breakdown(host, args, n, repeats))
    b.close()
    return out_stats


def breakdown(host: Any, args: tuple[Any, ...], n: int, repeats: int) -> dict[str, float]:
    """Where a fast-path call's host time goes: each piece (loader/profile.py) timed alone,
    in a loop."""
    import torch

    pieces = {
        "part_driver_call": host.driver_call,  # the bare cuLaunchKernel, arguments prebuilt
        "part_stream_query": host.stream,
        "part_lookup": host.lookup,
        "part_pack_grid": host.pack_grid,
        "part_tensor_attrs": lambda: [(a.data_ptr(), a.dtype, a.is_cuda) for a in args[:3]],
    }
    out = {}
    for name, fn in pieces.items():
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples.append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
        out[name] = statistics.median(samples)
    return out


def ready(bundle_path: str, runs: int) -> dict[str, dict[str, float]]:
    def run(code: str, arg: str, env: dict[str, str]) -> dict[str, float]:
        proc = subprocess.run(
            [sys.executable, "-c", code, arg],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=True,
        )
        return eval(proc.stdout.strip().splitlines()[-1])  # our own child's dict literal

    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out: dict[str, list[dict[str, float]]] = {"aotc": [], "triton_cold": [], "triton_warm": []}
    kernels = str(ROOT / "recipes" / "kernels")
    for _ in range(runs):
        out["aotc"].append(run(READY_AOTC, bundle_path, env))
        with tempfile.TemporaryDirectory() as cache:
            tenv = {**env, "TRITON_CACHE_DIR": cache}
            out["triton_cold"].append(run(READY_TRITON, kernels, tenv))
            out["triton_warm"].append(run(READY_TRITON, kernels, tenv))
    return {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", default=str(ROOT / "artifacts" / "example-0.1.0.aotc"))
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ready-runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    calls = per_call(args.bundle, args.n, args.repeats)
    rdy = ready(args.bundle, args.ready_runs)
    if args.json:
        args.json.write_text(json.dumps({"per_call_us": calls, "ready_s": rdy}, indent=2))
    base = calls["triton_jit"]
    print(
        "\nhost overhead per call (median of runs, µs)   [GPU time per kernel "
        f"{calls['gpu_kernel_us']:.2f} µs]"
    )
    print(f"{'launcher':<16}{'µs/call':>10}{'vs triton':>12}")
    for name in ("triton_jit", "aotc", "aotc_checked", "aotc_raw_ptrs"):
        print(f"{name:<16}{calls[name]:>10.2f}{calls[name] / base:>11.2f}x")
    print("where an aotc call's time goes (each piece alone, µs):")
    for name in sorted(k for k in calls if k.startswith("part_")):
        print(f"  {name.removeprefix('part_'):<16}{calls[name]:>8.2f}")
    print("\ntime to ready in a fresh process (s, median; after torch has made its inputs)")
    print(f"{'path':<14}{'import':>9}{'open':>9}{'1st call':>10}{'ready':>9}{'vs aotc':>10}")
    a = rdy["aotc"]["ready"]
    for name, r in rdy.items():
        print(
            f"{name:<14}{r['import']:>9.3f}{r.get('open', 0.0):>9.3f}{r['first_call']:>10.3f}"
            f"{r['ready']:>9.3f}{r['ready'] / a:>9.1f}x"
        )
    print(
        f"aotc warmup of all {int(rdy['aotc']['modules'])} modules for this GPU: "
        f"{rdy['aotc']['warmup_all'] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()

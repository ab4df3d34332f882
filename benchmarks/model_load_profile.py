"""Where a model bundle's time to ready goes, in a fresh process (run on the GPU).

    python benchmarks/model_load_profile.py --bundle artifacts/layer-0.1.0.aotc [--threads 8]

Prints one JSON line: seconds to import torch, to open the bundle and bind the module, per
bucket to load its Inductor artifact and to capture its CUDA graph (first bucket first: it
pays Inductor's one-time set-up), then to the first result of each bucket; ``ready_s`` is
process start to the last of those. With --threads N the artifacts are loaded by N
threads at once before any capture, to see whether loading parallelizes. --profile PATH
writes a cProfile of the first bucket's load (pstats, top 40 by cumulative time), and of
its capture (the first call of the artifact, then the graph) beside it (PATH.capture).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

T0 = time.perf_counter()
import torch  # noqa: E402

T_TORCH = time.perf_counter() - T0
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "recipes" / "models"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--profile", type=Path)
    args = p.parse_args()

    from layer import make_layer

    import loader

    t = time.perf_counter()
    m = make_layer().cuda().half().eval()
    torch.cuda.synchronize()
    t_module = time.perf_counter() - t
    t = time.perf_counter()
    runner = loader.load_model(args.bundle, m)
    t_open = time.perf_counter() - t
    t = time.perf_counter()
    loads = load_each(runner, args.threads, args.profile)
    t_loads = time.perf_counter() - t
    with torch.no_grad():
        captures = capture_each(runner, None if args.threads else args.profile)
        firsts = []  # the first result of each bucket (a direct bucket's first run of its shape)
        for i in range(len(runner.grid)):
            s = time.perf_counter()
            runner(torch.randn(*runner.grid.bounds_of(i), 1024, device="cuda", dtype=torch.half))
            torch.cuda.synchronize()
            firsts.append(time.perf_counter() - s)
    ready = time.perf_counter() - T0
    print(json.dumps({
        "threads": args.threads, "import_torch_s": T_TORCH, "module_s": t_module,
        "open_bind_s": t_open, "loads_s": t_loads, "load_each_s": [round(x, 3) for x in loads],
        "capture_each_s": [round(x, 3) for x in captures],
        "first_call_each_s": [round(x, 3) for x in firsts], "ready_s": ready,
        "gpu_mem_gib": torch.cuda.memory_reserved() / 2**30,
    }))  # fmt: skip


def load_each(runner: Any, threads: int, profile: Path | None) -> list[float]:
    """Seconds to load each bucket's artifact (``load_bucket``), by ``threads`` threads at
    once if any, else one by one (the first under cProfile if ``profile``)."""

    def load(index: int) -> float:
        s = time.perf_counter()
        runner.load_bucket(index)
        return time.perf_counter() - s

    indices = range(len(runner.grid))
    if threads:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(load, indices))
    loads = []
    for i in indices:
        if i == 0 and profile:
            s = time.perf_counter()
            profiled(profile, runner.load_bucket, i)
            loads.append(time.perf_counter() - s)
        else:
            loads.append(load(i))
    return loads


def capture_each(runner: Any, profile: Path | None) -> list[float]:
    """Seconds to capture each graph-served bucket's CUDA graph (``warmup`` of a bucket
    already loaded), the first under cProfile if ``profile`` (written to PATH.capture)."""
    captures = []
    for i in range(len(runner.grid)):
        sizes = runner.grid.named(i)
        if not runner.bucket_for(sizes).replays:  # served directly: nothing to capture
            continue
        s = time.perf_counter()
        if i == 0 and profile:
            profiled(Path(f"{profile}.capture"), runner.warmup, **sizes)
        else:
            runner.warmup(**sizes)
        torch.cuda.synchronize()
        captures.append(time.perf_counter() - s)
    return captures


def profiled(path: Path, fn: Any, *args: Any, **kwargs: Any) -> None:
    """``fn(*args, **kwargs)`` under cProfile; the top 40 by cumulative time to ``path``."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(fn, *args, **kwargs)
    with open(path, "w") as f:
        pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()

"""Does a config's rank depend on how long the GPU has been busy? (issue 18)

The gallery's linear at M = 4096 ships 128x128x64 w8 s4, which the tuner measured 5%
faster than 128x256x64 w8 s3; the steady-state bench (``do_bench``: 25 ms of warm-up, then
100 ms of launches back to back) finds the second 2% faster. The tuner times each finalist
for 10 ms (``aot.tune.measure.FINAL_TARGET_MS``), so it may see boost clocks that a GPU
under sustained load does not keep. This times every config of the kernel's autotune list,
through Triton's JIT, three ways, each interleaved over the configs for ``--rounds`` rounds:

- ``burst``: the tuner's final timing (``aot.tune.worker.Worker.time``, 10 ms target, L2
  flushed before every launch) after an idle pause;
- ``heated``: the same 10 ms, right after 200 ms of the same config back to back;
- ``sustained``: ``triton.testing.do_bench`` (what the JIT's autotuner and the bench use).

    python3 benchmarks/probe_sustained.py [--kernel linear] [--m 1024 4096] [--json out]

Needs a GPU. A background ``nvidia-smi`` samples the SM clock and power every 20 ms into
``--smi`` (when given), so the log shows whether the clock drops under load.
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
sys.path.insert(0, str(ROOT / "recipes" / "gallery"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch
    import triton
    from linear import LINEAR_CONFIGS, linear_kernel
    from reference import linear_inputs

    from aot.tune.measure import FINAL_TARGET_MS
    from aot.tune.worker import Worker

    worker = Worker(0)
    jit = linear_kernel.fn  # the @triton.jit function under the autotuner
    rows = []
    for m in args.m:
        sizes = {"M": m, "N": 4608, "K": 3584}
        a = linear_inputs(sizes, {"T": args.dtype})
        a[2] = None  # no bias
        launches = {}
        for cfg in LINEAR_CONFIGS:
            meta = dict(cfg.kwargs)
            grid = (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(4608, meta["BLOCK_N"]),)

            def run(a=a, meta=meta, grid=grid, cfg=cfg):  # type: ignore[no-untyped-def]
                jit[grid](*a, **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages)

            run()
            name = (f"{meta['BLOCK_M']}x{meta['BLOCK_N']}x{meta['BLOCK_K']} "
                    f"w{cfg.num_warps} s{cfg.num_stages}")  # fmt: skip
            launches[name] = run
        torch.cuda.synchronize()
        modes = ("burst", "heated", "sustained")
        times = {n: {mode: [] for mode in modes} for n in launches}
        for _ in range(args.rounds):
            for name, run in launches.items():
                time.sleep(0.2)  # idle, as between the tuner's requests
                s = worker.time(lambda _x, run=run: run(), [[]], FINAL_TARGET_MS)
                times[name]["burst"].append(statistics.median(s))
            for name, run in launches.items():
                end = time.perf_counter() + 0.2
                while time.perf_counter() < end:
                    for _ in range(20):
                        run()
                    torch.cuda.synchronize()
                s = worker.time(lambda _x, run=run: run(), [[]], FINAL_TARGET_MS)
                times[name]["heated"].append(statistics.median(s))
            for name, run in launches.items():
                times[name]["sustained"].append(triton.testing.do_bench(run, return_mode="median"))
        best = {mode: min(statistics.median(t[mode]) for t in times.values())
                for mode in ("burst", "heated", "sustained")}  # fmt: skip
        print(f"\nlinear {args.dtype} M={m}, N=4608, K=3584: median ms over {args.rounds} "
              "rounds (x best of the mode)")  # fmt: skip
        print(f"{'config':<22} {'burst':>16} {'heated':>16} {'sustained':>16}")
        for name, t in times.items():
            cells = []
            for mode in ("burst", "heated", "sustained"):
                ms = statistics.median(t[mode])
                cells.append(f"{ms:.4f} {ms / best[mode]:5.3f}x")
            print(f"{name:<22} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16}")
            rows.append({"M": m, "config": name, **{k: v for k, v in t.items()}})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why a bucket served directly measures slower than the module it calls (run on the GPU).

    python benchmarks/model_host_delay.py --bundle artifacts/layer-0.1.0.aotc 16x2048 32x2048

At buckets served by the module's own forward, called directly (``eager direct``), the
loader runs exactly eager's kernels, yet measured 0.3-1.4% slower than calling the module.
This times, per shape, variants of one call that differ only in what the host does before
or around the module, against the module itself; each call from an idle GPU (CUDA events),
the variants in a shuffled order every turn, and each variant's time over the module's
paired per turn, with a 95% interval (model_bench.paired_ratio; below 1: slower):

  module2          the module again (a control: must be a tie)
  runner           loader.load_model's runner
  eager_call       the loader's wrapper of the module (loader.model_load.eager_call)
  route+module     the runner's routing of the shapes, then the module
  lock+module      a threading.Lock held around the module
  spin2us, spin20us  the host busy for 2 or 20 µs, then the module
  forward          module.forward (nn.Module.__call__ skipped)
  inference_mode   the module under torch.inference_mode()
  runner_nogc      the runner with Python's garbage collector off

Prints one JSON line per shape: variant -> [median µs, ratio, low, high, verdict].
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_bench import layer_runner, paired_ratio, shape_arg, verdict


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, required=True, help="a bundle of recipes/layer.toml")
    p.add_argument(
        "shapes", type=shape_arg, nargs="+", metavar="BxT", help="batch x seq, e.g. 32x2048"
    )
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args()
    torch, m, r = layer_runner(args.bundle)
    with torch.no_grad():
        for b, t in args.shapes:
            x = torch.randn(b, t, 1024, device="cuda", dtype=torch.half)
            got = _timed(variants(torch, m, r, x), args.reps)
            row: dict[str, Any] = {"shape": f"{b}x{t}",
                                   "serves": r.bucket_for(r.sizes([x])).serves}  # fmt: skip
            for k, v in got.items():
                ci = paired_ratio(got["module"], v)
                row[k] = [round(statistics.median(v), 1), round(ci[1], 4),
                          round(ci[0], 4), round(ci[2], 4), verdict(ci)]  # fmt: skip
            print(json.dumps(row), flush=True)


def variants(torch: Any, m: Any, r: Any, x: Any) -> dict[str, Callable[[], float]]:
    """Each variant as a function timing one call of it (µs)."""
    from aot.model.select import call_us
    from loader.model_load import eager_call

    run, lock = eager_call(m), threading.Lock()

    def locked() -> Any:
        with lock:
            return m(x)

    def inference() -> Any:
        with torch.inference_mode():
            return m(x)

    fns = {
        "module": lambda: m(x), "module2": lambda: m(x), "runner": lambda: r(x),
        "eager_call": lambda: run(x), "route+module": lambda: (r.route((x,)), m(x)),
        "lock+module": locked, "spin2us+module": lambda: (spin(2e-6), m(x)),
        "spin20us+module": lambda: (spin(20e-6), m(x)), "forward": lambda: m.forward(x),
        "inference_mode": inference,
    }  # fmt: skip
    timers = {k: (lambda f=f: call_us(torch, f, True)) for k, f in fns.items()}

    def nogc() -> float:
        gc.disable()
        try:
            return call_us(torch, lambda: r(x), True)
        finally:
            gc.enable()

    timers["runner_nogc"] = nogc
    return timers


def _timed(timers: dict[str, Callable[[], float]], reps: int) -> dict[str, list[float]]:
    """``reps`` samples of each timer after 10 untimed turns, in a shuffled order each turn."""
    names, rng = list(timers), random.Random(0)
    got: dict[str, list[float]] = {k: [] for k in names}
    for turn in range(10 + reps):
        order = names[:]
        rng.shuffle(order)
        for k in order:
            v = timers[k]()
            if turn >= 10:
                got[k].append(v)
    return got


if __name__ == "__main__":
    main()

"""Quality of a tuned bundle: each kernel at every bucket against the baseline PyTorch uses
(cuBLAS through torch.mm for the matmul, torch's rms_norm), in one run, as ratios.

    python benchmarks/tune_quality.py --bundle artifacts/example-0.1.0.aotc

Both sides are timed the way the tuner times candidates (aot/tune/worker.py): CUDA events
around each call, L2 flushed before every repetition, ~25 ms of repetitions, median; inputs
from the recipe's ``inputs`` (random, never zeros) at each bucket's upper bound. A ratio
above 1 means aotc is faster. The RMSNorm is also shown against the H200's measured copy
bandwidth (4.3 TB/s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--recipe", default=str(ROOT / "recipes" / "example.toml"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import loader
    from aot.recipe import load
    from aot.tune.worker import Worker

    recipe = load(args.recipe)
    w = Worker(0)
    bundle = loader.open(args.bundle)
    rows = []
    for kr in recipe.kernels:
        assert kr.inputs and kr.tune.baseline
        base = f"{recipe.root / kr.tune.baseline.split(':')[0]}:{kr.tune.baseline.split(':')[1]}"
        inputs = f"{recipe.root / kr.inputs.split(':')[0]}:{kr.inputs.split(':')[1]}"
        k = bundle.kernel(kr.name)
        baseline = _fn(base)
        for dtype in kr.dtypes["T"]:
            for m in kr.buckets["M"]:
                sizes = {**kr.sizes, "M": m}
                sets = w.input_sets(inputs, sizes, {"T": dtype})
                ours = _median(w.time(lambda a, k=k: k(*a), sets, 25.0))
                theirs = _median(w.time(lambda a, f=baseline: f(*a), sets, 25.0))
                env = {**kr.fixed, **sizes}
                row = {"kernel": kr.name, "dtype": dtype, "M": m, "aotc_us": ours * 1e3,
                       "baseline_us": theirs * 1e3, "ratio": theirs / ours}  # fmt: skip
                if kr.tune.flops is not None:
                    row["tflops"] = kr.tune.flops.evaluate(env) / ours / 1e9
                if kr.tune.bytes is not None:
                    row["gbps"] = kr.tune.bytes.evaluate(env) / ours / 1e6
                rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{'kernel':<8}{'dtype':<6}{'M':>6}{'aotc µs':>10}{'torch µs':>10}{'ratio':>8}"
          f"{'TFLOP/s':>9}{'GB/s':>8}{'%4.3TB/s':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['kernel']:<8}{r['dtype']:<6}{r['M']:>6}{r['aotc_us']:>10.1f}"
              f"{r['baseline_us']:>10.1f}{r['ratio']:>7.2f}x"
              f"{r.get('tflops', 0):>9.1f}{r.get('gbps', 0):>8.0f}"
              f"{100 * r.get('gbps', 0) / 4300:>8.0f}%")  # fmt: skip


def _fn(ref: str):  # type: ignore[no-untyped-def]
    from aot.kernelfile import load_function

    return load_function(ref)


def _median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs)


if __name__ == "__main__":
    main()

"""Would more training kernels bring the cost model's held-out misses within 1.25×?

    python benchmarks/costmodel_curve.py [--fractions 0.25 0.5 0.75 0.9] [--seeds 1 2 3]

Leave one kernel out as benchmarks/costmodel_eval.py runs it (the same databases, recipes,
model settings and scored buckets), except that each held-out kernel's model is trained on
a random share of the other kernels only: for each fraction and seed, a draw of
``round(fraction × others)`` kernels per held-out kernel (seeded by the seed and the kernel,
so a run repeats). How the figures grow with the number of training kernels says whether
more kernels of our own, measured on the GPU, is the lever, and about how much one more
brings. The full set (fraction 1) is costmodel_eval.py's figure, printed last. Every run
takes one to three minutes on the 2-core CPU machine once the dataset is loaded (its
compiles go through the compile cache). No GPU.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from itertools import groupby
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from costmodel_eval import DBS, RECIPES  # noqa: E402

from aot.costmodel import dataset  # noqa: E402
from aot.costmodel.dataset import Dataset  # noqa: E402
from aot.costmodel.evaluate import Scored, by_kernel, fit, geomean, score  # noqa: E402
from aot.env import from_environ  # noqa: E402


def share(fraction: float, others: int) -> int:
    """How many of ``others`` kernels a draw of ``fraction`` takes (at least one)."""
    return max(1, round(fraction * others))


def drawn(families: list[str], kernel: str, fraction: float, seed: int) -> set[str]:
    """The kernels a model for ``kernel`` (held out) trains on: a seeded draw of ``fraction``
    of the others."""
    others = [f for f in families if f != kernel]
    return set(random.Random(f"{seed}:{kernel}").sample(others, share(fraction, len(others))))


def held_out(
    ds: Dataset, fraction: float, seed: int, params: dict[str, Any] | None = None
) -> list[Scored]:
    """Each kernel's buckets, picked by a model trained on a draw of the other kernels
    (``params``: the model's settings, the shipped ones by default)."""
    families = sorted({e.family for e in ds.examples})
    out: list[Scored] = []
    for family, mine in groupby(by_kernel(ds), key=lambda e: e.family):
        keep = drawn(families, family, fraction, seed)
        model = fit([e for e in ds.examples if e.family in keep], params)
        out += [score(model, e) for e in mine]
    return out


def row(label: str, kernels: str, runs: list[list[Scored]]) -> str:
    within = [sum(r.model <= 1.25 for r in rs) for rs in runs]
    means = [geomean([r.model for r in rs]) for rs in runs]
    worst = [max(r.model for r in rs) for rs in runs]
    n = len(runs[0])
    cells = [label, kernels, str(len(runs)),
             f"{statistics.mean(within):.0f}/{n} ({min(within)}–{max(within)})",
             f"{statistics.mean(means):.3f}× ({min(means):.3f}–{max(means):.3f})",
             f"{statistics.median(worst):.2f}×"]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 0.75, 0.9])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    if not all(0 < f < 1 for f in args.fractions):
        sys.exit("costmodel_curve: --fractions: each must lie between 0 and 1 (1 is the "
                 "full set, printed anyway)")  # fmt: skip
    ds = dataset.load(DBS, RECIPES, from_environ())
    others = len({e.family for e in ds.examples}) - 1
    print("| training kernels | of the others | runs | within 1.25× (range) | geomean (range) "
          "| worst (median) |\n|---|---:|---:|---:|---:|---:|")  # fmt: skip
    for fraction in sorted(args.fractions):
        t = time.time()
        runs = [held_out(ds, fraction, seed) for seed in args.seeds]
        print(row(f"{fraction:.0%}", f"{share(fraction, others)}/{others}", runs), flush=True)
        print(f"({fraction:.0%}: {time.time() - t:.0f} s)", file=sys.stderr, flush=True)
    full = held_out(ds, 1.0, 0)  # every other kernel: the draw is all of them
    print(row("100%", f"{others}/{others}", [full]))


if __name__ == "__main__":
    main()

"""Would more features bring the cost model's leave-one-kernel-out misses within 1.25×?

    python benchmarks/costmodel_features_probe.py [loads other warps_per_sm loads+other ...]

Each argument is a set of candidate columns (joined by "+") appended to the shipped
features; for each set, leave-one-kernel-out is run as benchmarks/costmodel_eval.py runs
it (the same databases, recipes and model settings), and the geomean, the worst bucket,
how many buckets are within 1.25× and the misses are printed, the shipped features first.
Each run takes about two minutes on the 2-core CPU machine once the dataset is loaded
(its compiles go through the compile cache). No GPU.

The candidates, from what the misses looked like (benchmarks/RESULTS.md, issue 19):

- ``loads``: log2 of the bytes a program reads over its block: how many block loads one
  program makes (a K loop's trip count, in a matmul);
- ``other``: log2 of the product of the integer meta-parameters that are neither tile nor
  block (GROUP_SIZE_M, which no feature sees, and the MoE's tied rows);
- ``warps_per_sm``: log2 of the warps the grid launches per SM (few programs with many
  warps, as in paged_decode_reduce, where one warp is fastest).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from costmodel_eval import DBS, RECIPES  # noqa: E402

from aot.costmodel import dataset  # noqa: E402
from aot.costmodel.evaluate import Scored, leave_one_out  # noqa: E402
from aot.costmodel.features import NAMES  # noqa: E402
from aot.env import from_environ  # noqa: E402
from aot.plan import Config  # noqa: E402

AT = {n: i for i, n in enumerate(NAMES)}


def _other(c: Config, row: Sequence[float]) -> float:
    vals = [int(v) for k, v in c.meta if isinstance(v, int) and not isinstance(v, bool)
            and "BLOCK" not in k.upper() and v > 0]  # fmt: skip
    return math.log2(math.prod(vals)) if vals else 0.0


CANDIDATES: dict[str, Callable[[Config, Sequence[float]], float]] = {
    "loads": lambda c, r: r[AT["log2_bytes_per_program"]] - r[AT["log2_block"]],
    "other": _other,
    "warps_per_sm": lambda c, r: (
        r[AT["log2_programs"]] + math.log2(c.num_warps) - r[AT["log2_sms"]]
    ),
}


def extended(ds: dataset.Dataset, names: Sequence[str]) -> dataset.Dataset:
    """``ds`` with the candidate columns ``names`` appended to every row."""
    examples = []
    for e in ds.examples:
        matrix = tuple(tuple(row) + tuple(CANDIDATES[n](c, row) for n in names)
                       for c, row in zip(e.rows.configs, e.rows.matrix, strict=True))  # fmt: skip
        examples.append(dataclasses.replace(e, rows=dataclasses.replace(e.rows, matrix=matrix)))
    return dataclasses.replace(ds, examples=tuple(examples))


def report(results: list[Scored], label: str, seconds: float) -> None:
    ratios = [r.model for r in results]
    misses = [r for r in results if r.model > 1.25]
    geomean = math.exp(statistics.fmean(math.log(x) for x in ratios))
    print(f"{label} ({seconds:.0f} s): geomean {geomean:.3f}×, worst {max(ratios):.2f}×, "
          f"within 1.25× {len(ratios) - len(misses)}/{len(ratios)}", flush=True)  # fmt: skip
    for r in misses:
        print(f"    {r.example.label} {dict(r.example.group.problem)} {r.model:.2f}×")


def main() -> None:
    sets = [[n for n in arg.split("+") if n] for arg in sys.argv[1:]]
    unknown = {n for s in sets for n in s} - CANDIDATES.keys()
    if unknown:
        sys.exit(f"unknown candidates {sorted(unknown)}; known: {sorted(CANDIDATES)}")
    ds = dataset.load(DBS, RECIPES, from_environ())
    for names in [[], *sets]:
        start = time.monotonic()
        results = leave_one_out(extended(ds, names), names=(*NAMES, *names))
        report(results, "+".join(names) or "shipped features", time.monotonic() - start)


if __name__ == "__main__":
    main()

"""The heuristic's picks with and without passing over a pick that spills (aot/select.py),
scored on the H200 tuning databases that benchmarks/costmodel_eval.py reads.

Per measured bucket, a pick scores its measured time over the bucket's best. The
spill-aware pick is the first config in the heuristic's order whose compiled variant (the
one a call runs) does not spill, among the first 1 + SPILL_LOOKAHEAD. Only the bucket's
timed configs are candidates here, whereas a build looks at every candidate. CPU only,
a few minutes with a warm compile cache:

    python benchmarks/heuristic_spills_eval.py
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _geomean(xs: list[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs))


def main() -> None:
    from costmodel_eval import DBS, RECIPES

    from aot.costmodel import dataset
    from aot.costmodel.evaluate import evaluated
    from aot.env import from_environ
    from aot.select import SPILL_LOOKAHEAD

    examples = evaluated(dataset.load(DBS, RECIPES, from_environ()))
    plain: list[float] = []
    aware: list[float] = []
    changed: list[tuple[str, float, float]] = []
    first_spills = 0
    for e in examples:
        best = min(e.times)
        ids = [c.id for c in e.rows.configs]
        order = [ids.index(i) for i in e.heuristic]
        pick = first = order[0]
        if e.rows.spills[first]:
            first_spills += 1
            look = order[1 : 1 + SPILL_LOOKAHEAD]
            pick = next((i for i in look if not e.rows.spills[i]), first)
        plain.append(e.times[first] / best)
        aware.append(e.times[pick] / best)
        if pick != first:
            changed.append((e.label, plain[-1], aware[-1]))
    print(f"{len(examples)} measured buckets; the heuristic's first pick spills in {first_spills}")
    for name, xs in (("heuristic", plain), ("heuristic, spills passed over", aware)):
        within = sum(x <= 1.25 for x in xs)
        print(f"{name:<32} geomean {_geomean(xs):.3f}  worst {max(xs):.2f}  "
              f"within 1.25x {within}/{len(xs)}")  # fmt: skip
    for label, was, now in changed:
        print(f"  {label}: {was:.3f}x -> {now:.3f}x")


if __name__ == "__main__":
    main()

"""Buckets no GPU measured, picked by the cost model calibrated on the kernel's other
buckets' measurements (``aot/costmodel/calibrate.py``), replayed on every held-out bucket
of the committed H200 measurements (issue 19). No GPU.

    python benchmarks/costmodel_calibrated.py [--seeds 3] [--json out.json]
    python benchmarks/costmodel_calibrated.py --heldout [--seeds 3] [--json out.json]

For each kernel held out in turn (``evaluate.without``: a model trained on every other
kernel, as ``costmodel_eval.py`` does), or with ``--heldout`` the held-out libraries'
kernels under the model aotc ships, which never trained on them (their sources laid out as
``costmodel_heldout.py`` says), its buckets are grouped as a build decides them
(database, kernel, dtypes). Two ways a database can leave buckets unmeasured:

- ``one missing``: every other bucket of the group was tuned, this one not (the recipe
  gained it after its GPU runner tuned);
- ``every other``: the group's buckets sorted by size, the even ones tuned, the odd ones
  predicted (a runner that tuned half the buckets).

A bucket "tuned" is tuned again in replay by the tuner's ``model`` strategy as a build
with a GPU runs it (the learned order, refitted online; cold, patience 8, budget 60; each
benchmark read with 2% Gaussian noise, one seed a run): the calibration sees only the
configs that run timed, as a real database holds. Each predicted bucket's pick, its
measured time over the bucket's best, four ways:

- ``model``: what a CPU-only build ships today (the compile-free shortlist of 12, the full
  rankers' best that does not spill among them: ``evaluate.shortlisted``);
- ``calibrated``: the same with both passes' scores calibrated (the shortlist by the
  compile-free scores refitted to the measured buckets, the pick by the full ones, refitted
  to the measured configs the build compiled: those in their own buckets' shortlists), as
  ``predict.chooser`` does;
- ``calibrated, all compiled``: the calibrated full scores over every timed config (the bound);
- ``nearest's winner``: the nearest measured bucket's fastest timed config, where this
  bucket timed it (else the model's pick): reusing a neighbour's config by hand.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from itertools import groupby
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sample_efficiency import replay  # noqa: E402

from aot.costmodel.calibrate import Measured, calibrated, distance  # noqa: E402
from aot.costmodel.evaluate import geomean, shortlisted  # noqa: E402
from aot.costmodel.model import best_first  # noqa: E402
from aot.costmodel.predict import PREFILTER  # noqa: E402
from aot.tune import strategies  # noqa: E402

BUDGET, PATIENCE, SIGMA = 60, 8, 0.02
WAYS = ("model", "calibrated", "calibrated, all compiled", "nearest's winner")
SCENARIOS = ("one missing", "every other")


class Bucket:
    """A held-out bucket: its timed configs with the held-out model's two kinds of score."""

    def __init__(self, e, model) -> None:  # type: ignore[no-untyped-def]
        self.e = e
        self.configs = list(e.rows.configs)
        self.times = dict(zip(self.configs, e.times, strict=True))
        self.spills = dict(zip(self.configs, e.rows.spills, strict=True))
        self.full = dict(zip(self.configs, model.score(e.rows.matrix), strict=True))
        self.free = dict(zip(self.configs, model.score_pending(e.pending.matrix), strict=True))
        self.problem = dict(e.group.problem)
        self.best = min(e.times)
        top = best_first([self.free[c] for c in self.configs], [False] * len(self.configs))
        self.shortlist = {self.configs[i] for i in top[:PREFILTER]}

    def ratio(self, c) -> float:  # type: ignore[no-untyped-def]
        return self.times[c] / self.best

    def tuned(self, seed: int) -> dict:  # type: ignore[no-untyped-def]
        """What the tuner times here in replay: config -> its noisy time."""
        order = sorted(self.configs, key=lambda c: -self.full[c])
        s = strategies.Model(order, budget=BUDGET, patience=PATIENCE, seed=seed, prior=self.full)
        truth = {c.id: t for c, t in self.times.items()}
        _, seen = replay(s, truth, SIGMA, random.Random(1000 * seed + 7), self.best, BUDGET)
        return seen


def pick(b: Bucket, first: dict, full: dict):  # type: ignore[no-untyped-def]
    """The build's rule on one bucket's rows: ``first``'s PREFILTER best compiled (more
    while all spill), the best of ``full`` among them that does not spill."""
    i = shortlisted([full[c] for c in b.configs], [first[c] for c in b.configs],
                    [b.spills[c] for c in b.configs])  # fmt: skip
    return b.configs[i]


def predicted(b: Bucket, measured: list[tuple[Bucket, dict]]) -> dict[str, float]:
    out = {"model": b.ratio(pick(b, b.free, b.full))}
    free = calibrated(b.problem, b.free,
                      [Measured(m.problem, seen, m.free) for m, seen in measured])  # fmt: skip
    compiled = [Measured(m.problem, {c: t for c, t in seen.items() if c in m.shortlist}, m.full)
                for m, seen in measured]  # fmt: skip
    out["calibrated"] = b.ratio(pick(b, free, calibrated(b.problem, b.full, compiled)))
    every = calibrated(b.problem, b.full,
                       [Measured(m.problem, seen, m.full) for m, seen in measured])  # fmt: skip
    out["calibrated, all compiled"] = b.ratio(
        min(b.configs, key=lambda c: (b.spills[c], -every[c], -b.full[c]))
    )
    _, seen = min(measured, key=lambda ms: distance(b.problem, ms[0].problem))
    win = min(seen, key=seen.__getitem__)
    same = next((c for c in b.configs if c.id == win.id), None)
    out["nearest's winner"] = b.ratio(same) if same is not None else out["model"]
    return out


def scenario(group: list[Bucket], name: str, seed: int) -> list[tuple[Bucket, dict]]:
    """Each predicted bucket of ``group`` with its ratios, under ``name``."""
    tuned = {id(b): b.tuned(seed) for b in group}
    group = sorted(group, key=lambda b: sorted(b.problem.items()))
    out = []
    for i, b in enumerate(group):
        if name == "one missing":
            others = [m for m in group if m is not b]
        elif i % 2 == 1:
            others = group[0::2]
        else:
            continue
        measured = [(m, tuned[id(m)]) for m in others if len(tuned[id(m)]) >= 2]
        if measured:
            out.append((b, predicted(b, measured)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--heldout", action="store_true",
                    help="the held-out libraries' kernels, under the model aotc ships")  # fmt: skip
    args = ap.parse_args()
    if args.heldout:
        with tempfile.TemporaryDirectory(prefix="aotc-calibrated-") as work:
            groups = heldout_groups(Path(work))
    else:
        groups = held_out_by_kernel()
    rows = []
    for name in SCENARIOS:
        for seed in range(args.seeds):
            for group in groups:
                for b, r in scenario(group, name, seed):
                    rows.append({"scenario": name, "seed": seed, "kernel": b.e.label,
                                 "db": b.e.group.db.rsplit("/data/", 1)[-1],
                                 "dtypes": dict(b.e.group.dtypes), "problem": b.problem,
                                 "configs": len(b.configs), **r})  # fmt: skip
    print(f"{len(groups)} groups of held-out buckets (database, kernel, dtypes), "
          f"{sum(map(len, groups))} buckets; {args.seeds} seeds of the tuning "
          "replayed")  # fmt: skip
    print(summary(rows, args.seeds))
    if args.json:
        lines = ",\n".join(json.dumps(r) for r in rows)
        args.json.write_text(f'{{"seeds": {args.seeds}, "buckets": [\n{lines}\n]}}\n')


def _grouped(examples, model) -> list[list[Bucket]]:  # type: ignore[no-untyped-def]
    key = lambda e: (e.group.db, e.group.kernel, e.group.dtypes)  # noqa: E731
    return [[Bucket(e, model) for e in g] for _, g in groupby(sorted(examples, key=key), key=key)]


def held_out_by_kernel() -> list[list[Bucket]]:
    """The committed H200 measurements, each kernel scored by a model trained without it."""
    from costmodel_eval import DBS, RECIPES

    from aot.costmodel import dataset
    from aot.costmodel.evaluate import by_kernel, without
    from aot.env import from_environ

    ds = dataset.load(DBS, RECIPES, from_environ())
    groups: list[list[Bucket]] = []
    for family, mine in groupby(by_kernel(ds), key=lambda e: e.family):
        mine = list(mine)
        groups += _grouped(mine, without(ds.examples, family))
        print(f"  {mine[0].label}: scored", file=sys.stderr, flush=True)
    return groups


def heldout_groups(work: Path) -> list[list[Bucket]]:
    """The held-out libraries' measurements, scored by the model aotc ships."""
    from costmodel_heldout import DATA, LIBRARIES, lay_out, sources

    from aot.costmodel import dataset
    from aot.costmodel.evaluate import evaluated
    from aot.costmodel.predict import shipped
    from aot.env import from_environ

    groups: list[list[Bucket]] = []
    for lib, folder in sources([]).items():
        if not (folder / LIBRARIES[lib][0]).is_dir():
            print(f"  {lib}: skipped, no sources in {folder}", file=sys.stderr)
            continue
        dbs = [DATA / f"h200-heldout-{lib}" / f"{db}.tunedb.jsonl.gz" for db in LIBRARIES[lib][1]]
        ds = dataset.load(dbs, lay_out(lib, folder, work), from_environ())
        groups += _grouped(evaluated(ds), shipped())
        print(f"  {lib}: scored", file=sys.stderr, flush=True)
    return groups


def summary(rows: list[dict], seeds: int) -> str:
    """Per scenario and way: geomean, worst and buckets within 1.25×, each seed's, and
    how many buckets of the model's misses each way mends and how many it adds."""
    lines = ["", "| buckets predicted | way | geomean | worst | within 1.25× | "
             "model's misses mended | new misses |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in SCENARIOS:
        for way in WAYS:
            cells: list[list[str]] = [[], [], [], [], []]
            for seed in range(seeds):
                mine = [r for r in rows if r["scenario"] == name and r["seed"] == seed]
                xs = [r[way] for r in mine]
                cells[0].append(f"{geomean(xs):.3f}×")
                cells[1].append(f"{max(xs):.2f}×")
                cells[2].append(str(sum(x <= 1.25 for x in xs)))
                cells[3].append(str(sum(r["model"] > 1.25 >= r[way] for r in mine)))
                cells[4].append(str(sum(r[way] > 1.25 >= r["model"] for r in mine)))
            n = len([r for r in rows if r["scenario"] == name and r["seed"] == 0])
            lines.append(f"| {name} ({n}) | {way} | " + " | ".join(
                " / ".join(c) if way != "model" or i < 3 else "" for i, c in
                enumerate(cells)) + " |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""The tuner's ``model`` strategy with the learned cost model refitted online, replayed on
every held-out bucket of the committed H200 measurements (issue 19). No GPU.

    python benchmarks/costmodel_refit.py [--seeds 5] [--sigma 0.02] [--json out.json]

For each kernel held out in turn (``evaluate.without``: a model trained on every other
kernel, as ``costmodel_eval.py`` does), each of its buckets whose database timed more
configs than the strategy seeds from the model's order (``Model.SEED_TOP``: with fewer,
every variant measures them all) is tuned again in replay: a config's true time is the
one measured, and each benchmark reads it with Gaussian noise of ``--sigma``. The
strategy starts from the model's order (the tuner's, with the cubins' features known)
and goes on three ways:

- ``additive``: its local moves ordered by an additive surrogate of the parameters'
  values fitted to the bucket's measurements, the learned order only breaking ties (the
  tuner until this change);
- ``refit``: its local moves ordered by the learned model refitted to the measurements
  (``strategies.refit``: its scores calibrated to the bucket's times, corrected per
  parameter value), as shipped;
- ``refit, global``: the refitted model's best-predicted config next, neighbour of the
  best so far or not (``Model.GLOBAL_MOVES``).

``--compile-free`` orders and refits by the compile-free rankers' scores instead, as the
tuner does at an instance's first bucket while its candidates compile.

Settings (budget 60, 5 finalists re-measured in 5 rounds): cold with patience 30 and 8,
and warm-started from the previous bucket's three fastest configs (the same kernel,
database and dtypes; the tuner warm-starts from its neighbour's winners) with patience 15
and 4. Per bucket and setting, over the seeds: the median benchmarks until the best seen
is within 3% of the best (the issue's measure of sample efficiency; a run that never
gets there counts its budget + 1) and the median benchmarks spent, and the share of
runs whose final pick is within 3% of the best. The table gives their means over the
buckets (their medians are 1 benchmark: the learned order's first config is mostly
within 3%), for every bucket and for the larger spaces, where the search matters.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from itertools import groupby
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sample_efficiency import finalize, replay  # noqa: E402

from aot.tune import strategies  # noqa: E402

SETTINGS = (("cold", 30), ("cold", 8), ("warm", 15), ("warm", 4))
BUDGET = 60
VARIANTS = ("additive", "refit", "refit, global")


class Global(strategies.Model):
    GLOBAL_MOVES = True


def strategy(variant, cands, scores, patience, seed, warm):  # type: ignore[no-untyped-def]
    prior = None if variant == "additive" else dict(zip(cands, scores, strict=True))
    kind = Global if variant == "refit, global" else strategies.Model
    return kind(cands, budget=BUDGET, patience=patience, seed=seed, warm=warm, prior=prior)


def bucket_rows(e, model, prev, seeds: int, sigma: float, free: bool) -> dict:  # type: ignore[no-untyped-def]
    from aot.costmodel.model import best_first

    raw = model.score_pending(e.pending.matrix) if free else model.score(e.rows.matrix)
    idx = best_first(raw, [False] * len(raw))  # the tuner does not demote spills
    cands = [e.rows.configs[i] for i in idx]
    scores = [raw[i] for i in idx]
    truth = {c.id: t for c, t in zip(e.rows.configs, e.times, strict=True)}
    best = min(e.times)
    row: dict = {"kernel": e.label, "db": e.group.db.rsplit("/data/", 1)[-1],
                 "dtypes": dict(e.group.dtypes), "problem": dict(e.group.problem),
                 "configs": len(cands)}  # fmt: skip
    for variant in VARIANTS:
        for start, patience in SETTINGS:
            warm = [c for c in cands if c.id in prev] if start == "warm" else []
            hits, used, within = [], [], 0
            for seed in range(seeds):
                rng = random.Random(1000 * seed + 7)
                s = strategy(variant, cands, scores, patience, seed, warm)
                hit, seen = replay(s, truth, sigma, rng, best, BUDGET)
                hits.append(hit if hit is not None else BUDGET + 1)
                used.append(len(seen))
                within += truth[finalize(seen, truth, sigma, rng, 5, 5).id] <= best * 1.03
            key = f"{variant}|{start}{patience}"
            row[key] = {"to3": statistics.median(hits), "used": statistics.median(used),
                        "within3": within / seeds}  # fmt: skip
    return row


SPACES = ((strategies.Model.SEED_TOP + 1, "every bucket"), (30, "30 configs or more"),
          (60, "60 or more"), (150, "150 or more"))  # fmt: skip


def summary(rows: list[dict]) -> str:
    """Per space size and variant: each setting's mean benchmarks to within 3%, mean
    spent, share of picks within 3%; and how many buckets' median run needs more than 8."""
    lines = ["", "| buckets | variant | " + " | ".join(f"{s} p{p}" for s, p in SETTINGS) + " |",
             "|---|---|" + "---|" * len(SETTINGS)]  # fmt: skip
    for least, label in SPACES:
        mine = [r for r in rows if r["configs"] >= least]
        for variant in VARIANTS:
            cells = []
            for s, p in SETTINGS:
                cs = [r[f"{variant}|{s}{p}"] for r in mine]
                cells.append(f"{statistics.mean(c['to3'] for c in cs):.2f} / "
                             f"{statistics.mean(c['used'] for c in cs):.1f}; "
                             f"{100 * statistics.mean(c['within3'] for c in cs):.1f}%; "
                             f"{sum(c['to3'] > 8 for c in cs)} past 8")  # fmt: skip
            lines.append(f"| {label} ({len(mine)}) | {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sigma", type=float, default=0.02)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--compile-free",
        action="store_true",
        help="order and refit by the compile-free rankers' scores, as the tuner does at an "
        "instance's first bucket, before its candidates compile",
    )
    args = ap.parse_args()

    from costmodel_eval import DBS, RECIPES

    from aot.costmodel import dataset
    from aot.costmodel.evaluate import by_kernel, without
    from aot.env import from_environ

    ds = dataset.load(DBS, RECIPES, from_environ())
    rows = []
    for family, mine in groupby(by_kernel(ds), key=lambda e: e.family):
        mine = [e for e in mine if len(e.times) > strategies.Model.SEED_TOP]
        if not mine:
            continue
        model = without(ds.examples, family)
        mine.sort(key=lambda e: (e.group.db, e.group.kernel, e.group.dtypes, e.group.problem))
        prev: dict[tuple, set[str]] = {}
        for e in mine:
            line = (e.group.db, e.group.kernel, e.group.dtypes)
            rows.append(
                bucket_rows(
                    e, model, prev.get(line, set()), args.seeds, args.sigma, args.compile_free
                )
            )
            fastest = sorted(zip(e.times, (c.id for c in e.rows.configs), strict=True))[:3]
            prev[line] = {i for _, i in fastest}
            print(f"  {e.label}: {len(rows)} buckets", file=sys.stderr, flush=True)
    print(f"{len(rows)} held-out buckets with more than {strategies.Model.SEED_TOP} timed configs, "
          f"{args.seeds} seeds, noise {args.sigma:.0%}. Cells: mean over buckets of the "
          "median benchmarks to within 3% / of the benchmarks spent; share of runs whose "
          "pick (5 finalists, 5 rounds) is within 3%")  # fmt: skip
    print(summary(rows))
    if args.json:
        args.json.write_text(dump(args.seeds, args.sigma, rows))


def dump(seeds: int, sigma: float, rows: list[dict]) -> str:
    """The JSON written: one bucket a line."""
    lines = ",\n".join(json.dumps(r) for r in rows)
    return f'{{"seeds": {seeds}, "sigma": {sigma}, "buckets": [\n{lines}\n]}}\n'


if __name__ == "__main__":
    main()

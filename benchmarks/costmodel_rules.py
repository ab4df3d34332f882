"""Pick rules that combine the learned cost model with the analytical heuristic, scored
leave-one-kernel-out from one set of trained models (issue 19).

    python benchmarks/costmodel_rules.py [--scores scores.json]

For each kernel (a source) held out, the model is trained once on every other kernel, as
``benchmarks/costmodel_eval.py`` does, and each member of its ensemble scores every timed
config of the held-out kernel's buckets. Every rule below then picks from those same
scores, so the rules differ only in how they pick. ``--scores`` keeps the scores: when the
file exists, the dataset and the training are skipped and the rules are scored from it.

A rule sees, per bucket: each member's scores, each config's spilling flag and the
heuristic's order (the timed configs, best first; a spilling config is passed over where
one does not spill, as builds do). Every rule ships a spilling config only where every
timed config spills. A rule with a parameter is scored at each value on a grid, and once
"nested": for each kernel held out, the value is the one that does best (most buckets
within 1.25×, then the lowest geomean) on the other kernels' held-out picks. (Those picks
come from models that trained on the held-out kernel; its own times never choose its value.)
The grids include the value that changes nothing, so "nested" can always keep the model.

Needs lightgbm; compiles what ``costmodel_eval.py`` compiles (through AOTC_CACHE_DIR). No GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MISS = 1.25


@dataclass(frozen=True)
class Case:
    """One held-out bucket: what a rule sees, and the measured times that score it."""

    label: str
    bucket: str
    times: list[float]
    spills: list[bool]
    members: list[list[float]]  # per member, a score per config (higher: predicted faster)
    heuristic: list[int]  # config indices, the heuristic's best first
    cost: list[float]  # the heuristic's cost over the bucket's least, log2 (NaN: unknown)

    @property
    def n(self) -> int:
        return len(self.times)

    def ratio(self, i: int) -> float:
        return self.times[i] / min(self.times)

    def mean(self) -> list[float]:
        return [statistics.mean(m[i] for m in self.members) for i in range(self.n)]

    def allowed(self) -> list[int]:
        """The configs a build may ship: those that do not spill, where one does not."""
        free = [i for i in range(self.n) if not self.spills[i]]
        return free or list(range(self.n))


def cases_from_dataset() -> list[Case]:
    """Train once per held-out kernel; every member scores the kernel's buckets."""
    from costmodel_eval import DBS, RECIPES

    from aot.costmodel import dataset
    from aot.costmodel.evaluate import evaluated, without
    from aot.costmodel.features import NAMES
    from aot.env import from_environ

    ds = dataset.load(DBS, RECIPES, from_environ())
    col = NAMES.index("heuristic_rel")
    targets = evaluated(ds)
    out = []
    for family in sorted({e.family for e in ds.examples}):
        model = without(ds.examples, family)
        for e in (e for e in targets if e.family == family):
            import numpy as np

            x = np.asarray(e.rows.matrix, dtype=np.float64)
            members = [[float(s) for s in b.predict(x, num_threads=1)] for b in model.boosters]
            ids = [c.id for c in e.rows.configs]
            g = e.group
            where = " ".join(f"{k}={v}" for k, v in (*g.dtypes, *g.problem))
            out.append(Case(e.label, f"{Path(g.db).name}: {where}", list(e.times),
                            list(e.rows.spills), members, [ids.index(h) for h in e.heuristic],
                            [row[col] for row in e.rows.matrix]))  # fmt: skip
        print(f"trained without {family[:8]}: {len(out)} buckets", file=sys.stderr, flush=True)
    return out


# ---- rules: Case -> the index of the config shipped -------------------------------------


def model_order(c: Case) -> list[int]:
    s = c.mean()
    return sorted(c.allowed(), key=lambda i: (-s[i], i))


def heuristic_order(c: Case) -> list[int]:
    ok = set(c.allowed())
    return [i for i in c.heuristic if i in ok]


def model(c: Case) -> int:
    return model_order(c)[0]


def heuristic(c: Case) -> int:
    return heuristic_order(c)[0]


def _heuristic_among(c: Case, chosen: set[int]) -> int:
    return next(i for i in heuristic_order(c) if i in chosen)


def _member_tops(c: Case) -> set[int]:
    ok = c.allowed()
    return {max(ok, key=lambda i: (m[i], -i)) for m in c.members}


def disagree_heuristic(c: Case) -> int:
    """Where members' top picks differ, the heuristic's pick outright."""
    return heuristic(c) if len(_member_tops(c)) > 1 else model(c)


def disagree_among_tops(c: Case) -> int:
    """Where members' top picks differ, the heuristic's first among those picks."""
    tops = _member_tops(c)
    return _heuristic_among(c, tops) if len(tops) > 1 else model(c)


def _confidence(c: Case, top: int, i: int) -> float:
    """How many standard deviations (over members) the top's score lead over ``i`` is."""
    d = [m[top] - m[i] for m in c.members]
    sd = statistics.stdev(d)
    if sd > 0:
        return statistics.mean(d) / sd
    return math.copysign(math.inf, statistics.mean(d)) if any(d) else 0.0  # exact ties: 0


def margin_heuristic(z: float) -> Callable[[Case], int]:
    """The heuristic's pick outright where the model's top two are within ``z`` standard
    deviations (over members) of each other."""

    def pick(c: Case) -> int:
        order = model_order(c)
        close = len(order) > 1 and _confidence(c, order[0], order[1]) <= z
        return heuristic(c) if close else order[0]

    return pick


def near_top(z: float) -> Callable[[Case], int]:
    """The heuristic's first among the configs whose mean score is within ``z`` standard
    deviations (over members) of the top config's: their difference to the top is not
    one the members agree on."""

    def pick(c: Case) -> int:
        order = model_order(c)
        top = order[0]
        near = {top}
        near.update(i for i in order[1:] if _confidence(c, top, i) <= z)
        return _heuristic_among(c, near)

    return pick


def heuristic_in_model_top(k: int) -> Callable[[Case], int]:
    return lambda c: _heuristic_among(c, set(model_order(c)[:k]))


def model_in_heuristic_top(k: int) -> Callable[[Case], int]:
    def pick(c: Case) -> int:
        chosen = set(heuristic_order(c)[:k])
        return next(i for i in model_order(c) if i in chosen)

    return pick


def veto_rank(q: float) -> Callable[[Case], int]:
    """The model's first config outside the heuristic's last ``q`` share of the bucket."""

    def pick(c: Case) -> int:
        ho = heuristic_order(c)
        keep = set(ho[: max(1, len(ho) - math.floor(q * len(ho)))])
        return next(i for i in model_order(c) if i in keep)

    return pick


def veto_cost(t: float) -> Callable[[Case], int]:
    """The model's first config whose heuristic cost is within 2**t of the bucket's least
    (configs of unknown cost are kept)."""

    def pick(c: Case) -> int:
        mo = model_order(c)
        return next((i for i in mo if not c.cost[i] > t), mo[0])

    return pick


def _ranks(order: Sequence[int]) -> dict[int, float]:
    n = max(1, len(order) - 1)
    return {i: r / n for r, i in enumerate(order)}


def rank_fusion(w: float) -> Callable[[Case], int]:
    """The config with the least model rank + w × heuristic rank (ranks over [0, 1])."""

    def pick(c: Case) -> int:
        mo = model_order(c)
        rm, rh = _ranks(mo), _ranks(heuristic_order(c))
        return min(mo, key=lambda i: (rm[i] + w * rh[i], rm[i]))

    return pick


def borda(c: Case) -> int:
    """The least sum of the members' ranks (a vote, where the mean is a sum of scores)."""
    ok = c.allowed()
    total = dict.fromkeys(ok, 0.0)
    for m in c.members:
        for r, i in enumerate(sorted(ok, key=lambda i: (-m[i], i))):
            total[i] += r
    return min(model_order(c), key=lambda i: total[i])


def pessimist(c: Case) -> int:
    """The config whose worst rank among the members is best."""
    ok = c.allowed()
    worst = dict.fromkeys(ok, 0)
    for m in c.members:
        for r, i in enumerate(sorted(ok, key=lambda i: (-m[i], i))):
            worst[i] = max(worst[i], r)
    return min(model_order(c), key=lambda i: worst[i])


# ---- scoring ----------------------------------------------------------------------------


def geomean(xs: Sequence[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs))


def summary(ratios: Sequence[float]) -> tuple[float, float, int]:
    return geomean(ratios), max(ratios), sum(r <= MISS for r in ratios)


def nested(
    cases: Sequence[Case], grid: dict[str, Callable[[Case], int]]
) -> tuple[list[float], dict[str, str]]:
    """For each kernel held out, the grid's value that does best on the other kernels."""
    ratios = {k: [c.ratio(rule(c)) for c in cases] for k, rule in grid.items()}
    out = [0.0] * len(cases)
    chosen = {}
    for label in sorted({c.label for c in cases}):
        others = [j for j, c in enumerate(cases) if c.label != label]

        def merit(k: str, others: list[int] = others) -> tuple[int, float]:
            g, _, ok = summary([ratios[k][j] for j in others])
            return (-ok, g)

        chosen[label] = best = min(grid, key=merit)
        for j, c in enumerate(cases):
            if c.label == label:
                out[j] = ratios[best][j]
    return out, chosen


def _short(c: Case, before: float, after: float) -> str:
    return f"{c.label.split(' ')[0]} {c.bucket.split(': ')[1]} {before:.2f}→{after:.2f}"


def changes(base: Sequence[float], new: Sequence[float], cases: Sequence[Case]) -> str:
    """How many buckets a rule moved, and the ones it moved across 1.25× (the first four)."""
    pairs = list(zip(base, new, cases, strict=True))
    better = sum(n < b * 0.99 for b, n, _ in pairs)
    worse = sum(n > b * 1.01 for b, n, _ in pairs)
    parts = [f"{better} better, {worse} worse"]
    for what, moved in (("in", [(b, n, c) for b, n, c in pairs if b > MISS >= n]),
                        ("out", [(b, n, c) for b, n, c in pairs if n > MISS >= b])):  # fmt: skip
        if moved:
            shown = "; ".join(_short(c, b, n) for b, n, c in moved[:4])
            more = f"; +{len(moved) - 4} more" if len(moved) > 4 else ""
            parts.append(f"{what} {len(moved)}: {shown}{more}")
    return ". ".join(parts)


def grids() -> dict[str, dict[str, Callable[[Case], int]]]:
    return {
        "margin → heuristic z": {
            f"margin → heuristic z={z}": margin_heuristic(z)
            for z in (-math.inf, 0.0, 0.5, 1.0, 2.0)
        },
        "near-top z": {
            f"near-top z={z}": near_top(z) for z in (-math.inf, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
        },
        "rank fusion w": {
            f"rank fusion w={w}": rank_fusion(w) for w in (0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5)
        },
        "veto heuristic's last q": {
            f"veto heuristic's last {q}": veto_rank(q) for q in (0.0, 0.1, 0.2, 0.34, 0.5)
        },
        "veto heuristic cost > 2^t": {
            f"veto heuristic cost > 2^{t}": veto_cost(t) for t in (0.5, 1, 2, 3, 4, 6, math.inf)
        },
        "heuristic in model top k": {
            f"heuristic in model top {k}": heuristic_in_model_top(k) for k in (1, 2, 3, 4)
        },
        "model in heuristic top k": {
            f"model in heuristic top {k}": model_in_heuristic_top(k) for k in (2, 3, 5, 8, 1000)
        },
    }


def report(cases: Sequence[Case]) -> None:
    single = {"model (shipped)": model, "heuristic (spills passed over)": heuristic,
              "members disagree → heuristic": disagree_heuristic,
              "members disagree → heuristic among their tops": disagree_among_tops,
              "borda vote of members": borda,
              "pessimist (best worst member rank)": pessimist}  # fmt: skip
    rows: dict[str, list[float]] = {k: [c.ratio(r(c)) for c in cases] for k, r in single.items()}
    for grid in grids().values():
        rows.update({k: [c.ratio(r(c)) for c in cases] for k, r in grid.items()})
    # not a rule: it reads the measured times; what any choice between the two picks reaches
    rows["ceiling: the faster of the model's and the heuristic's picks"] = [
        min(c.ratio(model(c)), c.ratio(heuristic(c))) for c in cases
    ]
    chosen_by = {}
    for name, grid in grids().items():
        rows[f"{name}, nested"], chosen_by[name] = nested(cases, grid)
    base = rows["model (shipped)"]
    disagree = sum(len(_member_tops(c)) > 1 for c in cases)
    print(f"{len(cases)} buckets, {len({c.label for c in cases})} kernels; members' top picks "
          f"differ in {disagree}\n")  # fmt: skip
    print("| rule | geomean | worst | within 1.25× | against the model |")
    print("|---|---:|---:|---:|---|")
    for name, rs in rows.items():
        g, w, ok = summary(rs)
        print(f"| {name} | {g:.3f}× | {w:.2f}× | {ok}/{len(rs)} | {changes(base, rs, cases)} |")
    for name, chosen in chosen_by.items():
        counts: dict[str, int] = {}
        for v in chosen.values():
            counts[v] = counts.get(v, 0) + 1
        print(f"\nnested {name}: values chosen over the kernels held out: {counts}")
    print("\nthe model's misses: the bucket's fastest config, its rank in the model's order "
          "and the heuristic's, and how many members' standard deviations the model's top "
          "leads it by")  # fmt: skip
    for j, c in enumerate(cases):
        if base[j] > MISS:
            mo, ho = model_order(c), heuristic_order(c)
            best = min(mo, key=lambda i: c.times[i])
            print(f"- {c.label} {c.bucket} ({c.n} configs): model {base[j]:.2f}×, heuristic "
                  f"{rows['heuristic (spills passed over)'][j]:.2f}×; members' tops "
                  f"{len(_member_tops(c))}; fastest: model rank {mo.index(best)}, heuristic "
                  f"rank {ho.index(best)}, lead {_confidence(c, mo[0], best):.1f} sd")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scores", type=Path, help="keep the members' scores here; reuse them")
    args = ap.parse_args()
    if args.scores and args.scores.exists():
        cases = [Case(**d) for d in json.loads(args.scores.read_text())]
    else:
        cases = cases_from_dataset()
        if args.scores:
            args.scores.write_text(json.dumps([c.__dict__ for c in cases]))
    report(cases)


if __name__ == "__main__":
    main()

"""Leave-one-kernel-out: for each kernel held out, a model trained on every other kernel
picks each of its measured buckets' config; the pick's measured time over the bucket's
best measured time says how good a CPU-only build would have been. The analytical
heuristic's pick and a random pick (the mean over the bucket's timed configs) are scored
the same way. A kernel is a source (the hash records carry): the same kernel tuned in
two recipes is held out whole.

Where two databases measured the same bucket of the same kernel (the exhaustive pass and
the example's tune), the bucket is scored once, on the database that timed more configs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from .dataset import Dataset, Example, kernel_weights
from .features import NAMES
from .model import Model, best_first, train, with_pending


@dataclass(frozen=True)
class Scored:
    example: Example
    model: float  # the model's pick: its time over the bucket's best
    heuristic: float
    random: float  # the mean over the timed configs
    spilled: bool  # the model's pick spills while a timed config does not
    unrestricted: float  # the model's best-scored config, spilling or not
    best_spills: bool  # the bucket's fastest config spills while another does not
    pick: str  # the model's pick, its config id
    fastest: str  # the bucket's fastest config, its id
    # what a CPU-only build ships, replayed: the pick among the compile-free shortlist's
    # (``shortlisted``), ranked by the compile-free rankers, and by the full ones (v1's way)
    shipped: float = float("nan")
    shipped_full: float = float("nan")


def order(model: Model, rows: Sequence[Sequence[float]], spills: Sequence[bool]) -> list[int]:
    """Row indices best-predicted first, the spilling ones last: the first is the pick."""
    return best_first(model.score(rows), spills)


def score(model: Model, e: Example) -> Scored:
    best = min(e.times)
    scores = model.score(e.rows.matrix)
    i = best_first(scores, e.rows.spills)[0]
    ids = [c.id for c in e.rows.configs]
    h = ids.index(e.heuristic[0])
    mixed = any(e.rows.spills) and not all(e.rows.spills)
    free = best_first(scores, [False] * len(scores))[0]
    fastest = e.times.index(best)
    shipped = shortlisted(scores, model.score_pending(e.pending.matrix), e.rows.spills)
    full = shortlisted(scores, model.score(e.pending.matrix), e.rows.spills)
    return Scored(e, e.times[i] / best, e.times[h] / best,
                  statistics.mean(t / best for t in e.times), e.rows.spills[i] and mixed,
                  e.times[free] / best, e.rows.spills[fastest] and mixed, ids[i],
                  ids[fastest], e.times[shipped] / best, e.times[full] / best)  # fmt: skip


def shortlisted(
    scores: Sequence[float],
    first: Sequence[float],
    spills: Sequence[bool],
    compiled: int | None = None,
) -> int:
    """The row a CPU-only build ships (``predict.chooser``, replayed on a bucket's rows):
    the ``PREFILTER`` (or ``compiled``) best of the compile-free scores ``first`` compiled,
    as many more while every one compiled spills; of those compiled, the best-scored (``scores``:
    the full rows') that does not spill, or the best-scored where all spill. The build
    also knows the configs other buckets' shortlists compiled, and scores a compiled
    config's row among rows of configs not compiled, where this scores it among compiled
    ones (its ``*_rel`` features can differ): benchmarks/costmodel_heldout.py and
    costmodel_candidates.py score the build's own picks."""
    from .predict import PREFILTER

    step = compiled or PREFILTER
    order = best_first(first, [False] * len(first))
    k = step
    while all(spills[i] for i in order[:k]) and k < len(order):
        k += step
    return min(order[:k], key=lambda i: (spills[i], -scores[i], i))


def evaluated(ds: Dataset) -> list[Example]:
    """One example per (source, device, dtypes, problem), the one with most configs: a
    bucket two databases measured counts once. Two kernels of one source in one database
    (a causal and a non-causal attention, an MoE's up and down GEMMs) are different work,
    and both count."""
    keep: dict[tuple[Any, ...], Example] = {}
    for e in ds.examples:
        g = e.group
        key: tuple[Any, ...] = (e.family, g.device, g.dtypes, g.problem)
        kept = keep.get(key)
        if kept is not None and kept.group.db == g.db and kept.group.kernel != g.kernel:
            key = (*key, g.kernel)
        if key not in keep or len(e.times) > len(keep[key].times):
            keep[key] = e
    return list(keep.values())


def by_kernel(ds: Dataset) -> list[Example]:
    """``evaluated(ds)`` kernel by kernel (sorted by family): the order ``leave_one_out`` and
    ``in_sample`` score in, so that their results pair bucket by bucket."""
    return sorted(evaluated(ds), key=lambda e: e.family)


def leave_one_out(
    ds: Dataset, params: dict[str, Any] | None = None, names: Sequence[str] = NAMES
) -> list[Scored]:
    out: list[Scored] = []
    for family, mine in groupby(by_kernel(ds), key=lambda e: e.family):
        model = without(ds.examples, family, params, names)
        out += [score(model, e) for e in mine]
    return out


def in_sample(
    ds: Dataset, params: dict[str, Any] | None = None, names: Sequence[str] = NAMES
) -> list[Scored]:
    """The buckets ``leave_one_out`` scores, picked by one model trained on every kernel, each
    bucket's own included: what the features can tell apart at all. A bucket leave-one-
    kernel-out misses and this does not wants no feature: what the other kernels taught
    ranks its configs otherwise. In ``leave_one_out``'s order (``by_kernel``)."""
    model = fit(ds.examples, params, names)
    return [score(model, e) for e in by_kernel(ds)]


def fit(
    examples: Sequence[Example],
    params: dict[str, Any] | None = None,
    names: Sequence[str] = NAMES,
) -> Model:
    """A model trained on ``examples`` as the shipped one is: every kernel weighed alike,
    its full rankers on the rows of compiled configs, its compile-free ones on the same
    configs' rows with their cubins' features unknown."""
    weights = kernel_weights(examples)
    full = train([(e.rows.matrix, e.times) for e in examples], params, names, weights)
    free = train([(e.pending.matrix, e.times) for e in examples], params, names, weights)
    return with_pending(full, free)


def without(
    examples: Sequence[Example],
    family: str,
    params: dict[str, Any] | None = None,
    names: Sequence[str] = NAMES,
) -> Model:
    """``fit`` on every example but those of ``family``: what the model knows of a kernel
    it never saw."""
    return fit([e for e in examples if e.family != family], params, names)


def geomean(xs: Sequence[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs)) if xs else float("nan")


def table(results: Sequence[Scored]) -> str:
    """Per kernel: buckets, then geometric mean and worst of each picker; then all."""
    lines = [
        "| kernel held out | buckets | configs/bucket | model geomean | model worst | "
        "heuristic geomean | heuristic worst | random geomean | within 1.25× |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by: dict[str, list[Scored]] = {}
    for r in results:
        by.setdefault(r.example.label, []).append(r)
    for label in sorted(by):
        lines.append(_row(label, by[label]))
    lines.append(_row("**all**", list(results)))
    spills = sum(r.spilled for r in results)
    mixed = [r for r in results if any(r.example.rows.spills) and not all(r.example.rows.spills)]
    lines.append("")
    lines.append(f"spilling picks where a non-spilling config was timed: {spills}")
    shipped = [r.shipped for r in results]
    full = [r.shipped_full for r in results]
    lines.append(
        f"what a CPU-only build ships (the compile-free shortlist, replayed): geomean "
        f"{geomean(shipped):.3f}×, worst {max(shipped, default=float('nan')):.2f}×, within "
        f"1.25× {sum(x <= 1.25 for x in shipped)}/{len(shipped)}; the shortlist ranked by the "
        f"full rankers instead (cost model v1): {geomean(full):.3f}×, worst "
        f"{max(full, default=float('nan')):.2f}×, within {sum(x <= 1.25 for x in full)}"
    )
    lines.append(
        f"buckets that timed spilling and non-spilling configs: {len(mixed)}; the fastest "
        f"spills in {sum(r.best_spills for r in mixed)}. The model's best-scored config, "
        f"spilling allowed: geomean {geomean([r.unrestricted for r in results]):.3f}×, "
        f"worst {max((r.unrestricted for r in results), default=float('nan')):.2f}× "
        "(the shipped rule never picks a spilling config where one does not spill)"
    )
    return "\n".join(lines)


def _row(label: str, rs: Sequence[Scored]) -> str:
    m = [r.model for r in rs]
    h = [r.heuristic for r in rs]
    rnd = [r.random for r in rs]
    per = statistics.median(len(r.example.times) for r in rs)
    ok = sum(x <= 1.25 for x in m)
    cells = [label, str(len(rs)), f"{per:.0f}", f"{geomean(m):.3f}×", f"{max(m):.2f}×",
             f"{geomean(h):.3f}×", f"{max(h):.2f}×", f"{geomean(rnd):.3f}×",
             f"{ok}/{len(rs)}"]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def buckets(results: Sequence[Scored]) -> str:
    """Every bucket: the three pickers' ratios."""
    lines = ["| kernel | dtypes | problem | configs | model | heuristic | random |",
             "|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in sorted(results, key=lambda r: (r.example.label, r.example.group.dtypes,
                                             r.example.group.problem)):  # fmt: skip
        g = r.example.group
        dt = ",".join(f"{k}={v}" for k, v in g.dtypes)
        pr = " ".join(f"{k}={v}" for k, v in g.problem)
        lines.append(f"| {r.example.label} | {dt} | {pr} | {len(r.example.times)} | "
                     f"{r.model:.2f}× | {r.heuristic:.2f}× | {r.random:.2f}× |")  # fmt: skip
    return "\n".join(lines)

"""Training and evaluation examples: measured buckets with a feature row per timed config."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..env import Environment
from ..heuristic import rank
from ..plan import Config, Instance
from .data import Catalog, Group, Resolved, groups, read_records
from .features import NAMES
from .table import Rows, compile_for, rows


@dataclass(frozen=True)
class Example:
    group: Group
    family: str  # what leave-one-kernel-out holds out: the kernel's source
    label: str  # for people: the kernel's name (and its first source's hash prefix)
    rows: Rows  # the timed configs that compiled
    pending: Rows  # the same configs' rows with their cubins' features unknown
    times: tuple[float, ...]  # ms, aligned with rows.configs
    heuristic: tuple[str, ...]  # the timed configs' ids in the analytical heuristic's order


@dataclass(frozen=True)
class Dataset:
    examples: tuple[Example, ...]
    databases: tuple[Path, ...]
    records: int
    unmatched: int  # measured buckets that no given recipe defines
    # records dropped per kernel: they ran a variant the recipes no longer compile
    stale: tuple[tuple[str, int], ...] = ()


def kernel_weights(examples: Sequence[Example]) -> list[float]:
    """Each example's weight in training, so that every kernel (source) weighs the same in
    all, whatever the number of its buckets: the mean number of buckets per kernel over its
    kernel's. A kernel measured at 60 buckets would otherwise teach the ranker 60 times what
    one measured at a single bucket does, though for a kernel the model never saw each is
    one more example of how configs rank (benchmarks/RESULTS.md, issue 19)."""
    count = Counter(e.family for e in examples)
    mean = len(examples) / len(count) if count else 1.0
    return [mean / count[e.family] for e in examples]


def load(
    dbs: Sequence[Path], recipes: Sequence[Path], env: Environment, names: Sequence[str] = NAMES
) -> Dataset:
    """Every measured bucket of ``dbs`` that a recipe of ``recipes`` resolves, featurised
    (the columns ``names``: the model's, or for an experiment more)."""
    catalog = Catalog(recipes)
    found: list[tuple[Group, Resolved]] = []
    unmatched = records = 0
    stale: Counter[str] = Counter()
    for db in dbs:
        recs = list(read_records(db))
        records += len(recs)
        recs, dropped = catalog.current(recs)
        stale.update(dropped)
        for g in groups(recs, str(db)):
            r = catalog.resolve(g)
            if r is None:
                unmatched += 1
            else:
                found.append((g, r))
    by_plan: dict[int, list[tuple[Instance, Config, tuple[int, ...]]]] = defaultdict(list)
    plans = {}
    for g, r in found:
        plans[id(r.plan)] = r.plan
        by_plan[id(r.plan)] += [(r.inst, r.configs[c], r.bucket) for c in g.times
                                if c in r.configs]  # fmt: skip
    compiled = {}
    for key, wanted in by_plan.items():
        compiled.update(compile_for(plans[key], wanted, env))
    labels: dict[str, str] = {}
    examples = []
    for g, r in found:
        configs = [r.configs[c] for c in g.times if c in r.configs]
        rw = rows(r.inst, r.bucket, r.gpu, configs, compiled, names=names)
        if len(rw.configs) < 2:
            continue
        pending = rows(r.inst, r.bucket, r.gpu, rw.configs, {}, pending=True, names=names)
        times = tuple(g.times[c.id] for c in rw.configs)
        timed = {c.id for c in rw.configs}
        ranked = [c.id for c in rank(r.inst, r.bucket) if c.id in timed]
        heur = tuple(ranked + [c.id for c in rw.configs if c.id not in ranked])
        labels.setdefault(g.source, f"{g.kernel} ({g.source[:8]})")
        examples.append(Example(g, g.source, labels[g.source], rw, pending, times, heur))
    return Dataset(tuple(examples), tuple(dbs), records, unmatched, tuple(sorted(stale.items())))

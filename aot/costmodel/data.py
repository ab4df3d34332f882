"""Tuning databases as training data: one group per measured bucket, resolved to the
recipe instance that produced it.

A group is one (database, kernel, source, device, dtypes, problem): every config measured
there, with its time. A config's time is its benchmark's median, or the median of its
interleaved re-measurement rounds where it was a finalist (the more careful figure); a
config that failed its benchmark or its verification is kept apart, never a label.

Features need the recipe a record came from (its grid, sizes and ``tune`` expressions)
and the compiled variant. Records name their kernel and its source hash, so recipes are
matched by content: a ``Catalog`` of recipe files (or folders searched for ``*.toml``)
resolves each group to the instance whose kernel has that name and source hash, whose
dtypes are the group's and whose target has the device's arch. A group no recipe
matches is counted and left out, never guessed at.

A measurement names the variant it ran (``extra.variant``: the config's id and a hash of
its specialization and derived values). The record's key does not, so a database kept
across a recipe change (another ``specializations`` entry, say) holds times of variants
the recipe no longer compiles under config ids it still plans. Those records are dropped
before grouping (``Catalog.current``): their times would label today's variants.
"""

from __future__ import annotations

import gzip
import statistics
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AotcError, UsageError
from ..pack import variant_ids
from ..plan import Config, Instance, Plan, make_plan
from ..recipe import load
from ..targets import GPU
from ..tune.db import Record, parse
from ..tune.decide import problem, product_gpu

Problem = tuple[tuple[str, int], ...]
Dtypes = tuple[tuple[str, str], ...]
Key = tuple[str, str, str, str, Dtypes, Problem]  # kernel, source, device, arch, dtypes, problem


@dataclass(frozen=True)
class Group:
    db: str  # the database, as its path was given: groups of two databases never mix
    kernel: str
    source: str
    device: str
    arch: str
    dtypes: tuple[tuple[str, str], ...]
    problem: Problem
    times: Mapping[str, float]  # config id -> ms
    failed: frozenset[str] = frozenset()

    @property
    def best(self) -> float:
        return min(self.times.values())


def read_records(path: Path) -> list[Record]:
    """A database's records, plain or gzip-compressed JSON lines; read, never repaired (a
    torn line is an error here: training data is not a database being written)."""
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        return list(parse(data, path))
    except (OSError, EOFError, zlib.error) as exc:  # EOFError: a truncated gzip stream
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise UsageError(f"{path}: cannot read the tuning database ({why})") from None
    except ValueError as exc:  # a line that is not a record (parse names it)
        raise UsageError(str(exc)) from None


def groups(records: Iterable[Record], db: str) -> list[Group]:
    """One group per measured bucket, with at least two configs timed (one config ranks
    nothing)."""
    bench: dict[Key, dict[str, float]] = defaultdict(dict)
    rounds: dict[Key, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    failed: dict[Key, set[str]] = defaultdict(set)
    for r in records:
        key: Key = (r.kernel, r.source, r.device, r.arch, tuple(sorted(r.dtypes.items())),
               tuple(sorted(r.problem.items())))  # fmt: skip
        if r.kind == "bench" and r.ok and r.ms:
            bench[key][r.config] = r.ms
        elif r.kind == "final" and r.ok and r.ms:
            rounds[key][r.config].append(r.ms)
        elif r.kind in ("bench", "verify") and not r.ok:
            failed[key].add(r.config)
    out = []
    # A config with rounds but no benchmark is a finalist whose benchmark was dropped as
    # another variant's (Catalog.current): its rounds are its time.
    for key in sorted(bench.keys() | rounds.keys(), key=repr):
        truth = {c: ms for c, ms in bench[key].items() if c not in failed[key]}
        for cid, ms in rounds[key].items():
            if cid not in failed[key]:
                truth[cid] = statistics.median(ms)
        if len(truth) < 2:
            continue
        kernel, source, device, arch, dtypes, prob = key
        out.append(Group(db, kernel, source, device, arch, dtypes, prob, truth,
                         frozenset(failed[key])))  # fmt: skip
    return out


@dataclass(frozen=True)
class Resolved:
    plan: Plan
    inst: Instance
    bucket: tuple[int, ...]
    gpu: GPU
    configs: dict[str, Config] = field(default_factory=dict)


class Catalog:
    """Recipes by the kernels they define, for resolving groups to instances."""

    def __init__(self, paths: Sequence[Path]):
        self.plans: list[Plan] = []
        self.skipped: list[str] = []
        for path in _recipe_files(paths):
            try:
                self.plans.append(make_plan(load(path)))
            except AotcError as exc:  # a folder may hold other TOML files
                self.skipped.append(f"{path}: {str(exc).splitlines()[0][:160]}")
        self._by_source: dict[tuple[str, str], list[tuple[Plan, Instance]]] = defaultdict(list)
        for plan in self.plans:
            for inst in plan.instances:
                key = (inst.kernel.name, plan.sources[inst.kernel.name].cache_key)
                self._by_source[key].append((plan, inst))

    def resolve(self, g: Group) -> Resolved | None:
        return self._find(g.kernel, g.source, g.device, g.arch, g.dtypes, g.problem)

    def _find(self, kernel: str, source: str, device: str, arch: str, dtypes: Dtypes,
              prob: Problem) -> Resolved | None:  # fmt: skip
        for plan, inst in self._by_source.get((kernel, source), ()):
            if inst.dtypes != dtypes or inst.target.arch != arch:
                continue
            for bucket in inst.buckets:
                if tuple(sorted(problem(inst, bucket).items())) == prob:
                    configs = {c.id: c for c in inst.candidates(bucket)}
                    return Resolved(plan, inst, bucket, product_gpu(device) or inst.target,
                                    configs)  # fmt: skip
        return None

    def current(self, records: Iterable[Record]) -> tuple[list[Record], Counter[str]]:
        """``records`` less those that ran a variant the recipes no longer compile for
        their config, and the number dropped per kernel. A record without a variant
        (verification, a failed benchmark), or one no recipe resolves, is kept: grouping
        and resolution deal with it as before."""
        found: dict[tuple[str, str, str, str, Dtypes, Problem], Resolved | None] = {}
        ids: dict[tuple[int, str], frozenset[str]] = {}
        kept: list[Record] = []
        dropped: Counter[str] = Counter()
        for r in records:
            ran = r.extra.get("variant")
            key = (r.kernel, r.source, r.device, r.arch, tuple(sorted(r.dtypes.items())),
                   tuple(sorted(r.problem.items())))  # fmt: skip
            if ran and key not in found:
                found[key] = self._find(*key)
            res = found.get(key) if ran else None
            config = res.configs.get(r.config) if res is not None else None
            if res is None or config is None:
                kept.append(r)
                continue
            vkey = (id(res.inst), config.id)
            if vkey not in ids:
                ids[vkey] = variant_ids(res.inst, config)
            if ran in ids[vkey]:
                kept.append(r)
            else:
                dropped[r.kernel] += 1
        return kept, dropped


def _recipe_files(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(q for q in p.rglob("*.toml") if q.is_file())
        elif p.is_file():
            out.append(p)
        else:
            raise UsageError(f"--recipe {p}: no such file or folder")
    return list(dict.fromkeys(out))

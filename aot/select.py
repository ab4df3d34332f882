"""Select: one config (and its compiled variants) per (kernel, target, dtypes, bucket).

A separate stage so that where a choice comes from — the heuristic, the tuner's
measurements, a neighbouring target's result — never touches compile or pack. A
``Chooser`` returns, for a bucket, the configs to use in order of preference, each with
how it was chosen; selection takes the first whose generic variant compiled and fits.

The heuristic does not see registers. Where its pick compiles to a kernel that spills
(a stack frame in the cubin of the variant a typical call runs: registers moved to local
memory), selection looks at up to ``SPILL_LOOKAHEAD`` more of its candidates and takes
the first that does not spill; if all of them spill, the first that compiled. A measured
pick ships as measured, spilling or not: its time already counts the spills.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .compile import Compiled
from .cubin import local_bytes
from .errors import BuildError
from .plan import GENERIC, Config, Instance, Plan, Variant

HEURISTIC = "untuned (heuristic)"
SPILL_LOOKAHEAD = 8  # heuristic candidates compiled past a pick that spills
InstanceKey = tuple[str, str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Pick:
    config: Config
    how: str
    metrics: Mapping[str, Any] = field(default_factory=dict)


Chooser = Callable[[Instance, tuple[int, ...]], list[Pick]]
Ranker = Callable[[Instance, tuple[int, ...]], list[Config]]


def heuristic_chooser(ranker: Ranker) -> Chooser:
    return lambda inst, bucket: [Pick(c, HEURISTIC) for c in ranker(inst, bucket)]


@dataclass(frozen=True)
class Chosen:
    bucket: tuple[int, ...]
    config: Config
    variants: tuple[Compiled, ...]  # compiled OK, in the instance's spec order
    how: str
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Selection:
    choices: Mapping[InstanceKey, tuple[Chosen, ...]]


def generic_variants(inst: Instance, config: Config) -> list[Variant]:
    """The config's variants that assume nothing of the arguments (one per combination
    of derived values): a config serves a bucket only if all of them compiled and fit."""
    return [v for v in inst.variants((config,)) if v.spec == GENERIC]


def _verdict(generic: list[Variant], compiled: Mapping[Variant, Compiled]) -> Compiled | None:
    """The failure among ``generic`` (or one success), or None while some is unknown."""
    results = [compiled.get(v) for v in generic]
    if any(r is None for r in results):
        return None
    return next((r for r in results if r is not None and not r.ok), results[0])


def spills(c: Compiled) -> bool:
    """Whether the compiled kernel has a stack frame (spilled registers, in Triton's)."""
    return local_bytes(c.cubin, c.function) > 0


def spills_where_it_runs(
    inst: Instance, config: Config, compiled: Mapping[Variant, Compiled]
) -> bool:
    """Whether the variant a typical call runs spills, for some combination of derived
    values: the most specialized one that compiled. (A generic variant may spill where
    the specialized one does not: the decode step's grouped GEMM did in every one.)"""
    seen: set[Any] = set()
    for v in inst.variants((config,)):  # per combination, most specialized first
        c = compiled.get(v)
        if v.derived not in seen and c is not None and c.ok:
            seen.add(v.derived)
            if spills(c):
                return True
    return False


def _first_viable(
    inst: Instance, picks: list[Pick], compiled: Mapping[Variant, Compiled]
) -> tuple[Pick | None, Pick | None]:
    """(the pick to ship, None) once it is known, or (None, the pick whose variants must
    be compiled to know), or (None, None) when no pick compiled."""
    spilled: Pick | None = None  # the first heuristic pick that compiled but spills
    looked = 0
    for pick in picks:
        result = _verdict(generic_variants(inst, pick.config), compiled)
        if result is None:
            return None, pick
        if not result.ok:
            continue
        heuristic = pick.how.startswith(HEURISTIC[:-1])  # also "(heuristic; cost model …)"
        if not heuristic or not spills_where_it_runs(inst, pick.config, compiled):
            return pick, None
        spilled = spilled or pick
        looked += 1
        if looked > SPILL_LOOKAHEAD:
            break
    return spilled, None


def wanted_variants(
    plan: Plan, chooser: Chooser, compiled: Mapping[Variant, Compiled]
) -> list[tuple[Instance, Variant]]:
    """Variants still to compile before every bucket has its best viable config: for each
    bucket, the first preferred config whose generic variants are not yet known to fail
    (or, for the heuristic's picks, to spill)."""
    want: dict[Variant, Instance] = {}
    for inst in plan.instances:
        for bucket in inst.buckets:
            _, pending = _first_viable(inst, chooser(inst, bucket), compiled)
            if pending is not None:
                for v in inst.variants((pending.config,)):
                    if v not in compiled:
                        want[v] = inst
    return [(inst, v) for v, inst in want.items()]


def select(plan: Plan, chooser: Chooser, compiled: Mapping[Variant, Compiled]) -> Selection:
    """Per bucket, the first preferred config whose generic variants compiled and fit
    (for the heuristic's picks: and do not spill, where one of the next few does not)."""
    choices: dict[InstanceKey, tuple[Chosen, ...]] = {}
    for inst in plan.instances:
        row: list[Chosen] = []
        for bucket in inst.buckets:
            picks = chooser(inst, bucket)
            pick, _ = _first_viable(inst, picks, compiled)
            if pick is None:
                verdicts = [_verdict(generic_variants(inst, p.config), compiled) for p in picks]
                reasons = sorted({r.reason for r in verdicts if r is not None})
                raise BuildError(
                    f"{inst.label}, bucket {dict(zip(inst.kernel.buckets, bucket, strict=True))}: "
                    f"no candidate config compiled and fits. Reasons: "
                    + ("; ".join(reasons[:5]) or "none compiled")
                )
            variants = inst.variants((pick.config,))
            ok = tuple(compiled[v] for v in variants if v in compiled and compiled[v].ok)
            row.append(Chosen(bucket, pick.config, ok, pick.how, pick.metrics))
        choices[inst.key] = tuple(row)
    return Selection(choices)

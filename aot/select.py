"""Select: one config (and its compiled variants) per (kernel, target, dtypes, bucket).

A separate stage so that where a choice comes from — the heuristic, the tuner's
measurements, a neighbouring target's result — never touches compile or pack. A
``Chooser`` returns, for a bucket, the configs to use in order of preference, each with
how it was chosen; selection takes the first whose generic variant compiled and fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .compile import Compiled
from .errors import BuildError
from .plan import GENERIC, Config, Instance, Plan, Variant

HEURISTIC = "untuned (heuristic)"
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


def wanted_variants(
    plan: Plan, chooser: Chooser, compiled: Mapping[Variant, Compiled]
) -> list[tuple[Instance, Variant]]:
    """Variants still to compile before every bucket has its best viable config: for each
    bucket, the first preferred config whose generic variants are not yet known to fail."""
    want: dict[Variant, Instance] = {}
    for inst in plan.instances:
        for bucket in inst.buckets:
            for pick in chooser(inst, bucket):
                result = _verdict(generic_variants(inst, pick.config), compiled)
                if result is None:
                    for v in inst.variants((pick.config,)):
                        if v not in compiled:
                            want[v] = inst
                    break
                if result.ok:
                    break
    return [(inst, v) for v, inst in want.items()]


def select(plan: Plan, chooser: Chooser, compiled: Mapping[Variant, Compiled]) -> Selection:
    """Per bucket, the first preferred config whose generic variants compiled and fit."""
    choices: dict[InstanceKey, tuple[Chosen, ...]] = {}
    for inst in plan.instances:
        row: list[Chosen] = []
        for bucket in inst.buckets:
            picks = chooser(inst, bucket)
            for pick in picks:
                g = _verdict(generic_variants(inst, pick.config), compiled)
                if g is not None and g.ok:
                    ok = tuple(
                        compiled[v]
                        for v in inst.variants((pick.config,))
                        if v in compiled and compiled[v].ok
                    )
                    row.append(Chosen(bucket, pick.config, ok, pick.how, pick.metrics))
                    break
            else:
                verdicts = [_verdict(generic_variants(inst, p.config), compiled) for p in picks]
                reasons = sorted({r.reason for r in verdicts if r is not None})
                raise BuildError(
                    f"{inst.label}, bucket {dict(zip(inst.kernel.buckets, bucket, strict=True))}: "
                    f"no candidate config compiled and fits. Reasons: "
                    + ("; ".join(reasons[:5]) or "none compiled")
                )
        choices[inst.key] = tuple(row)
    return Selection(choices)

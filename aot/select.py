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
class BucketChoice:
    bucket: tuple[int, ...]
    config: Config
    variants: tuple[Compiled, ...]  # compiled OK, in the instance's spec order
    how: str
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Selection:
    choices: Mapping[InstanceKey, tuple[BucketChoice, ...]]


def generic_variant(inst: Instance, config: Config) -> Variant:
    return next(v for v in inst.variants((config,)) if v.spec == GENERIC)


def wanted_variants(
    plan: Plan, chooser: Chooser, compiled: Mapping[Variant, Compiled]
) -> list[tuple[Instance, Variant]]:
    """Variants still to compile before every bucket has its best viable config: for each
    bucket, the first preferred config whose generic variant is not yet known to fail."""
    want: dict[Variant, Instance] = {}
    for inst in plan.instances:
        for bucket in inst.buckets:
            for pick in chooser(inst, bucket):
                result = compiled.get(generic_variant(inst, pick.config))
                if result is None:
                    for v in inst.variants((pick.config,)):
                        if v not in compiled:
                            want[v] = inst
                    break
                if result.ok:
                    break
    return [(inst, v) for v, inst in want.items()]


def select(plan: Plan, chooser: Chooser, compiled: Mapping[Variant, Compiled]) -> Selection:
    """Per bucket, the first preferred config whose generic variant compiled and fits."""
    choices: dict[InstanceKey, tuple[BucketChoice, ...]] = {}
    for inst in plan.instances:
        row: list[BucketChoice] = []
        for bucket in inst.buckets:
            picks = chooser(inst, bucket)
            for pick in picks:
                g = compiled.get(generic_variant(inst, pick.config))
                if g is not None and g.ok:
                    ok = tuple(
                        compiled[v]
                        for v in inst.variants((pick.config,))
                        if v in compiled and compiled[v].ok
                    )
                    row.append(BucketChoice(bucket, pick.config, ok, pick.how, pick.metrics))
                    break
            else:
                reasons = sorted(
                    {
                        compiled[generic_variant(inst, p.config)].reason
                        for p in picks
                        if generic_variant(inst, p.config) in compiled
                    }
                )
                raise BuildError(
                    f"{inst.label}, bucket {dict(zip(inst.kernel.buckets, bucket, strict=True))}: "
                    f"no candidate config compiled and fits. Reasons: "
                    + ("; ".join(reasons[:5]) or "none compiled")
                )
        choices[inst.key] = tuple(row)
    return Selection(choices)

"""Select: one config (and its compiled variants) per (kernel, target, dtypes, bucket).

A separate stage so that where the choice comes from — the heuristic today, measurements
from the tuner, a neighbouring target's result — never touches compile or pack.
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
class BucketChoice:
    bucket: tuple[int, ...]
    config: Config
    variants: tuple[Compiled, ...]  # compiled OK, in the instance's spec order
    how: str
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Selection:
    choices: Mapping[InstanceKey, tuple[BucketChoice, ...]]


Ranker = Callable[[Instance, tuple[int, ...]], list[Config]]


def generic_variant(inst: Instance, config: Config) -> Variant:
    return next(v for v in inst.variants((config,)) if v.spec == GENERIC)


def wanted_variants(
    plan: Plan, ranker: Ranker, compiled: Mapping[Variant, Compiled]
) -> list[tuple[Instance, Variant]]:
    """Variants still to compile before every bucket has its best viable config: for each
    bucket, the first ranked config whose generic variant is not yet known to fail."""
    want: dict[Variant, Instance] = {}
    for inst in plan.instances:
        for bucket in inst.buckets:
            for config in ranker(inst, bucket):
                g = generic_variant(inst, config)
                result = compiled.get(g)
                if result is None:
                    for v in inst.variants((config,)):
                        if v not in compiled:
                            want[v] = inst
                    break
                if result.ok:
                    break
    return [(inst, v) for v, inst in want.items()]


def select(
    plan: Plan, ranker: Ranker, compiled: Mapping[Variant, Compiled], how: str = HEURISTIC
) -> Selection:
    """Per bucket, the best-ranked config whose generic variant compiled and fits."""
    choices: dict[InstanceKey, tuple[BucketChoice, ...]] = {}
    for inst in plan.instances:
        row: list[BucketChoice] = []
        for bucket in inst.buckets:
            ranked = ranker(inst, bucket)
            for config in ranked:
                g = compiled.get(generic_variant(inst, config))
                if g is not None and g.ok:
                    ok = tuple(
                        compiled[v]
                        for v in inst.variants((config,))
                        if v in compiled and compiled[v].ok
                    )
                    row.append(BucketChoice(bucket, config, ok, how))
                    break
            else:
                reasons = sorted(
                    {
                        compiled[generic_variant(inst, c)].reason
                        for c in ranked
                        if generic_variant(inst, c) in compiled
                    }
                )
                raise BuildError(
                    f"{inst.label}, bucket {dict(zip(inst.kernel.buckets, bucket, strict=True))}: "
                    f"no candidate config compiled and fits. Reasons: "
                    + ("; ".join(reasons[:5]) or "none compiled")
                )
        choices[inst.key] = tuple(row)
    return Selection(choices)

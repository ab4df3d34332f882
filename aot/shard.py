"""Shard: the deterministic slice of a plan that ``aotc build --shard I/N --targets ...`` builds.

The unit of work is an instance (kernel × target × dtype binding). Instances are numbered in
plan order — kernels in recipe order, then targets in recipe order, then dtype bindings in
``itertools.product`` order of the sorted dtype variables — after keeping only the targets
named by ``--targets`` (a target's name or its arch). Shard I of N (1 ≤ I ≤ N) takes the
instances whose 0-based number p has ``p % N == I - 1``: round-robin, so every shard gets
a mix of kernels and targets, and the slice depends on nothing but the recipe and I/N.

Slicing is a property of each product (aot/product.py): the kernel product slices its
instances as above; the pipelines go whole into every part; the model cannot be sliced
yet, and a build of a slice that is not all of it (``Slice.covers``) is refused.

A slice that is the whole plan is a full build (byte-identical to one without the
options). Otherwise the bundle is partial: its manifest's ``build.shard`` record says which
slice it is, every kernel keeps its full description with only the slice's instances, and
the loader refuses to open it. ``aotc merge`` (``aot/merge.py``) recomputes the plan order
from the manifest itself, puts the instances back in it, drops the record, and so writes
exactly the bytes a full build writes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import UsageError
from .plan import Plan
from .targets import GPU

_SHARD = re.compile(r"([0-9]+)/([0-9]+)")


@dataclass(frozen=True)
class Slice:
    index: int = 1  # 1-based
    count: int = 1
    targets: tuple[str, ...] = ()  # target names or archs; empty: every target

    @staticmethod
    def parse(shard: str | None, targets: str | None) -> Slice:
        index, count = 1, 1
        if shard is not None:
            m = _SHARD.fullmatch(shard.strip())
            if m is None:
                raise UsageError(f"--shard {shard!r}: expected I/N, e.g. --shard 2/3")
            index, count = int(m[1]), int(m[2])
            if not 1 <= index <= count:
                raise UsageError(
                    f"--shard {shard}: I must be between 1 and N (shards count from 1)"
                )
        names: tuple[str, ...] = ()
        if targets is not None:
            names = tuple(t.strip() for t in targets.split(",") if t.strip())
            if not names:
                raise UsageError("--targets: give one or more target names or archs, e.g. sm_90")
        return Slice(index, count, names)

    def covers(self, targets: Sequence[GPU]) -> bool:
        """Whether the slice is the whole build for a product over ``targets`` that does
        not divide its work into instances (the model): one shard, every target."""
        names = set(self.targets)
        return self.count == 1 and all(
            not names or t.name in names or t.arch in names for t in targets
        )

    @property
    def label(self) -> str:
        """A file-name suffix: ``sm_90.shard2of3``."""
        parts = ["-".join(self.targets)] if self.targets else []
        if self.count > 1:
            parts.append(f"shard{self.index}of{self.count}")
        return ".".join(parts)


def apply(plan: Plan, sl: Slice) -> tuple[Plan, dict[str, Any] | None]:
    """The plan restricted to the slice, and the manifest's ``build.shard`` record (None when
    the slice is the whole plan)."""
    targets = plan.recipe.targets
    if sl.targets:
        known = {t.name for t in targets} | {t.arch for t in targets}
        unknown = [t for t in sl.targets if t not in known]
        if unknown:
            have = ", ".join(f"{t.name} ({t.arch})" for t in targets)
            raise UsageError(
                f"--targets {','.join(unknown)}: not a target of {plan.recipe.path.name}; "
                f"it builds {have}"
            )
    chosen = [
        inst
        for inst in plan.instances
        if not sl.targets or inst.target.name in sl.targets or inst.target.arch in sl.targets
    ]
    chosen = [inst for p, inst in enumerate(chosen) if p % sl.count == sl.index - 1]
    if len(chosen) == len(plan.instances):
        return plan, None
    record: dict[str, Any] = {
        "index": sl.index,
        "count": sl.count,
        "instances": len(chosen),
        "of": len(plan.instances),
    }
    if sl.targets:
        record["targets"] = list(sl.targets)
    return dataclasses.replace(plan, instances=tuple(chosen)), record

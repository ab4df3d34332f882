"""Route each bucket of an ``[[op]]`` to one of its kernels, from what the build measured.

A pure function of the kernels' manifest records: every kernel of an op was tuned on its
own, and its choice per bucket carries the measured time (``metrics["ms"]``) and the GPU
it was measured on. Where every kernel of the op was measured on the same GPU, the bucket
goes to the fastest; anywhere else (a build without a GPU, a target measured for some
kernels only) to the first kernel the op lists, and the route says why.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from loader import manifest as mf
from loader.op import OpRoute, OpSpec

from .recipe.op import OpRecipe

FIRST_LISTED = "first listed"


def op_records(
    ops: Sequence[OpRecipe | OpSpec], kernels: Sequence[mf.KernelSpec]
) -> tuple[OpSpec, ...]:
    """The ops' routes over ``kernels`` (a merge routes again over the merged kernels)."""
    by_name = {k.name: k for k in kernels}
    return tuple(_op(op, [by_name[k] for k in op.kernels]) for op in ops)


def _op(op: OpRecipe | OpSpec, specs: list[mf.KernelSpec]) -> OpSpec:
    routes = []
    for inst in specs[0].instances:
        rows = [_choices(s, inst.target, inst.dtypes) for s in specs]
        kernels, how = [], []
        for choice in inst.choices:
            name, why = route(
                [(s.name, row.get(choice.bucket)) for s, row in zip(specs, rows, strict=True)]
            )
            kernels.append(name)
            how.append(why)
        routes.append(OpRoute(inst.target, dict(inst.dtypes), tuple(kernels), tuple(how)))
    return OpSpec(op.name, op.kernels, tuple(routes))


def _choices(
    spec: mf.KernelSpec, target: str, dtypes: Mapping[str, str]
) -> dict[tuple[int, ...], mf.ChoiceSpec]:
    for inst in spec.instances:
        if inst.target == target and dict(inst.dtypes) == dict(dtypes):
            return {tuple(c.bucket): c for c in inst.choices}
    return {}


def route(candidates: Sequence[tuple[str, mf.ChoiceSpec | None]]) -> tuple[str, str]:
    """(kernel, why) for one bucket, from each kernel's choice there (None: not built)."""
    timed = [(ms, n, c) for n, c in candidates if c is not None and (ms := _ms(c)) is not None]
    devices = {str(c.metrics.get("device")) for _, _, c in timed}
    if len(timed) == len(candidates) and len(devices) == 1:
        ms, name, _ = min(timed)
        others = ", ".join(f"{n} {m * 1000:.1f} µs" for m, n, _ in timed if n != name)
        return name, f"fastest on {devices.pop()}: {ms * 1000:.1f} µs ({others})"
    name = next((n for n, c in candidates if c is not None), candidates[0][0])
    return name, f"{FIRST_LISTED}: not every kernel measured"


def _ms(c: mf.ChoiceSpec) -> float | None:
    ms: Any = c.metrics.get("ms")
    return float(ms) if c.how.startswith("measured") and isinstance(ms, int | float) else None


def report_lines(ops: Sequence[OpSpec], kernels: Sequence[mf.KernelSpec]) -> list[str]:
    """The build report's table per op: each bucket's kernel per target and dtypes, and why."""
    by_name = {k.name: k for k in kernels}
    lines: list[str] = []
    for op in ops:
        first = by_name[op.kernels[0]]
        heads = [f"{r.target} {'/'.join(r.dtypes.values())}" for r in op.routes]
        lines += [f"## op {op.name}: {', '.join(op.kernels)}", "",
                  "Each bucket's kernel, per target and dtypes, and why.", "",
                  "| bucket | " + " | ".join(heads) + " |",
                  "|---" * (len(heads) + 1) + "|"]  # fmt: skip
        for i, bucket in enumerate(itertools.product(*first.buckets)):
            label = ", ".join(f"{k}≤{v}" for k, v in zip(first.bucket_keys, bucket, strict=True))
            cells = [f"{r.kernels[i]} ({r.how[i]})" for r in op.routes]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines

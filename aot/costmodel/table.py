"""Feature rows for buckets: compile what the features need (through the compile cache),
read each variant's facts, and lay out one row per candidate config.

The variant whose facts describe a config at a bucket is the one a call there normally
runs: the config's most specialized variant (the recipe's first ``specializations``
entry; the loader dispatches to the most specialized variant a call satisfies, and the
tuner measures that one) with the derived values the bucket takes (``@triton.heuristics``
rules). Its facts can differ much from the generic variant's: without divisibility
assumptions the address arithmetic is 64-bit, and a config that does not spill when
specialized may spill when generic. Where the specialized variant failed to compile or
does not fit, the generic one's facts are used (the build ships it for such a call);
a config whose generic variant fails too has no row. Whether a config can be shipped at
all stays the build's selection's call (``aot/select.py``: its generic variants must
compile and fit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..cache import CompileCache
from ..compile import Compiled, compile_variants
from ..cubin import local_bytes
from ..env import Environment
from ..kernel_env import EnvError, derived_at, env_at
from ..plan import GENERIC, Config, Instance, Plan, Variant
from ..targets import GPU
from .features import NAMES, Facts, raw, relative


@dataclass(frozen=True)
class Rows:
    """A bucket's candidates that compiled, in candidate order, with their features."""

    configs: tuple[Config, ...]
    matrix: tuple[tuple[float, ...], ...]
    spills: tuple[bool, ...]


def _serving(inst: Instance, config: Config, bucket: tuple[int, ...]) -> list[Variant]:
    """The config's variants with the derived values ``bucket`` takes (all of them when
    the kernel derives nothing, or the bucket's values cannot be worked out), most
    specialized first."""
    every = list(inst.variants((config,)))
    if len({v.derived for v in every}) > 1:
        point = dict(zip(inst.kernel.buckets, bucket, strict=True))
        try:
            combo = derived_at(inst.kernel, env_at(inst.kernel, point, config,
                                                   binding=dict(inst.dtypes)))  # fmt: skip
        except EnvError:
            combo = every[0].derived
        at = [v for v in every if v.derived == combo]
        return at or [v for v in every if v.derived == every[0].derived]
    return every


def variants_for(
    inst: Instance, config: Config, bucket: tuple[int, ...]
) -> tuple[Variant, Variant]:
    """The variant of ``config`` a call at ``bucket`` normally runs (the most specialized
    one, with the bucket's derived values) and the generic one that serves ``bucket``
    (the facts' fallback); one and the same where nothing is specialized."""
    serving = _serving(inst, config, bucket)
    return serving[0], next(v for v in serving if v.spec == GENERIC)


def variant_for(inst: Instance, config: Config, bucket: tuple[int, ...]) -> Variant:
    return variants_for(inst, config, bucket)[0]


def generic_for(inst: Instance, config: Config, bucket: tuple[int, ...]) -> Variant:
    return variants_for(inst, config, bucket)[1]


def facts_of(c: Compiled) -> Facts | None:
    if not c.ok:
        return None
    return Facts(regs=c.regs, shared=c.shared, local=local_bytes(c.cubin, c.function),
                 warps=c.num_warps)  # fmt: skip


def compile_for(
    plan: Plan,
    wanted: Iterable[tuple[Instance, Config, tuple[int, ...]]],
    env: Environment,
    label: str = "cost model: compile",
) -> dict[Variant, Compiled]:
    """Compile the variants the features of ``wanted`` need (cached ones are read back):
    each one's most specialized variant, then the generic ones of those that failed.
    ``label`` names the work on the progress line."""
    pairs = [(inst, *variants_for(inst, config, bucket)) for inst, config, bucket in wanted]
    cache = CompileCache(env.cache_dir)

    def run(jobs: dict[Variant, Instance]) -> dict[Variant, Compiled]:
        return compile_variants(plan, [(i, v) for v, i in jobs.items()], cache=cache,
                                jobs=env.jobs, progress=env.progress, label=label)  # fmt: skip

    first: dict[Variant, Instance] = {}
    for inst, v, _ in pairs:
        first.setdefault(v, inst)
    out = run(first)
    again: dict[Variant, Instance] = {}
    for inst, v, g in pairs:
        if not out[v].ok and v != g:
            again.setdefault(g, inst)
    return {**out, **run(again)} if again else out


def _facts(
    inst: Instance, config: Config, bucket: tuple[int, ...], compiled: Mapping[Variant, Compiled]
) -> Facts | None:
    for v in variants_for(inst, config, bucket):
        result = compiled.get(v)
        f = facts_of(result) if result is not None else None
        if f is not None:
            return f
    return None


def rows(
    inst: Instance,
    bucket: tuple[int, ...],
    gpu: GPU,
    configs: Sequence[Config],
    compiled: Mapping[Variant, Compiled],
    *,
    pending: bool = False,
    names: Sequence[str] = NAMES,
) -> Rows:
    """Feature rows for ``configs`` at ``bucket`` on ``gpu`` (those that compiled): each
    from its most specialized variant, or its generic one where that failed. With
    ``pending``, a config not compiled yet has a row too, its cubin's features unknown
    (``features.FROM_CUBIN``; not counted as spilling). ``names``: the columns
    (``features.relative``)."""
    kept: list[Config] = []
    facts: list[Facts | None] = []
    for c in configs:
        unknown = pending and variant_for(inst, c, bucket) not in compiled
        f = None if unknown else _facts(inst, c, bucket, compiled)
        if f is not None or unknown:
            kept.append(c)
            facts.append(f)
    raws = [raw(inst, c, bucket, gpu, f) for c, f in zip(kept, facts, strict=True)]
    matrix = relative(raws, names) if raws else []
    spills = tuple(f is not None and f.spills for f in facts)
    return Rows(tuple(kept), tuple(tuple(r) for r in matrix), spills)

"""Feature rows for buckets: compile what the features need (through the compile cache),
read each variant's facts, and lay out one row per candidate config.

The variant whose facts describe a config at a bucket is the generic one (it assumes
nothing of the arguments, so every call can run it) with the derived values the bucket
takes (``@triton.heuristics`` rules): the one the build's selection checks too. A config
whose variant failed to compile or does not fit has no row: it cannot be shipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..cache import CompileCache
from ..compile import Compiled, compile_variants
from ..env import Environment
from ..kernel_env import EnvError, derived_at, env_at
from ..plan import GENERIC, Config, Instance, Plan, Variant
from ..targets import GPU
from .features import Facts, local_bytes, raw, relative


@dataclass(frozen=True)
class Rows:
    """A bucket's candidates that compiled, in candidate order, with their features."""

    configs: tuple[Config, ...]
    matrix: tuple[tuple[float, ...], ...]
    spills: tuple[bool, ...]


def variant_for(inst: Instance, config: Config, bucket: tuple[int, ...]) -> Variant:
    """The generic variant of ``config`` that serves ``bucket``."""
    generic = [v for v in inst.variants((config,)) if v.spec == GENERIC]
    if len(generic) > 1:
        point = dict(zip(inst.kernel.buckets, bucket, strict=True))
        try:
            combo = derived_at(inst.kernel, env_at(inst.kernel, point, config,
                                                   binding=dict(inst.dtypes)))  # fmt: skip
        except EnvError:
            combo = ()
        for v in generic:
            if v.derived == combo:
                return v
    return generic[0]


def facts_of(c: Compiled) -> Facts | None:
    if not c.ok:
        return None
    return Facts(regs=c.regs, shared=c.shared, local=local_bytes(c.cubin, c.function))


def compile_for(
    plan: Plan,
    wanted: Iterable[tuple[Instance, Config, tuple[int, ...]]],
    env: Environment,
) -> dict[Variant, Compiled]:
    """Compile the variants the features of ``wanted`` need (cached ones are read back)."""
    jobs: dict[Variant, Instance] = {}
    for inst, config, bucket in wanted:
        jobs.setdefault(variant_for(inst, config, bucket), inst)
    return compile_variants(
        plan, [(i, v) for v, i in jobs.items()], cache=CompileCache(env.cache_dir),
        jobs=env.jobs, progress=env.progress,
    )  # fmt: skip


def rows(
    inst: Instance,
    bucket: tuple[int, ...],
    gpu: GPU,
    configs: Sequence[Config],
    compiled: Mapping[Variant, Compiled],
) -> Rows:
    """Feature rows for ``configs`` at ``bucket`` on ``gpu`` (those that compiled)."""
    kept: list[Config] = []
    facts: list[Facts] = []
    for c in configs:
        result = compiled.get(variant_for(inst, c, bucket))
        f = facts_of(result) if result is not None else None
        if f is not None:
            kept.append(c)
            facts.append(f)
    raws = [raw(inst, c, bucket, gpu, f) for c, f in zip(kept, facts, strict=True)]
    matrix = relative(raws) if raws else []
    return Rows(tuple(kept), tuple(tuple(r) for r in matrix), tuple(f.spills for f in facts))

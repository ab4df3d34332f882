"""Plan: expand kernel × target × dtypes × config × specialization, pruning what cannot fit.

No compiling happens here; ``aotc plan`` prints the matrix this stage produces.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from loader.expr import ExprError

from .errors import RecipeError
from .recipe import KernelRecipe, Recipe
from .source import KernelSource, resolve
from .targets import GPU


@dataclass(frozen=True, order=True)
class Config:
    """Values for the searched meta-parameters plus the launch options."""

    meta: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int

    @cached_property
    def id(self) -> str:
        text = json.dumps([list(self.meta), self.num_warps, self.num_stages])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def values(self) -> dict[str, int]:
        return {**dict(self.meta), "num_warps": self.num_warps, "num_stages": self.num_stages}

    @property
    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.meta]
        return " ".join([*parts, f"warps={self.num_warps}", f"stages={self.num_stages}"])


@dataclass(frozen=True, order=True)
class Spec:
    """Specialization assumptions: (argument, 16 | 1). Empty means the generic variant."""

    assume: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        if not self.assume:
            return "generic"
        return " ".join(f"{n}%16" if k == 16 else f"{n}==1" for n, k in self.assume)


GENERIC = Spec()


@dataclass(frozen=True)
class Variant:
    """One unit of compilation: a cubin for one target."""

    kernel: str
    target: str
    arch: str
    dtypes: tuple[tuple[str, str], ...]
    config: Config
    spec: Spec

    @property
    def label(self) -> str:
        dt = ",".join(f"{k}={v}" for k, v in self.dtypes)
        return f"{self.kernel}[{dt}] {self.target} {self.config.label} ({self.spec.label})"


@dataclass(frozen=True)
class Instance:
    """A kernel for one target and one binding of its dtype variables."""

    kernel: KernelRecipe
    target: GPU
    dtypes: tuple[tuple[str, str], ...]
    configs: tuple[Config, ...]  # candidates that fit the target
    pruned: tuple[tuple[Config, str], ...]  # candidates that cannot, with the reason
    specs: tuple[Spec, ...]  # most specialized first, generic last

    @property
    def key(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        return (self.kernel.name, self.target.name, self.dtypes)

    @property
    def buckets(self) -> tuple[tuple[int, ...], ...]:
        """Every bucket, as upper bounds per key, in the row-major order the loader uses."""
        return tuple(itertools.product(*self.kernel.buckets.values()))

    def variants(self, configs: tuple[Config, ...] | None = None) -> Iterator[Variant]:
        for c in self.configs if configs is None else configs:
            for s in self.specs:
                yield Variant(
                    self.kernel.name, self.target.name, self.target.arch, self.dtypes, c, s
                )

    @property
    def label(self) -> str:
        dt = ",".join(f"{k}={v}" for k, v in self.dtypes)
        return (
            f"{self.kernel.name}[{dt}] on {self.target.name}"
            if dt
            else (f"{self.kernel.name} on {self.target.name}")
        )


@dataclass(frozen=True)
class Plan:
    recipe: Recipe
    sources: Mapping[str, KernelSource] = field(repr=False)
    instances: tuple[Instance, ...]

    def variants(self) -> Iterator[Variant]:
        for inst in self.instances:
            yield from inst.variants()

    @property
    def size(self) -> int:
        return sum(len(i.configs) * len(i.specs) for i in self.instances)


def make_plan(recipe: Recipe) -> Plan:
    sources = {kr.name: resolve(recipe, kr) for kr in recipe.kernels}
    instances: list[Instance] = []
    for kr in recipe.kernels:
        specs = (*(Spec(tuple(sorted(s.items()))) for s in kr.specializations), GENERIC)
        candidates = _configs(kr)
        for target in recipe.targets:
            fit, pruned = _prune(recipe, kr, target, candidates)
            if not fit:
                reasons = sorted({r for _, r in pruned})
                raise RecipeError(
                    recipe.path,
                    f"{kr.where}.space",
                    f"no candidate fits {target.name}: {'; '.join(reasons[:3])}",
                )
            for binding in _bindings(kr):
                instances.append(Instance(kr, target, binding, fit, pruned, specs))
    return Plan(recipe, sources, tuple(instances))


def _bindings(kr: KernelRecipe) -> list[tuple[tuple[str, str], ...]]:
    names = sorted(kr.dtypes)
    return [
        tuple(zip(names, combo, strict=True))
        for combo in itertools.product(*(kr.dtypes[n] for n in names))
    ]


def _configs(kr: KernelRecipe) -> list[Config]:
    searched = [k for k in kr.space if k not in ("num_warps", "num_stages")]
    out = []
    for combo in itertools.product(*(kr.space[k] for k in searched)):
        for w in kr.space["num_warps"]:
            for s in kr.space["num_stages"]:
                out.append(Config(tuple(sorted(zip(searched, combo, strict=True))), w, s))
    return out


def _prune(
    recipe: Recipe, kr: KernelRecipe, target: GPU, candidates: list[Config]
) -> tuple[tuple[Config, ...], tuple[tuple[Config, str], ...]]:
    fit: list[Config] = []
    pruned: list[tuple[Config, str]] = []
    for c in candidates:
        threads = c.num_warps * 32
        if threads > target.max_threads_per_block:
            pruned.append((c, f"{threads} threads > {target.max_threads_per_block} per block"))
            continue
        env = {**kr.fixed, **c.values(), **kr.sizes, **target.properties()}
        failed = None
        for i, cons in enumerate(kr.constraints):
            try:
                ok = cons.evaluate(env)
            except (ExprError, ZeroDivisionError) as exc:
                raise RecipeError(
                    recipe.path, f"{kr.where}.constraints[{i}]", f"cannot evaluate: {exc}"
                ) from None
            if not ok:
                failed = f"constraint {cons.text!r} fails on {target.name}"
                break
        if failed:
            pruned.append((c, failed))
        else:
            fit.append(c)
    return tuple(fit), tuple(pruned)

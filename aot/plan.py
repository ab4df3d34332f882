"""Plan: expand kernel × target × binding × config × derived values × specialization,
pruning what cannot fit.

No compiling happens here; ``aotc plan`` prints the matrix this stage produces. Before
anything is expanded the matrix's size is checked against the recipe's cap
(``[bundle].max_plan_size``); the checks of what the build evaluates per bucket live in
plan_checks.py. A binding fixes the dtype variables and which optional arguments are
passed as None; the derived values (``@triton.heuristics`` rules, ``derived``) a config
takes across the buckets each get their own variants (kernel_env.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loader.buckets import kernel_grid

from .config import Config, Constexpr
from .errors import RecipeError
from .kernel_env import Combo, combos
from .plan_checks import (
    MAX_GRID,
    allowed_by_bucket,
    check_first,
    check_per_bucket,
    check_size,
    plan_size,
    prune_static,
)
from .recipe import LAUNCH_OPTIONS, KernelRecipe, Recipe
from .source import KernelSource, resolve
from .targets import GPU

NONE = "none"  # a binding's value for an optional argument passed as None
GIVEN = "given"  # ... and for one passed a value

__all__ = ["GENERIC", "MAX_GRID", "NONE", "Config", "Instance", "Plan", "Spec", "Variant",
           "make_plan", "plan_size"]  # fmt: skip


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
    dtypes: tuple[tuple[str, str], ...]  # the binding: dtype variables, optional arguments
    config: Config
    spec: Spec
    derived: Combo = ()

    @property
    def label(self) -> str:
        dt = ",".join(f"{k}={v}" for k, v in self.dtypes)
        extra = "".join(f" {n}={x}" for n, x in self.derived)
        return (f"{self.kernel}[{dt}] {self.target} {self.config.label}{extra} "
                f"({self.spec.label})")  # fmt: skip

    @property
    def nones(self) -> tuple[str, ...]:
        return tuple(p for p, t in self.dtypes if t == NONE)


@dataclass(frozen=True)
class Instance:
    """A kernel for one target and one binding of its dtype variables (and of its
    optional arguments to None or a value)."""

    kernel: KernelRecipe
    target: GPU
    dtypes: tuple[tuple[str, str], ...]
    configs: tuple[Config, ...]  # candidates that fit the target
    pruned: tuple[tuple[Config, str], ...]  # candidates that cannot, with the reason
    specs: tuple[Spec, ...]  # most specialized first, generic last
    # Per bucket, the candidates allowed there (constraints on bucket keys, autotune's
    # prune_configs_by); a bucket absent from it allows them all.
    allowed: Mapping[tuple[int, ...], tuple[Config, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    derived: Mapping[Config, tuple[Combo, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def key(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        return (self.kernel.name, self.target.name, self.dtypes)

    @property
    def buckets(self) -> tuple[tuple[int, ...], ...]:
        """Every bucket, as upper bounds per key, in the row-major order the loader uses."""
        kb = self.kernel.buckets
        return tuple(kernel_grid(tuple(kb), tuple(kb.values())))

    def candidates(self, bucket: tuple[int, ...]) -> tuple[Config, ...]:
        return self.allowed.get(bucket, self.configs)

    def variants(self, configs: tuple[Config, ...] | None = None) -> Iterator[Variant]:
        """Per config, per combination of derived values, most specialized first."""
        for c in self.configs if configs is None else configs:
            for combo in self.derived.get(c, ((),)):
                for s in self.specs:
                    yield Variant(self.kernel.name, self.target.name, self.target.arch,
                                  self.dtypes, c, s, combo)  # fmt: skip

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
        return sum(len(list(i.variants())) for i in self.instances)


def make_plan(recipe: Recipe, max_size: int | None = None) -> Plan:
    """The recipe's build matrix; ``max_size`` caps it (None: the recipe's own cap)."""
    check_size(recipe, recipe.max_plan_size if max_size is None else max_size)
    sources = {kr.name: resolve(recipe, kr) for kr in recipe.kernels}
    instances: list[Instance] = []
    for kr in recipe.kernels:
        specs = (*(Spec(tuple(sorted(s.items()))) for s in kr.specializations), GENERIC)
        candidates = configs_of(kr)
        check_per_bucket(recipe, kr, candidates)
        check_first(recipe, kr, candidates)
        for target in recipe.targets:
            fit, pruned = prune_static(recipe, kr, target, candidates)
            if not fit:
                reasons = sorted({r for _, r in pruned})
                raise RecipeError(
                    recipe.shown,
                    f"{kr.where}.space",
                    f"no candidate fits {target.name}: {'; '.join(reasons[:3])}",
                )
            allowed = allowed_by_bucket(recipe, kr, target, fit)
            for binding in bindings(kr):
                b = dict(binding)
                derived = {c: combos(kr, c, b, allowed) for c in fit} if kr.derived else {}
                instances.append(
                    Instance(kr, target, binding, fit, pruned, specs, allowed, derived)
                )
    return Plan(recipe, sources, tuple(instances))


Binding = tuple[tuple[str, str], ...]


def binding_order(options: Mapping[str, Sequence[str]]) -> list[Binding]:
    """Every binding of ``options`` (each key's values), in the one order the plan, the
    shards and ``aotc merge`` agree on: the keys as given, their values' product."""
    names = list(options)
    return [tuple(zip(names, c, strict=True)) for c in itertools.product(*options.values())]


def binding_options(kr: KernelRecipe) -> dict[str, tuple[str, ...]]:
    """The dtype variables (sorted), then the pointers that may be None (sorted): passed
    or None for an ``optional`` one, None only for one ``inputs`` always passes as None.
    The manifest's ``KernelSpec.binding_options`` gives the same from a bundle."""
    out = {n: tuple(kr.dtypes[n]) for n in sorted(kr.dtypes)}
    for p in sorted(kr.optional + kr.always_none):
        out[p] = (NONE,) if p in kr.always_none else (GIVEN, NONE)
    return out


def bindings(kr: KernelRecipe) -> list[Binding]:
    """Every binding of the kernel (a kernel with neither has the one empty binding)."""
    return binding_order(binding_options(kr))


def configs_of(kr: KernelRecipe) -> list[Config]:
    """The candidates: autotune's configs, or the product of the searched values."""
    if kr.configs:
        return list(kr.configs)
    searched = [k for k in kr.space if k not in LAUNCH_OPTIONS]
    caps: tuple[Any, ...] = kr.space.get("maxnreg", (None,))
    out = []
    for combo in itertools.product(*(kr.space[k] for k in searched)):
        meta: tuple[tuple[str, Constexpr], ...] = tuple(sorted(zip(searched, combo, strict=True)))
        for w in kr.space["num_warps"]:
            for s in kr.space["num_stages"]:
                for cap in caps:
                    out.append(Config(meta, int(w), int(s), 1, cap))  # type: ignore[arg-type]
    return out

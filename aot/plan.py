"""Plan: expand kernel × target × dtypes × config × specialization, pruning what cannot fit.

No compiling happens here; ``aotc plan`` prints the matrix this stage produces. Before
anything is expanded the matrix's size is checked against the recipe's cap
(``[bundle].max_plan_size``). Everything the build will evaluate per bucket is evaluated
here first, at every bucket's upper bound: the grid for each config (a config whose grid
exceeds CUDA's launch limits at some bucket is pruned, with the reason; one that divides
by zero is an error in the recipe) and ``tune.flops``/``tune.bytes``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from loader.expr import Expr, ExprError, compile_function

from .errors import RecipeError
from .recipe import KernelRecipe, Recipe
from .source import KernelSource, resolve
from .targets import GPU

# CUDA's limits on a launch's grid (x, y, z): the loader refuses a call past them.
MAX_GRID = (2**31 - 1, 65535, 65535)


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


def make_plan(recipe: Recipe, max_size: int | None = None) -> Plan:
    """The recipe's build matrix; ``max_size`` caps it (None: the recipe's own cap)."""
    check_size(recipe, recipe.max_plan_size if max_size is None else max_size)
    sources = {kr.name: resolve(recipe, kr) for kr in recipe.kernels}
    instances: list[Instance] = []
    for kr in recipe.kernels:
        _check_per_bucket(recipe, kr)
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
    return _prune_grid(recipe, kr, target, fit, pruned)


# --- the cap on the matrix ----------------------------------------------------------------


def plan_size(recipe: Recipe) -> dict[str, tuple[int, str]]:
    """Per kernel (and model): how many (bucket, variant) pairs the build may consider,
    with the factors, counted from the recipe's lists without expanding anything. Ranking
    and tuning visit each bucket with each config, so this is what planning costs."""
    targets = len(recipe.targets)
    out: dict[str, tuple[int, str]] = {}
    for kr in recipe.kernels:
        factors = {
            "buckets": math.prod(len(b) for b in kr.buckets.values()),
            "configs": math.prod(len(v) for v in kr.space.values()),
            "specializations": len(kr.specializations) + 1,  # and the generic variant
            "dtype bindings": math.prod(len(t) for t in kr.dtypes.values()),
            "targets": targets,
        }
        out[kr.where] = _product(factors)
    if recipe.model is not None:
        mr = recipe.model
        factors = {"buckets": math.prod(len(b) for b in mr.buckets), "modes": len(mr.modes),
                   "targets": targets}  # fmt: skip
        out["[model]"] = _product(factors)
    return out


def _product(factors: Mapping[str, int]) -> tuple[int, str]:
    return math.prod(factors.values()), " × ".join(f"{n:,} {what}" for what, n in factors.items())


def check_size(recipe: Recipe, limit: int) -> None:
    sizes = plan_size(recipe)
    total = sum(n for n, _ in sizes.values())
    if total <= limit:
        return
    where, (n, factors) = max(sizes.items(), key=lambda item: item[1][0])
    raise RecipeError(
        recipe.path,
        where,
        f"{n:,} = {factors}: the build matrix would hold {total:,} (bucket, variant) pairs, "
        f"over the cap of {limit:,} that keeps planning from running for hours. Use fewer "
        "buckets, a smaller space or fewer specializations, or raise the cap with "
        f"max_plan_size = {total} under [bundle]",
    )


# --- evaluating at every bucket -----------------------------------------------------------


def _points(kr: KernelRecipe, names: frozenset[str]) -> list[dict[str, int]]:
    """Every bucket's upper bounds, over only the bucket keys in ``names`` (the others do
    not change the value), each with the recipe's sizes."""
    keys = [k for k in kr.buckets if k in names]
    return [
        {**kr.sizes, **dict(zip(keys, combo, strict=True))}
        for combo in itertools.product(*(kr.buckets[k] for k in keys))
    ]


def _at(point: Mapping[str, int], kr: KernelRecipe) -> str:
    shown = [f"{k}={point[k]}" for k in kr.buckets if k in point]
    return ", ".join(shown) if shown else "the only bucket"


def _evaluator(exprs: tuple[Expr, ...]) -> tuple[list[str], Callable[..., tuple[int, ...]]]:
    names = sorted(set().union(*(e.names for e in exprs)))
    return names, compile_function(exprs, names)


def _check_per_bucket(recipe: Recipe, kr: KernelRecipe) -> None:
    """``tune.flops`` and ``tune.bytes`` at every bucket, as the tuner's report will
    evaluate them (with ``fixed``, ``sizes`` and the bucket)."""
    for what in ("flops", "bytes"):
        e: Expr | None = getattr(kr.tune, what)
        if e is None:
            continue
        names, fn = _evaluator((e,))
        for point in _points(kr, e.names):
            env = {**kr.fixed, **point}
            try:
                fn(*(env[n] for n in names))
            except ZeroDivisionError:
                raise RecipeError(
                    recipe.path,
                    f"{kr.where}.tune.{what}",
                    f"{e.text!r} divides by zero at {_at(point, kr)}; make every divisor "
                    "positive at every bucket (e.g. max(x, 1))",
                ) from None


def _prune_grid(
    recipe: Recipe,
    kr: KernelRecipe,
    target: GPU,
    fit: list[Config],
    pruned: list[tuple[Config, str]],
) -> tuple[tuple[Config, ...], tuple[tuple[Config, str], ...]]:
    """Prune the configs whose grid exceeds CUDA's launch limits at some bucket: such a
    config could not serve every bucket its instance stands for."""
    names, fn = _evaluator(kr.grid)
    points = _points(kr, frozenset(names))
    kept: list[Config] = []
    for c in fit:
        base = {**kr.fixed, **c.values(), "NUM_SMS": target.sms}
        why = None
        for point in points:
            env = {**base, **point}
            try:
                grid = fn(*(env[n] for n in names))
            except ZeroDivisionError:
                raise RecipeError(
                    recipe.path,
                    f"{kr.where}.grid",
                    f"divides by zero at {_at(point, kr)} with {c.label} on {target.name}; "
                    "make every divisor positive at every bucket and config (e.g. max(x, 1))",
                ) from None
            why = _over_limit(grid, _at(point, kr), target)
            if why:
                break
        if why:
            pruned.append((c, why))
        else:
            kept.append(c)
    return tuple(kept), tuple(pruned)


def _over_limit(grid: tuple[int, ...], at: str, target: GPU) -> str | None:
    for axis, value, limit in zip("xyz", grid, MAX_GRID, strict=True):
        if value > limit:
            return (f"grid {axis} exceeds CUDA's limit of {limit:,} at {at} on {target.name} "
                    f"({axis} = {value:,})")  # fmt: skip
    return None

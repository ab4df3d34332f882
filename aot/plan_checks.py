"""What the plan checks before it expands anything, and evaluates at every bucket.

- The cap on the build matrix's size (``[bundle].max_plan_size``), counted from the
  recipe's lists alone.
- ``tune.flops``/``tune.bytes`` at every bucket, as the tuner's report evaluates them.
- Per target, the candidates that cannot fit anywhere (threads, static constraints, a
  grid past CUDA's launch limits at some bucket) are pruned with the reason; one that
  divides by zero is an error in the recipe.
- Per bucket, the candidates allowed there: constraints that read bucket keys, sizes or
  call values, and ``@triton.autotune``'s ``prune_configs_by`` (run here, at build time).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from loader.expr import Expr, ExprError

from .config import Config
from .errors import RecipeError
from .kernel_env import EnvError, env_at, points
from .recipe import KernelRecipe, Recipe
from .recipe.kernel_space import LAUNCH_OPTIONS
from .targets import GPU

# CUDA's limits on a launch's grid (x, y, z): the loader refuses a call past them.
MAX_GRID = (2**31 - 1, 65535, 65535)
_EVAL_ERRORS = (ExprError, ArithmeticError, TypeError, ValueError)


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
            "configs": len(kr.configs) or math.prod(len(v) for v in kr.space.values()),
            "specializations": len(kr.specializations) + 1,  # and the generic variant
            "dtype bindings": math.prod(len(t) for t in kr.dtypes.values()) * 2 ** len(kr.optional),
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
        recipe.shown,
        where,
        f"{n:,} = {factors}: the build matrix would hold {total:,} (bucket, variant) pairs, "
        f"over the cap of {limit:,} that keeps planning from running for hours. Use fewer "
        "buckets, a smaller space or fewer specializations, or raise the cap with "
        f"max_plan_size = {total} under [bundle]",
    )


# --- evaluating at every bucket -----------------------------------------------------------


def _at(point: Mapping[str, int], kr: KernelRecipe) -> str:
    shown = [f"{k}={point[k]}" for k in kr.buckets if k in point]
    return ", ".join(shown) if shown else "the only bucket"


def check_per_bucket(recipe: Recipe, kr: KernelRecipe, configs: Sequence[Config]) -> None:
    """Every size written as an expression (under every candidate config), and
    ``tune.flops``/``tune.bytes``, at every bucket, as the build will evaluate them."""
    for _, point in points(kr):
        for c in configs if kr.size_exprs else configs[:1]:
            env = _env(recipe, kr, point, c)
            for what in ("flops", "bytes"):
                e: Expr | None = getattr(kr.tune, what)
                if e is None:
                    continue
                try:
                    e.evaluate(env)
                except ZeroDivisionError:
                    raise RecipeError(
                        recipe.shown,
                        f"{kr.where}.tune.{what}",
                        f"{e.text!r} divides by zero at {_at(point, kr)}; make every divisor "
                        "positive at every bucket (e.g. max(x, 1))",
                    ) from None


def check_first(recipe: Recipe, kr: KernelRecipe, configs: Sequence[Config]) -> None:
    """Each of ``tune.first`` names a candidate config: a typo would leave it unmeasured."""
    for i, entry in enumerate(kr.tune.first):
        if any(c.sets(entry) for c in configs):
            continue
        names = sorted({n for c in configs for n in c.values()})
        unknown = [n for n, _ in entry if n not in names]
        why = (
            f"{', '.join(unknown)} is not a value a config sets (those are {', '.join(names)})"
            if unknown
            else "no candidate config sets these values (is each in the space?)"
        )
        raise RecipeError(recipe.shown, f"{kr.where}.tune.first[{i}]", why)


def _env(
    recipe: Recipe,
    kr: KernelRecipe,
    point: Mapping[str, int],
    c: Config,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    try:
        return env_at(kr, point, c, extra)
    except EnvError as exc:
        raise RecipeError(recipe.shown, f"{kr.where}.{exc.key}", f"cannot be evaluated at "
                          f"{_at(point, kr)} with {c.label}: {exc.problem}") from None  # fmt: skip


def call_dependent(kr: KernelRecipe, e: Expr) -> bool:
    """Whether ``e`` reads a value that changes from call to call (a bucket key, a size,
    an integer argument, a call value, or a derived meta-parameter, which is computed from
    them): such a constraint is checked per bucket here and per call by the loader."""
    return bool(e.names & (set(kr.buckets) | set(kr.sizes) | set(kr.size_exprs)
                           | set(kr.signature) | set(kr.call) | set(kr.derived)))  # fmt: skip


def prune_static(
    recipe: Recipe, kr: KernelRecipe, target: GPU, candidates: Sequence[Config]
) -> tuple[tuple[Config, ...], tuple[tuple[Config, str], ...]]:
    """The candidates that fit ``target`` at every bucket, and those that do not, why."""
    fit: list[Config] = []
    pruned: list[tuple[Config, str]] = []
    static = [(i, c) for i, c in enumerate(kr.constraints) if not call_dependent(kr, c)]
    for c in candidates:
        threads = c.num_warps * 32
        if threads > target.max_threads_per_block:
            pruned.append((c, f"{threads} threads > {target.max_threads_per_block} per block"))
            continue
        env = {**kr.fixed, **c.values(), **target.properties()}
        failed = None
        for i, cons in static:
            if not _holds(recipe, kr, i, cons, env):
                failed = f"constraint {cons.text!r} fails on {target.name}"
                break
        if failed:
            pruned.append((c, failed))
        else:
            fit.append(c)
    return _prune_grid(recipe, kr, target, fit, pruned)


def _holds(recipe: Recipe, kr: KernelRecipe, i: int, cons: Expr, env: Mapping[str, Any]) -> bool:
    try:
        return bool(cons.evaluate(env))
    except _EVAL_ERRORS as exc:
        missing = sorted(cons.names - env.keys())
        launch = set(missing) <= set(LAUNCH_OPTIONS)  # launch options: space only, never fixed
        where = "[kernel.space] lists it" if launch else "space or fixed gives it"
        fix = (f"; {', '.join(missing)} {'has' if len(missing) == 1 else 'have'} a value only "
               f"where {where}: give it there, or leave it out of the constraint"
               ) if missing else ""  # fmt: skip
        raise RecipeError(
            recipe.shown, f"{kr.where}.constraints[{i}]", f"cannot evaluate: {exc}{fix}"
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
    kept: list[Config] = []
    every = list(points(kr))
    for c in fit:
        why = None
        for _, point in every:
            grid = _grid(recipe, kr, target, c, point)
            why = _over_limit(grid, _at(point, kr), target)
            if why:
                break
        if why:
            pruned.append((c, why))
        else:
            kept.append(c)
    return tuple(kept), tuple(pruned)


def _grid(
    recipe: Recipe, kr: KernelRecipe, target: GPU, c: Config, point: Mapping[str, int]
) -> tuple[int, ...]:
    env = _env(recipe, kr, point, c, {"NUM_SMS": target.sms})
    try:
        return tuple(int(g.evaluate(env)) for g in kr.grid)
    except ZeroDivisionError:
        raise RecipeError(
            recipe.shown,
            f"{kr.where}.grid",
            f"divides by zero at {_at(point, kr)} with {c.label} on {target.name}; "
            "make every divisor positive at every bucket and config (e.g. max(x, 1))",
        ) from None
    except _EVAL_ERRORS as exc:
        raise RecipeError(recipe.shown, f"{kr.where}.grid", f"cannot evaluate at "
                          f"{_at(point, kr)} with {c.label}: {exc}") from None  # fmt: skip


def _over_limit(grid: tuple[int, ...], at: str, target: GPU) -> str | None:
    for axis, value, limit in zip("xyz", grid, MAX_GRID, strict=True):
        if value > limit:
            return (f"grid {axis} exceeds CUDA's limit of {limit:,} at {at} on {target.name} "
                    f"({axis} = {value:,})")  # fmt: skip
    return None


# --- per bucket: constraints on sizes, autotune's pruning ---------------------------------


def allowed_by_bucket(
    recipe: Recipe, kr: KernelRecipe, target: GPU, fit: Sequence[Config]
) -> dict[tuple[int, ...], tuple[Config, ...]]:
    """Per bucket, the candidates the bucket may choose from (only buckets that allow
    fewer than all of them are listed)."""
    dependent = [(i, c) for i, c in enumerate(kr.constraints) if call_dependent(kr, c)]
    prune = kr.autotune is not None and (
        kr.autotune.early_config_prune is not None or kr.autotune.perf_model is not None
    )
    if not dependent and not prune:
        return {}
    from .autotune_prune import pruned_at

    out: dict[tuple[int, ...], tuple[Config, ...]] = {}
    for bucket, point in points(kr):
        ok = [c for c in fit if all(_holds(recipe, kr, i, cons,
                                           _env(recipe, kr, point, c, target.properties()))
                                    for i, cons in dependent)]  # fmt: skip
        if prune and ok:
            ok = pruned_at(recipe, kr, point, ok)
        if not ok:
            raise RecipeError(recipe.shown, f"{kr.where}.constraints", f"no candidate config "
                              f"is allowed at {_at(point, kr)} on {target.name}")  # fmt: skip
        if len(ok) < len(fit):
            out[bucket] = tuple(ok)
    return out

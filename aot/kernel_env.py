"""The values a kernel's expressions see at one point of the build.

A point is a bucket: each bucket key at its upper bound (listed sizes included). To it
the build adds the recipe's literal sizes, a config's meta-parameters and ``fixed``, the
sizes written as expressions (``EM = "cdiv(T, BLOCK_M) * BLOCK_M"``), the constexprs
derived per call (``@triton.heuristics`` rules, ``derived``) and, for grids and
constraints, the target's properties. The loader computes the same derived values from a
call's arguments; the build compiles a variant for each combination they take.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from loader.expr import ExprError

from .config import Config, Constexpr
from .recipe import KernelRecipe

Combo = tuple[tuple[str, Constexpr], ...]  # derived constexpr -> value, sorted by name


def points(kr: KernelRecipe) -> Iterator[tuple[tuple[int, ...], dict[str, int]]]:
    """Every bucket, with its bounds by key, in the row-major order the loader uses."""
    keys = list(kr.buckets)
    for combo in itertools.product(*kr.buckets.values()):
        yield combo, dict(zip(keys, combo, strict=True))


class EnvError(ValueError):
    """An expression that cannot be evaluated at a point: ``key`` names it in the recipe
    (``sizes.EM``, ``derived.BLOCK``), ``problem`` says why."""

    def __init__(self, key: str, problem: str):
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}")


_FAILURES = (ExprError, ArithmeticError, TypeError, ValueError)


def env_at(
    kr: KernelRecipe,
    point: Mapping[str, int],
    config: Config | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every value at ``point`` under ``config`` (``extra``: the target's properties).
    Raises EnvError naming the size or derived value that cannot be evaluated there."""
    env: dict[str, Any] = {**kr.fixed, **(config.values() if config else {}), **kr.sizes}
    env.update({p: 1 for p, t in kr.signature.items() if t.startswith("*")})  # not None
    env.update(point)
    env.update(extra or {})
    for what, exprs in (("sizes", kr.size_exprs), ("derived", kr.derived)):
        for name, e in exprs.items():
            try:
                env[name] = e.evaluate(env)
            except _FAILURES as exc:
                raise EnvError(f"{what}.{name}", f"{e.text!r}: {exc}") from None
    return env


def sizes_at(kr: KernelRecipe, point: Mapping[str, int], config: Config) -> dict[str, int]:
    """The sizes a run at ``point`` uses under ``config``: the bucket's bounds, the
    literal sizes and the expression sizes (which may read the config)."""
    env = env_at(kr, point, config)
    names = [*kr.sizes, *kr.size_exprs, *point]
    return {n: int(env[n]) for n in names}


def derived_at(kr: KernelRecipe, env: Mapping[str, Any]) -> Combo:
    return tuple(sorted((n, env[n]) for n in kr.derived))


def combos(kr: KernelRecipe, config: Config) -> tuple[Combo, ...]:
    """The derived values a variant of ``config`` is compiled with: those taken at some
    bucket, and for every boolean one both values (whether a reduction divides evenly,
    say, depends on a call's sizes, which the buckets only sample)."""
    if not kr.derived:
        return ((),)
    seen: set[Combo] = set()
    for _, point in points(kr):
        seen.add(derived_at(kr, env_at(kr, point, config)))
    flags = sorted({n for combo in seen for n, x in combo if isinstance(x, bool)})
    out: set[Combo] = set()
    for combo in seen:
        fixed = [(n, x) for n, x in combo if n not in flags]
        for values in itertools.product((False, True), repeat=len(flags)):
            out.add(tuple(sorted([*fixed, *zip(flags, values, strict=True)])))
    return tuple(sorted(out, key=_combo_key))


def _combo_key(combo: Combo) -> tuple[Any, ...]:
    from .config import sort_key

    return tuple((n, sort_key(x)) for n, x in combo)

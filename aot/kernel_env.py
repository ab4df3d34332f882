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

from loader.buckets import kernel_grid
from loader.expr import ExprError

from .config import Config, Constexpr
from .dtypes import TL_NAMES
from .recipe import KernelRecipe

Combo = tuple[tuple[str, Constexpr], ...]  # derived constexpr -> value, sorted by name


# A ``fixed`` value naming the target's SM count: a persistent kernel's
# ``NUM_SMS: tl.constexpr``, which its author's host code sets from the device.
TARGET_SMS = "NUM_SMS"


def fixed_for(
    kr: KernelRecipe, binding: Mapping[str, str], sms: int | None = None
) -> dict[str, Constexpr]:
    """``fixed`` under a binding, for a target with ``sms`` SMs: a value naming a dtype
    variable (``compute_type = "T"``) is that variable's element type as a ``tl`` dtype
    (``"tl.bfloat16"``); ``"NUM_SMS"`` is the target's SM count."""
    out = dict(kr.fixed)
    for name, value in out.items():
        if isinstance(value, str) and value in kr.dtypes and value in binding:
            out[name] = "tl." + TL_NAMES[binding[value]]
        elif value == TARGET_SMS and sms is not None:
            out[name] = sms
    return out


def points(kr: KernelRecipe) -> Iterator[tuple[tuple[int, ...], dict[str, int]]]:
    """Every bucket, with its bounds by key, in the row-major order the loader uses."""
    grid = kernel_grid(tuple(kr.buckets), tuple(kr.buckets.values()))
    for combo in grid:
        yield combo, dict(zip(grid.dims, combo, strict=True))


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
    binding: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every value at ``point`` under ``config`` (``extra``: the target's properties;
    ``binding``: which optional arguments are None). Raises EnvError naming the size or
    derived value that cannot be evaluated there."""
    env: dict[str, Any] = {**kr.fixed, **(config.values() if config else {}), **kr.sizes}
    # A pointer's value, as the loader sees it: 0 when passed None, else some address.
    nones = {p for p, t in (binding or {}).items() if t == "none"} | set(kr.always_none)
    env.update({p: 0 if p in nones else 1 for p, t in kr.signature.items() if t.startswith("*")})
    env.update(point)
    env.update(extra or {})
    if TARGET_SMS in env:  # the target's properties are known here
        env.update({n: env[TARGET_SMS] for n, x in kr.fixed.items() if x == TARGET_SMS})
    for what, exprs in (("sizes", kr.size_exprs), ("derived", kr.derived)):
        for name, e in exprs.items():
            # An argument only None-tested needs no value: it is None where the binding
            # (or inputs) passes None, and given otherwise (a `scale` always passed).
            given = {n: None if n in nones else 1 for n in e.presence - env.keys()}
            try:
                env[name] = e.evaluate({**env, **given})
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


def combos(
    kr: KernelRecipe,
    config: Config,
    binding: Mapping[str, str],
    allowed: Mapping[tuple[int, ...], tuple[Config, ...]] | None = None,
) -> tuple[Combo, ...]:
    """The derived values a variant of ``config`` is compiled with under ``binding``:
    those taken at some bucket that allows ``config`` (``allowed``: per bucket, the
    configs its constraints let run there, where fewer than all), and for every boolean
    one that reads a call's sizes both values (whether a reduction divides evenly depends
    on sizes the buckets only sample; whether a pointer is None, on the binding alone).
    A width whose rule forbids the config is no variant of it: the loader would never
    launch one."""
    if not kr.derived:
        return ((),)
    seen: set[Combo] = set()
    every = list(points(kr))
    allowing = [p for b, p in every if allowed is None or config in allowed.get(b, (config,))]
    for point in allowing or [p for _, p in every]:
        seen.add(derived_at(kr, env_at(kr, point, config, binding=binding)))
    varying = _varying(kr)
    flags = sorted({n for combo in seen for n, x in combo if isinstance(x, bool) and n in varying})
    out: set[Combo] = set()
    for combo in seen:
        fixed = [(n, x) for n, x in combo if n not in flags]
        for values in itertools.product((False, True), repeat=len(flags)):
            out.add(tuple(sorted([*fixed, *zip(flags, values, strict=True)])))
    return tuple(sorted(out, key=_combo_key))


def _varying(kr: KernelRecipe) -> set[str]:
    """The derived values that read (directly or through another) a value that changes
    from call to call: an integer or float argument, or a call value."""
    sizes = {p for p, t in kr.signature.items() if not t.startswith("*")} | set(kr.call)
    varying: set[str] = set()
    for name, e in kr.derived.items():  # in evaluation order: each reads those before it
        if (e.names - e.presence) & (sizes | varying):  # whether None: the binding's alone
            varying.add(name)
    return varying


def _combo_key(combo: Combo) -> tuple[Any, ...]:
    from .config import sort_key

    return tuple((n, sort_key(x)) for n, x in combo)

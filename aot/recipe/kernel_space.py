"""A kernel's meta-parameters: ``fixed`` values, the searched ``space`` (with the launch
options ``num_warps`` and ``num_stages``) and the heuristic's ``default`` preferences."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .validate import Validator, show

LAUNCH_OPTIONS = ("num_warps", "num_stages")
DEFAULT_LAUNCH = {"num_warps": (4,), "num_stages": (3,)}
# Triton types an integer constexpr as i32 or i64; a larger one cannot be compiled.
_CONSTEXPR = ("i64", "the widest integer a constexpr can be")


def parse_fixed(
    v: Validator, k: Mapping[str, Any], w: str, signature: Mapping[str, str]
) -> dict[str, int]:
    """Constexpr values that are not searched; booleans are kept as 0 and 1."""
    fixed: dict[str, int] = {}
    for mname, value in v.table(k, "fixed", w).items():
        key = f"{w}.fixed.{mname}"
        if mname in signature:
            v.fail(key, f"{mname} is a runtime argument (in signature), not a constexpr")
        if isinstance(value, bool):
            value = int(value)
        fixed[mname] = v.fits(v.int_value(value, key), key, *_CONSTEXPR)
        if mname in LAUNCH_OPTIONS:
            v.fail(key, f"put {mname} in space (a one-element list is fine)")
    return fixed


def parse_space(
    v: Validator,
    k: Mapping[str, Any],
    w: str,
    signature: Mapping[str, str],
    fixed: Mapping[str, int],
) -> dict[str, tuple[int, ...]]:
    """The searched values of each meta-parameter, with the launch options' defaults."""
    space: dict[str, tuple[int, ...]] = {}
    for mname, values in v.table(k, "space", w).items():
        key = f"{w}.space.{mname}"
        if mname in signature:
            v.fail(key, f"{mname} is a runtime argument (in signature); search constexprs only")
        if mname in fixed:
            v.fail(key, f"{mname} is also in fixed; keep it in one of the two")
        space[mname] = _values(v, values, key, mname)
    for option, default in DEFAULT_LAUNCH.items():
        space.setdefault(option, default)
    return space


def _values(v: Validator, values: Any, key: str, mname: str) -> tuple[int, ...]:
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, list) or not values:
        v.fail(key, "must be a non-empty list of integers")
    ints = [v.fits(v.int_value(x, key), key, *_CONSTEXPR) for x in values]
    if len(set(ints)) != len(ints):
        v.fail(key, f"{show(ints)} lists a value twice")
    if mname == "num_warps":
        for x in ints:
            if x < 1 or x > 32 or x & (x - 1):
                v.fail(key, f"{x} is not a power of two; use 1, 2, 4, 8, 16 or 32")
    if mname == "num_stages":
        for x in ints:
            if x < 1:
                v.fail(key, f"{x} must be at least 1")
    return tuple(ints)


def parse_default(
    v: Validator, k: Mapping[str, Any], w: str, space: Mapping[str, tuple[int, ...]]
) -> dict[str, int]:
    """Preferred values among the searched ones, for the heuristic's ties."""
    default: dict[str, int] = {}
    for dname, value in v.table(k, "default", w).items():
        key = f"{w}.default.{dname}"
        if dname not in space:
            v.fail(key, f"defaults apply to searched parameters; choose from {list(space)}")
        value = v.int_value(value, key)
        if value not in space[dname]:
            v.fail(key, f"{value} is not in space.{dname} {list(space[dname])}")
        default[dname] = value
    return default

"""A kernel's meta-parameters: ``fixed`` values, the searched ``space`` (with the launch
options ``num_warps`` and ``num_stages``), the heuristic's ``default`` preferences, and
what a shipped kernel's own decorators say (``@triton.autotune``'s configs, constexpr
defaults).

A constexpr value is anything Triton accepts: an integer, a float, a boolean, a string,
``"None"`` (Python's None) or a dtype written as in Python, ``"tl.bfloat16"``.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..config import DTYPE_PREFIX, Config, Constexpr
from ..shipped import Shipped, TunedConfig
from .validate import Validator, show

# maxnreg (a register cap per thread, Triton's launch option) is searched only if listed.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "maxnreg")
MAXNREG = (16, 255)  # what ptxas's register cap accepts
DEFAULT_LAUNCH = {"num_warps": (4,), "num_stages": (3,)}
# Triton types an integer constexpr as i32 or i64; a larger one cannot be compiled.
_CONSTEXPR = ("i64", "the widest integer a constexpr can be")
# ``tl`` dtypes by the names Python code uses for them.
DTYPES = (
    "bfloat16", "float16", "float32", "float64", "float8e4b15", "float8e4b8", "float8e4nv",
    "float8e5", "float8e5b16", "int1", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64",
)  # fmt: skip


def constexpr(v: Validator, raw: Any, key: str) -> Constexpr:
    """A recipe's constexpr value: TOML integers, floats, booleans and strings, with the
    strings ``"None"`` and ``"tl.<dtype>"`` standing for Python's None and a dtype."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int):
        return v.fits(raw, key, *_CONSTEXPR)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            v.fail(key, f"{show(raw)} is not a finite number")
        return raw
    if isinstance(raw, str):
        if raw == "None":
            return None
        if raw.startswith(DTYPE_PREFIX) and raw[len(DTYPE_PREFIX) :] not in DTYPES:
            v.fail(key, f"{show(raw)} is not a Triton dtype; use one of "
                   f"{', '.join(DTYPE_PREFIX + d for d in DTYPES)}")  # fmt: skip
        return raw
    v.fail(key, f"must be an integer, float, boolean or string, got {show(raw)}")


def python_constexpr(value: Any, key: str) -> Constexpr:
    """A value from the author's Python (an autotune config, a default) as a recipe value;
    ValueError if it is none of the kinds a bundle can record."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    name = _dtype_name(value)
    if name is not None:
        return DTYPE_PREFIX + name
    raise ValueError(f"{key} is {show(value)}, which is no integer, float, boolean, string, "
                     "None or tl dtype")  # fmt: skip


def _dtype_name(value: Any) -> str | None:
    try:
        import triton.language as tl
    except ImportError:  # pragma: no cover - the build extra always has Triton
        return None
    if isinstance(value, tl.dtype):
        return next((d for d in DTYPES if getattr(tl, d, None) == value), None)
    return None


def parse_fixed(
    v: Validator, k: Mapping[str, Any], w: str, kernel: Shipped
) -> dict[str, Constexpr]:
    """Constexpr values that are not searched."""
    fixed: dict[str, Constexpr] = {}
    for mname, value in v.table(k, "fixed", w).items():
        key = f"{w}.fixed.{mname}"
        if mname in LAUNCH_OPTIONS:
            listed = f"space.{mname} = [{value}]" if type(value) is int else f"space.{mname}"
            v.fail(key, f"{mname} is a launch option, not a constexpr: put it in space ({listed}; "
                   f"a one-element list is fine), or, to choose it per call from other values, "
                   f"{launch_rule(mname)}")  # fmt: skip
        fixed[mname] = constexpr(v, value, key)
        _constexpr_name(v, key, mname, kernel, "not a constexpr")
    return fixed


# A rule for each launch option, as the constraint that states it (calculate_settings' warps).
_RULES = {
    "num_warps": "min(16, max(4, BLOCK_SIZE // 512))",
    "num_stages": "2 if BLOCK_SIZE >= 8192 else 3",
    "maxnreg": "128 if BLOCK_SIZE >= 8192 else 255",
}


def launch_rule(option: str, rule: str = "") -> str:
    """How a recipe states a host rule choosing the launch option ``option`` (``rule``, the
    expression the recipe gave, or an example): as a constraint over the listed choices."""
    given = rule or _RULES.get(option, _RULES["num_warps"])
    try:
        top = ast.parse(given, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        top = None
    if not isinstance(top, ast.Call | ast.Name | ast.Constant):
        given = f"({given})"
    said = "" if rule else "e.g. "
    return (
        f"list every value the rule gives in space.{option} and state the rule as a "
        f"constraint, {said}constraints = [{json.dumps(f'{option} == {given}')}] (constraints "
        "read meta-parameters, derived values, sizes, num_warps and num_stages; one that reads "
        "a call's values is checked per call)"
    )


def _constexpr_name(v: Validator, key: str, mname: str, kernel: Shipped, why: str) -> None:
    if any(p.name == mname for p in kernel.runtime):
        v.fail(key, f"{mname} is a runtime argument (in signature); {why}")
    if all(p.name != mname for p in kernel.constexprs):
        names = ", ".join(p.name for p in kernel.constexprs) or "none"
        v.fail(key, f"{kernel.name} has no constexpr named {mname} (it has: {names})")


def parse_space(
    v: Validator,
    k: Mapping[str, Any],
    w: str,
    kernel: Shipped,
    fixed: Mapping[str, Constexpr],
) -> dict[str, tuple[Constexpr, ...]]:
    """The searched values of each meta-parameter, with the launch options' defaults."""
    space: dict[str, tuple[Constexpr, ...]] = {}
    for mname, values in v.table(k, "space", w).items():
        key = f"{w}.space.{mname}"
        if mname not in LAUNCH_OPTIONS:
            _constexpr_name(v, key, mname, kernel, "search constexprs only")
        if mname in fixed:
            v.fail(key, f"{mname} is also in fixed; keep it in one of the two")
        space[mname] = _values(v, values, key, mname)
    for option, default in DEFAULT_LAUNCH.items():
        space.setdefault(option, default)
    return space


def _values(v: Validator, values: Any, key: str, mname: str) -> tuple[Constexpr, ...]:
    if not isinstance(values, list):
        values = [values]
    if not values:
        v.fail(key, "must be a non-empty list of values")
    out = [constexpr(v, x, key) for x in values]
    if len(set(map(repr, out))) != len(out):
        v.fail(key, f"{show(out)} lists a value twice")
    if mname in LAUNCH_OPTIONS:
        for x in out:
            if isinstance(x, bool) or not isinstance(x, int):
                v.fail(key, f"{show(x)} is not an integer")
            if mname == "num_warps" and (x < 1 or x > 32 or x & (x - 1)):
                v.fail(key, f"{x} is not a power of two; use 1, 2, 4, 8, 16 or 32")
            if mname == "num_stages" and x < 1:
                v.fail(key, f"{x} must be at least 1")
            if mname == "maxnreg" and not MAXNREG[0] <= x <= MAXNREG[1]:
                v.fail(key, f"{x} registers: a cap between {MAXNREG[0]} and {MAXNREG[1]}")
    return tuple(out)


def parse_default(
    v: Validator, k: Mapping[str, Any], w: str, space: Mapping[str, tuple[Constexpr, ...]]
) -> dict[str, Constexpr]:
    """Preferred values among the searched ones, for the heuristic's ties."""
    default: dict[str, Constexpr] = {}
    for dname, value in v.table(k, "default", w).items():
        key = f"{w}.default.{dname}"
        if dname not in space:
            v.fail(key, f"defaults apply to searched parameters; choose from {list(space)}")
        value = constexpr(v, value, key)
        if value not in space[dname]:
            v.fail(key, f"{show(value)} is not in space.{dname} {list(space[dname])}")
        default[dname] = value
    return default


def autotune_configs(v: Validator, w: str, shipped: Shipped) -> tuple[Config, ...]:
    """``@triton.autotune``'s configs as the search space (when the recipe gives none)."""
    tuned = shipped.autotune
    if tuned is None:
        return ()
    key = f"{w}.source"
    if tuned.hooks:
        v.fail(key, f"{shipped.name}'s @triton.autotune has its own pre_hook/post_hook: host "
               "code aotc cannot run when benchmarking; give [kernel.space] to search without "
               "it, or use reset_to_zero/restore_value")  # fmt: skip
    constexprs = [p.name for p in shipped.constexprs]
    out: list[Config] = []
    for i, c in enumerate(tuned.configs):
        out.append(_config(v, key, i, c, constexprs))
    if len({c.id for c in out}) != len(out):
        v.fail(key, f"{shipped.name}'s @triton.autotune lists a config twice")
    return tuple(out)


def _config(v: Validator, key: str, i: int, c: TunedConfig, constexprs: Sequence[str]) -> Config:
    where = f"{key}: @triton.autotune config #{i + 1}"
    meta: list[tuple[str, Constexpr]] = []
    for name, value in c.kwargs:
        if name not in constexprs:
            v.fail(key, f"config #{i + 1} of @triton.autotune sets {name}, which is no "
                   "constexpr parameter of the kernel")  # fmt: skip
        try:
            meta.append((name, python_constexpr(value, f"{where}: {name}")))
        except ValueError as exc:
            v.fail(key, str(exc))
    return Config(tuple(sorted(meta)), c.num_warps, c.num_stages, c.num_ctas, c.maxnreg)


def defaults(shipped: Shipped) -> dict[str, Constexpr]:
    """Constexpr parameters' own Python defaults (``BLOCK: tl.constexpr = 128``), those that
    a bundle can record."""
    out: dict[str, Constexpr] = {}
    for p in shipped.constexprs:
        if p.has_default:
            try:
                out[p.name] = python_constexpr(p.default, p.name)
            except ValueError:
                continue
    return out

"""The ``[[kernel]]`` table: one Triton kernel, its arguments and what to build of it.

``parse_kernel`` reads the table in parts, each of which sees only what the earlier ones
produced: the arguments (``dtypes``, ``signature``), their values at build time
(``buckets``, ``sizes``), the meta-parameters (kernel_space.py), then everything written
as expressions of those names (kernel_names.py says which name each may read): the grid,
constraints and specializations (kernel_launch.py), pointer access (kernel_access.py) and
tuning (kernel_tune.py). A new source of any part (a signature inferred from the
function, a search space from ``@triton.autotune``) replaces that part's function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader.expr import Expr
from loader.manifest import ELEMENT_TYPES, INT_TYPES

from .kernel_access import parse_access
from .kernel_launch import check_tiles, parse_constraints, parse_grid, parse_specializations
from .kernel_names import Names
from .kernel_space import LAUNCH_OPTIONS, parse_default, parse_fixed, parse_space
from .kernel_tune import TuneSettings, parse_tune
from .validate import IDENT, Validator, show, sorted_names

SCALAR_TYPES = INT_TYPES | {"fp32", "fp64"}
KERNEL_KEYS = (
    "tune", "name", "source", "signature", "dtypes", "grid", "buckets", "sizes", "fixed",
    "space", "default", "constraints", "specializations", "reference", "inputs", "shapes",
    "strides", "writes",
)  # fmt: skip


@dataclass(frozen=True)
class KernelRecipe:
    name: str
    source: Path  # absolute path of the Python file
    function: str
    source_text: str  # "path:function" as written, for messages
    signature: Mapping[str, str]  # runtime param -> Triton type (*fp16, *T, i32, fp32)
    dtypes: Mapping[str, tuple[str, ...]]  # dtype variable -> element types
    grid: tuple[Expr, Expr, Expr]
    buckets: Mapping[str, tuple[int, ...]]  # bucket key -> ascending upper bounds
    sizes: Mapping[str, int]  # representative values of other size arguments
    fixed: Mapping[str, int]  # constexpr values that are not searched
    space: Mapping[str, tuple[int, ...]]  # searched meta-params, num_warps, num_stages
    default: Mapping[str, int]  # tie-break preferences for the heuristic
    constraints: tuple[Expr, ...]
    # Each: param -> 16 (divisible by 16) or 1 (equal to 1). The generic variant (no
    # assumptions) is always added by the planner and is not listed here.
    specializations: tuple[Mapping[str, int], ...]
    tune: TuneSettings
    reference: str | None  # "path.py:function", relative to the recipe
    inputs: str | None
    # What the kernel reads and writes, for checking pipelines (aot/recipe/pipeline.py):
    # pointer param -> its tensor's shape, and strides, as expressions of integer params
    # (a stride may also be a literal); and the pointer params the kernel writes.
    shapes: Mapping[str, tuple[Expr, ...]] = field(default_factory=dict)
    strides: Mapping[str, tuple[Expr, ...]] = field(default_factory=dict)
    writes: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"[[kernel]] {self.name}"


def parse_kernels(v: Validator, raw: list[Any], root: Path) -> tuple[KernelRecipe, ...]:
    kernels: list[KernelRecipe] = []
    seen: set[str] = set()
    for i, k in enumerate(raw):
        if not isinstance(k, dict):
            v.fail(f"[[kernel]] #{i + 1}", "must be a table")
        kr = parse_kernel(v, k, i, root)
        if kr.name in seen:
            v.fail(f"[[kernel]] {kr.name}.name", "duplicate kernel name; names must be unique")
        seen.add(kr.name)
        kernels.append(kr)
    return tuple(kernels)


def parse_kernel(v: Validator, k: Mapping[str, Any], index: int, root: Path) -> KernelRecipe:
    name = _name(v, k, index)
    w = f"[[kernel]] {name}"
    v.keys(k, KERNEL_KEYS, w)
    source_text = v.string(k, "source", w)
    source, function = v.source(source_text, f"{w}.source", root)
    dtypes = parse_dtypes(v, k, w)
    signature = parse_signature(v, k, w, dtypes)
    buckets = parse_buckets(v, k, w, signature)
    sizes = parse_sizes(v, k, w, signature, buckets)
    fixed = parse_fixed(v, k, w, signature)
    space = parse_space(v, k, w, signature, fixed)
    names = Names(
        w=w,
        ints=frozenset(p for p, t in signature.items() if t in INT_TYPES),
        arguments=frozenset(signature),
        buckets=frozenset(buckets),
        sizes=frozenset(sizes),
        fixed=frozenset(fixed),
        searched=frozenset(space),
    )
    default = parse_default(v, k, w, space)
    grid = parse_grid(v, k, w, names)
    check_tiles(v, w, grid, space)
    constraints = parse_constraints(v, k, w, names)
    specializations = parse_specializations(v, k, w, signature, buckets)
    shapes, strides, writes = parse_access(v, k, w, signature)
    reference, inputs = _references(v, k, w, root)
    return KernelRecipe(
        name=name,
        source=source,
        function=function,
        source_text=source_text,
        signature=signature,
        dtypes=dtypes,
        grid=grid,
        buckets=buckets,
        sizes=sizes,
        fixed=fixed,
        space=space,
        default=default,
        constraints=constraints,
        specializations=specializations,
        tune=parse_tune(v, k, w, root, names),
        reference=reference,
        inputs=inputs,
        shapes=shapes,
        strides=strides,
        writes=writes,
    )


def _name(v: Validator, k: Mapping[str, Any], index: int) -> str:
    raw = k.get("name")
    if not isinstance(raw, str) or not IDENT.match(raw):
        v.fail(
            f"[[kernel]] #{index + 1}.name",
            f"missing or invalid ({show(raw)}); give each kernel an identifier name",
        )
    return raw


def parse_dtypes(v: Validator, k: Mapping[str, Any], w: str) -> dict[str, tuple[str, ...]]:
    """Element-type variables: each ``*T`` pointer takes every listed type."""
    dtypes: dict[str, tuple[str, ...]] = {}
    for var, types in v.table(k, "dtypes", w).items():
        key = f"{w}.dtypes.{var}"
        if not IDENT.match(var) or var in ELEMENT_TYPES:
            v.fail(key, "a dtype variable must be an identifier that is not a type name")
        if isinstance(types, str):
            types = [types]
        if not isinstance(types, list) or not types:
            v.fail(key, 'must be a non-empty list of element types, e.g. ["fp16", "bf16"]')
        for t in types:
            if not isinstance(t, str) or t not in ELEMENT_TYPES:
                v.fail(key, f"{show(t)} is not an element type; use one of "
                       f"{sorted_names(ELEMENT_TYPES)}")  # fmt: skip
        if len(set(types)) != len(types):
            v.fail(key, "lists a type twice")
        dtypes[var] = tuple(types)
    return dtypes


def parse_signature(
    v: Validator, k: Mapping[str, Any], w: str, dtypes: Mapping[str, tuple[str, ...]]
) -> dict[str, str]:
    """Every runtime argument, in the function's order, with its Triton type."""
    sig = v.table(k, "signature", w, required=True)
    if not sig:
        v.fail(f"{w}.signature", "is empty; give each runtime argument its Triton type")
    signature = {pname: _arg_type(v, ptype, f"{w}.signature.{pname}", w, dtypes)
                 for pname, ptype in sig.items()}  # fmt: skip
    for var in dtypes:
        if f"*{var}" not in signature.values():
            v.fail(f"{w}.dtypes.{var}", f"no argument in signature has type '*{var}'; remove it")
    return signature


def _arg_type(
    v: Validator, ptype: Any, key: str, w: str, dtypes: Mapping[str, tuple[str, ...]]
) -> str:
    if not isinstance(ptype, str):
        v.fail(key, f"must be a type string like '*fp16' or 'i32', got {show(ptype)}")
    ptype = ptype.strip()
    if ptype.startswith("*"):
        elem = ptype[1:]
        if elem not in ELEMENT_TYPES and elem not in dtypes:
            hint = (
                f"declare it under {w}.dtypes or use one of {sorted_names(ELEMENT_TYPES)}"
                if IDENT.match(elem)
                else f"use one of {sorted_names(ELEMENT_TYPES)}"
            )
            v.fail(key, f"unknown element type {show(elem)}; {hint}")
    elif ptype == "constexpr":
        v.fail(key, "constexpr parameters go in fixed or space, not in signature")
    elif ptype not in SCALAR_TYPES:
        v.fail(key, f"unknown scalar type {show(ptype)}; use one of {sorted_names(SCALAR_TYPES)} "
               "(pass fp16/bf16 scalars as fp32)")  # fmt: skip
    return str(ptype)


def _int_args(signature: Mapping[str, str]) -> list[str]:
    return [p for p, t in signature.items() if t in INT_TYPES]


def parse_buckets(
    v: Validator, k: Mapping[str, Any], w: str, signature: Mapping[str, str]
) -> dict[str, tuple[int, ...]]:
    """Bucket keys (integer arguments) and their ascending upper bounds."""
    int_params = _int_args(signature)
    buckets: dict[str, tuple[int, ...]] = {}
    for key_name, bounds in v.table(k, "buckets", w).items():
        key = f"{w}.buckets.{key_name}"
        if key_name not in int_params:
            v.fail(key, f"bucket keys must be integer arguments; choose from {int_params}")
        ptype = signature[key_name]
        buckets[key_name] = v.bounds(bounds, key, ptype, f"the type of {key_name} in signature")
    return buckets


def parse_sizes(
    v: Validator,
    k: Mapping[str, Any],
    w: str,
    signature: Mapping[str, str],
    buckets: Mapping[str, tuple[int, ...]],
) -> dict[str, int]:
    """Representative values of the integer arguments that are not bucket keys."""
    int_params = _int_args(signature)
    sizes: dict[str, int] = {}
    for sname, value in v.table(k, "sizes", w).items():
        key = f"{w}.sizes.{sname}"
        if sname not in int_params:
            v.fail(key, f"sizes are for integer arguments; choose from {int_params}")
        if sname in buckets:
            v.fail(key, f"{sname} is a bucket key; its size comes from the bucket")
        size = v.int_value(value, key, minimum=1)
        sizes[sname] = v.fits(size, key, signature[sname], f"the type of {sname} in signature")
    return sizes


def _references(
    v: Validator, k: Mapping[str, Any], w: str, root: Path
) -> tuple[str | None, str | None]:
    reference = v.optional_ref(k, "reference", w, root)
    inputs = v.optional_ref(k, "inputs", w, root)
    if reference and not inputs:
        v.fail(
            f"{w}.inputs",
            "a reference needs inputs: inputs makes the arguments, reference the expected "
            "outputs (inputs alone is fine: the kernel is tuned but not verified)",
        )
    return reference, inputs


__all__ = ["LAUNCH_OPTIONS", "KernelRecipe", "TuneSettings", "parse_kernel", "parse_kernels"]

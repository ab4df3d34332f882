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

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader.descriptors import is_host_descriptor
from loader.expr import Expr
from loader.manifest import ELEMENT_TYPES, INT_TYPES

from ..config import Config, Constexpr
from ..shipped import Autotune, Shipped
from .kernel_access import Shape, parse_access
from .kernel_call import CallValue, check_call, parse_call
from .kernel_descriptors import parse_descriptors
from .kernel_launch import (
    check_tiles,
    example_specializations,
    parse_constraints,
    parse_grid,
    parse_specializations,
)
from .kernel_meta import Meta, parse_host, parse_meta
from .kernel_names import Names
from .kernel_signature import (
    Example,
    annotated,
    given_types,
    inferred_types,
    inputs_function,
    introspect,
)
from .kernel_space import LAUNCH_OPTIONS, parse_default
from .kernel_tune import TuneSettings, parse_tune
from .kernel_values import Values, parse_values
from .validate import IDENT, Validator, show, sorted_names

KERNEL_KEYS = (
    "tune", "name", "source", "signature", "dtypes", "grid", "buckets", "sizes", "fixed",
    "space", "default", "derived", "call", "optional", "host", "constraints",
    "specializations", "reference", "inputs", "shapes", "strides", "writes", "descriptors",
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
    # Bucket keys (integer arguments or call values, and sizes listed with several
    # values) -> ascending upper bounds.
    buckets: Mapping[str, tuple[int, ...]]
    sizes: Mapping[str, int]  # representative values of other size arguments
    fixed: Mapping[str, Constexpr]  # constexpr values that are not searched
    space: Mapping[str, tuple[Constexpr, ...]]  # searched meta-params, num_warps, num_stages
    default: Mapping[str, Constexpr]  # tie-break preferences for the heuristic
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
    shapes: Mapping[str, Shape] = field(default_factory=dict)
    strides: Mapping[str, Shape] = field(default_factory=dict)
    writes: tuple[str, ...] = ()
    # What a shipped kernel brings (see DESIGN in recipes/README.md, "Kernels as shipped"):
    configs: tuple[Config, ...] = ()  # an explicit search space (@triton.autotune's)
    derived: Mapping[str, Expr] = field(default_factory=dict)  # constexprs computed per call
    call: Mapping[str, CallValue] = field(default_factory=dict)  # launch values, not arguments
    optional: tuple[str, ...] = ()  # pointers built both as passed and as None
    always_none: tuple[str, ...] = ()  # pointers the inputs always pass as None
    size_exprs: Mapping[str, Expr] = field(default_factory=dict)  # sizes of buckets and meta
    listed: tuple[str, ...] = ()  # bucket keys that are sizes listed with several values
    inferred: tuple[str, ...] = ()  # runtime params whose types were inferred
    autotune: Autotune | None = field(default=None, compare=False)
    heuristics: Mapping[str, str] = field(default_factory=dict)  # rule -> translated text
    # Meta-parameters the caller's host code depends on (tokens padded to BLOCK_SIZE_M):
    # a call passes them by keyword, as launch_config() gave them, and only a variant with
    # those values may serve it.
    host: tuple[str, ...] = ()
    # Tensor arguments read through TMA descriptors -> their block shape (meta-parameter
    # expressions): see kernel_descriptors.py.
    descriptors: Mapping[str, tuple[Expr, ...]] = field(default_factory=dict)

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
    kernel = introspect(v, f"{w}.source", source, function)
    dtypes = parse_dtypes(v, k, w)
    meta = parse_meta(v, k, w, kernel)
    call = parse_call(v, k, w, kernel)
    reference, inputs = _references(v, k, w, root)
    values = parse_values(v, k, w, kernel, call)
    values.check_names(v, w, kernel, meta)
    signature, inferred, example = _signature(v, k, w, kernel, dtypes, inputs, root, values, meta)
    optional, always_none = _optional(v, k, w, signature, example, values)
    descriptors = parse_descriptors(v, k, w, signature, meta, kernel)
    _check_described(v, w, example, descriptors)
    buckets, sizes = values.typed(v, w, signature)
    names = Names(
        w=w,
        ints=frozenset(p for p, t in signature.items() if t in INT_TYPES) | set(call),
        arguments=frozenset(signature) | set(call),
        buckets=frozenset(buckets),
        sizes=frozenset(sizes) | set(values.exprs),
        fixed=frozenset(meta.fixed) | set(meta.derived),
        searched=frozenset(meta.searched),
        constants=frozenset(values.constants),
        pointers=frozenset(p for p, t in signature.items() if t.startswith("*")),
    )
    values.check_exprs(v, w, names)
    derived = ordered_derived(v, w, meta.derived, names)
    grid = parse_grid(v, k, w, names)
    check_tiles(v, w, grid, meta.space_values())
    tune = parse_tune(v, k, w, root, names)
    values.check_constants(v, w, tune)
    call = check_call(v, w, call, signature, example)
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
        fixed=meta.fixed,
        space=meta.space,
        default=parse_default(v, k, w, meta.space),
        constraints=parse_constraints(v, k, w, names),
        specializations=_undescribed(
            _specializations(v, k, w, signature, buckets, kernel, example, values.listed),
            descriptors,
        ),
        tune=tune,
        reference=reference,
        inputs=inputs,
        **_access(v, k, w, signature),
        configs=meta.configs,
        derived=derived,
        call=call,
        optional=optional,
        always_none=always_none,
        size_exprs=values.exprs,
        listed=tuple(values.listed),
        inferred=inferred,
        autotune=kernel.autotune,
        heuristics=meta.translated,
        host=parse_host(v, k, w, meta),
        descriptors=descriptors,
    )


def _check_described(
    v: Validator, w: str, example: Example | None, descriptors: Mapping[str, Any]
) -> None:
    """An argument ``inputs`` passes as a host TensorDescriptor must have a block shape."""
    for name, value in (example.values if example is not None else {}).items():
        if is_host_descriptor(value) and name not in descriptors:
            v.fail(f"{w}.descriptors", f"inputs passes a TensorDescriptor for {name}: give its "
                   f"block shape, {name} = [...] (meta-parameter names), or set it in the "
                   "autotune configs' pre_hook")  # fmt: skip


def _undescribed(
    specializations: tuple[Mapping[str, int], ...], descriptors: Mapping[str, Any]
) -> tuple[Mapping[str, int], ...]:
    """The specializations without descriptor arguments: Triton takes no assumption on a
    descriptor (TMA has its own alignment rules, which the loader checks at the call)."""
    if not descriptors:
        return specializations
    out: list[Mapping[str, int]] = []
    for spec in specializations:
        kept = {p: a for p, a in spec.items() if p not in descriptors}
        if kept and kept not in out:
            out.append(kept)
    return tuple(out)


def _specializations(
    v: Validator,
    k: Mapping[str, Any],
    w: str,
    signature: Mapping[str, str],
    buckets: Mapping[str, tuple[int, ...]],
    kernel: Shipped,
    example: Example | None,
    listed: Mapping[str, tuple[int, ...]],
) -> tuple[Mapping[str, int], ...]:
    if "specializations" in k or example is None:
        return parse_specializations(v, k, w, signature, buckets)
    return example_specializations(kernel, example, signature, buckets, listed)


def ordered_derived(
    v: Validator, w: str, derived: Mapping[str, Expr], names: Names
) -> dict[str, Expr]:
    """The derived values in an order where each reads only those before it."""
    pending = {name: names.derived(v, f"{w}.derived.{name}", e) for name, e in derived.items()}
    out: dict[str, Expr] = {}
    while pending:
        ready = [n for n, e in pending.items() if not (e.names & set(pending)) - {n}]
        if not ready or any(n in pending[n].names for n in ready):
            loop = sorted(pending)
            v.fail(f"{w}.derived", f"{', '.join(loop)} read each other in a loop; give one of "
                   "them a value that does not")  # fmt: skip
        for n in ready:
            out[n] = pending.pop(n)
    return out


def _access(v: Validator, k: Mapping[str, Any], w: str, signature: Mapping[str, str]) -> Any:
    shapes, strides, writes = parse_access(v, k, w, signature)
    return {"shapes": shapes, "strides": strides, "writes": writes}


def _signature(
    v: Validator,
    k: Mapping[str, Any],
    w: str,
    kernel: Shipped,
    dtypes: Mapping[str, tuple[str, ...]],
    inputs: str | None,
    root: Path,
    values: Values,
    meta: Meta,
) -> tuple[dict[str, str], tuple[str, ...], Example | None]:
    """The runtime arguments' types: given, annotated, else inferred from ``inputs`` (whose
    example is returned too; None when nothing was inferred)."""
    known = {**annotated(kernel), **given_types(v, k, w, kernel, dtypes)}
    wanted = [p.name for p in kernel.runtime if p.name not in known]
    inferred: dict[str, str] = {}
    nones: frozenset[str] = frozenset()
    example = None
    if wanted:
        fn = inputs_function(v, f"{w}.inputs", inputs, root)
        names = sorted(dtypes)
        bindings = [dict(zip(names, c, strict=True))
                    for c in itertools.product(*(dtypes[n] for n in names))]  # fmt: skip
        example = inferred_types(v, w, kernel, wanted, fn, bindings, values.probe(meta),
                                 {**meta.fixed, **meta.first_config()},
                                 values.probe(meta, smallest=True))  # fmt: skip
        inferred, nones = example.types, example.nones
    signature = {p.name: known.get(p.name) or inferred.get(p.name) or "" for p in kernel.runtime}
    for var in dtypes:
        if f"*{var}" not in signature.values():
            v.fail(f"{w}.dtypes.{var}", f"no argument in signature has type '*{var}'; remove it")
    untyped = [p for p, t in signature.items() if not t and p not in nones]
    if untyped:  # pragma: no cover - inferred_types names every wanted argument
        v.fail(f"{w}.signature", f"no type for {', '.join(untyped)}")
    return signature, tuple(inferred), example


def _optional(
    v: Validator,
    k: Mapping[str, Any],
    w: str,
    signature: dict[str, str],
    example: Example | None,
    values: Values,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Arguments built both ways (``optional``: pointers, and scalars such as a ``scale:
    float | None``), and those ``inputs`` always passes as None."""
    nones = example.nones if example is not None else frozenset()
    raw = k.get("optional", [])
    key = f"{w}.optional"
    sized = set(values.buckets) | set(values.listed) | set(values.sizes) | set(values.exprs)
    allowed = [p for p in signature if p not in sized]
    listed = v.choices(raw, key, allowed, "argument names", "an argument that may be None "
                       "(a bucket key or size cannot)", '["bias_ptr"]')  # fmt: skip
    for p in listed:
        if not signature[p]:
            v.fail(key, f"inputs passes {p} as None, so its type is unknown; give it under "
                   f"{w}.signature, or pass a value for it in inputs")  # fmt: skip
    always = tuple(p for p in signature if p in nones and p not in listed)
    for p in always:
        signature[p] = signature[p] or "*i8"  # never launched as a pointer
    return tuple(p for p in signature if p in listed), always


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

"""A kernel's runtime arguments and their Triton types, as its JIT would see them.

Each non-constexpr parameter takes, in this order: its ``[kernel.signature]`` entry, its
annotation (``x_ptr: "*fp16"``), or the type of the value the recipe's ``inputs`` gives
it, called with meta tensors (``device="meta"``: shapes and dtypes, no memory) once per
dtype binding — a tensor is a pointer to its dtype, an int is ``i32`` (``i64`` past that
range), a float ``fp32``, a bool ``i1``, and ``None`` an argument compiled in as None
(``optional``: built both ways). A pointer whose element type follows a dtype variable
through the bindings is ``*T``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from loader.args import element_type
from loader.descriptors import is_host_descriptor
from loader.manifest import ELEMENT_TYPES, INT_TYPES

from ..inputs import Inputs, accepted, on_meta
from ..kernelfile import KernelImportError, import_failure, load_module, shipped
from ..shipped import NotAKernel, Shipped
from .validate import IDENT, Validator, show, sorted_names

SCALAR_TYPES = INT_TYPES | {"fp32", "fp64"}
I32 = (-(2**31), 2**31 - 1)


def introspect(v: Validator, key: str, path: Path, function: str) -> Shipped:
    """Import the kernel file and unwrap ``function`` from its decorators."""
    try:
        return shipped(path, function)
    except KernelImportError as exc:
        v.fail(key, str(exc))
    except AttributeError as exc:
        if exc.args == (function,):
            v.fail(key, f"{path.name} defines no {function!r}")
        v.fail(key, import_failure(path.name, exc))
    except NotAKernel as exc:
        v.fail(key, f"{function} {exc}")
    except Exception as exc:
        v.fail(key, import_failure(path.name, exc))


def given_types(
    v: Validator, k: Mapping[str, Any], w: str, kernel: Shipped, dtypes: Mapping[str, Any]
) -> dict[str, str]:
    """``[kernel.signature]``: types for some (or all) runtime arguments."""
    runtime = [p.name for p in kernel.runtime]
    constexprs = {p.name for p in kernel.constexprs}
    out: dict[str, str] = {}
    for pname, ptype in v.table(k, "signature", w).items():
        key = f"{w}.signature.{pname}"
        if pname in constexprs:
            v.fail(key, f"is a constexpr parameter of {kernel.name}; give it in fixed, space "
                   "or derived")  # fmt: skip
        if pname not in runtime:
            v.fail(key, f"is not a parameter of {kernel.name} ({', '.join(runtime)}); remove it")
        out[pname] = arg_type(v, ptype, key, w, dtypes)
    given = [p for p in runtime if p in out]
    if list(out) != given:
        v.fail(
            f"{w}.signature", f"list the arguments in the function's order: {', '.join(runtime)}"
        )
    return out


def arg_type(v: Validator, ptype: Any, key: str, w: str, dtypes: Mapping[str, Any]) -> str:
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


def annotated(kernel: Shipped) -> dict[str, str]:
    """Runtime arguments whose annotation is a Triton type."""
    out = {}
    for p in kernel.runtime:
        a = p.annotation
        if (a.startswith("*") and a[1:] in ELEMENT_TYPES) or a in SCALAR_TYPES:
            out[p.name] = a
    return out


def inferred_types(
    v: Validator,
    w: str,
    kernel: Shipped,
    wanted: Sequence[str],
    inputs: tuple[str, Inputs] | None,
    bindings: Sequence[Mapping[str, str]],
    sizes: Mapping[str, int],
    config: Mapping[str, Any],
    small: Mapping[str, int] | None = None,
) -> Example:
    """Types of the ``wanted`` arguments from ``inputs``' example values, the arguments it
    passed as None, and the first binding's example values."""
    if inputs is None:
        v.fail(f"{w}.signature", f"{kernel.name} takes {', '.join(wanted)}, whose types are "
               "not annotated: give the recipe's inputs (its example arguments, which the "
               f"types are read from) or list them under {w}.signature")  # fmt: skip
    ref, fn = inputs
    runtime = [p.name for p in kernel.runtime]
    per_binding: list[dict[str, str | None]] = []
    first: dict[str, Any] = {}
    for binding in bindings:
        args = _arguments(v, w, ref, fn, sizes, binding, config, runtime, kernel.name)
        per_binding.append({n: _type_of(a) for n, a in zip(runtime, args, strict=True)})
        first = first or dict(zip(runtime, args, strict=True))
    varying: set[str] = set()
    if small is not None:  # which integers change with the bucket (sizes of the call)
        other = dict(zip(runtime, _arguments(v, w, ref, fn, small, bindings[0], config,
                                             runtime, kernel.name), strict=True))  # fmt: skip
        varying = {n for n, x in first.items() if type(x) is int and other.get(n) != x}
    types: dict[str, str] = {}
    nones: set[str] = set()
    for name in wanted:
        seen = [b[name] for b in per_binding]
        if any(t is None for t in seen):
            nones.add(name)
            continue
        types[name] = _generalise(v, w, name, [str(t) for t in seen], bindings)
    return Example(types, frozenset(nones), first, frozenset(varying), dict(sizes))


def _arguments(
    v: Validator,
    w: str,
    ref: str,
    fn: Inputs,
    sizes: Mapping[str, int],
    binding: Mapping[str, str],
    config: Mapping[str, Any],
    runtime: list[str],
    kernel: str,
) -> list[Any]:
    args = _example(v, w, ref, fn, sizes, binding, config)
    if len(args) != len(runtime):
        v.fail(f"{w}.inputs", f"{ref} returned {len(args)} arguments; {kernel} takes "
               f"{len(runtime)} at run time ({', '.join(runtime)})")  # fmt: skip
    return args


@dataclass(frozen=True)
class Example:
    """What ``inputs`` told: types, arguments passed as None, the example values (the
    first dtype binding's, at the largest bucket, whose values are ``sizes``) and the
    integers that took another value at the smallest bucket (they follow the call's
    sizes)."""

    types: dict[str, str]
    nones: frozenset[str]
    values: dict[str, Any]
    varying: frozenset[str] = frozenset()
    sizes: Mapping[str, int] = field(default_factory=dict)

    def ints(self) -> dict[str, int]:
        return {n: x for n, x in self.values.items() if type(x) is int}

    def rank(self, name: str) -> int | None:
        shape = getattr(self.values.get(name), "shape", None)
        return None if shape is None else len(shape)


def _example(
    v: Validator,
    w: str,
    ref: str,
    fn: Inputs,
    sizes: Mapping[str, int],
    binding: Mapping[str, str],
    config: Mapping[str, Any],
) -> list[Any]:
    try:
        import torch  # noqa: F401 - only to say what is missing
    except ImportError:
        v.fail(f"{w}.signature", "inferring argument types from inputs needs PyTorch (the CPU "
               "build is enough); install it, or list the types under signature")  # fmt: skip
    kwargs = accepted(fn, {"device": "meta", "config": dict(config)})
    try:
        args = on_meta(fn, sizes, binding, config)
    except Exception as exc:
        # Code that computes on the data (a routing's argsort, say) cannot run on meta
        # tensors: the CPU can run it, at the cost of real memory — so only for that
        # failure (torch names the meta device in it), not for any other.
        if "device" not in kwargs or "meta" not in str(exc).lower():
            v.fail(f"{w}.inputs", f"{ref}(sizes, dtypes) raised {type(exc).__name__}: {exc}; "
                   "the signature is read from its example arguments (let it take device=, "
                   "or list the types under signature)")  # fmt: skip
        try:
            args = fn(dict(sizes), dict(binding), **{**kwargs, "device": "cpu"})
        except Exception as exc2:
            v.fail(f"{w}.inputs", f"{ref}(sizes, dtypes, device=...) raised "
                   f"{type(exc).__name__}: {exc} on 'meta' and {type(exc2).__name__}: {exc2} "
                   "on 'cpu'; the signature is read from its example arguments (or list the "
                   "types under signature)")  # fmt: skip
    if not isinstance(args, list | tuple):
        v.fail(f"{w}.inputs", f"{ref} returned {type(args).__name__}; return the runtime "
               "arguments as a list")  # fmt: skip
    return list(args)


def _type_of(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if I32[0] <= value <= I32[1] else "i64"
    if isinstance(value, float):
        return "fp32"
    if is_host_descriptor(value):
        return _type_of(value.base)
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "data_ptr"):
        ours = element_type(dtype)
        if ours is not None:
            return "*" + ours
    return f"?{type(value).__name__}"


def _generalise(
    v: Validator, w: str, name: str, seen: list[str], bindings: Sequence[Mapping[str, str]]
) -> str:
    key = f"{w}.signature.{name}"
    bad = next((t for t in seen if t.startswith("?")), None)
    if bad is not None:
        v.fail(key, f"inputs passes a {bad[1:]} for {name}, which is no tensor, int, float, "
               "bool or None; give its type here")  # fmt: skip
    if all(t.startswith("*") for t in seen):
        for var in bindings[0]:
            if all(t[1:] == b[var] for t, b in zip(seen, bindings, strict=True)):
                return f"*{var}"
    if len(set(seen)) == 1:
        return seen[0]
    v.fail(key, f"inputs gives {name} the types {', '.join(seen)} across the dtype bindings, "
           "following no dtype variable; give its type here")  # fmt: skip


def inputs_function(
    v: Validator, key: str, ref: str | None, root: Path
) -> tuple[str, Inputs] | None:
    """The recipe's ``inputs`` function, imported (it builds the example arguments)."""
    if ref is None:
        return None
    file, _, name = ref.rpartition(":")
    fn = getattr(recipe_module(v, key, root, file), name, None)
    if not callable(fn):
        v.fail(key, f"{file} defines no function {name!r}")
    return ref, fn


def recipe_module(v: Validator, key: str, root: Path, file: str) -> ModuleType:
    """A Python file a recipe names (relative to its folder), imported; an import that
    fails is refused at ``key``."""
    try:
        return load_module((root / file).resolve())
    except KernelImportError as exc:
        v.fail(key, str(exc))
    except Exception as exc:
        v.fail(key, import_failure(file, exc))

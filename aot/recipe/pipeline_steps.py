"""The steps of a ``[[pipeline]]``: each a kernel call, checked against the kernel's
``shapes``, ``strides``, ``writes`` and dtypes at every bucket combination, with the
integer arguments read off the tensors where the kernel's shapes name them bare."""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Mapping
from typing import Any

from loader.args import INT_RANGES
from loader.expr import Expr, parse
from loader.manifest import INT_TYPES, PipelineStep

from .kernel import KernelRecipe
from .validate import Validator, show, sorted_names

STEP_KEYS = ("kernel", "args", "when")
# How a step touches a tensor: (recipe key, tensor, whether it writes it)
Access = tuple[str, str, bool]


class Declared:
    """A tensor as declared: its shape parsed, and its row-major, contiguous strides as
    expressions of the same dimensions."""

    def __init__(self, role: str, dtype: str, shape: tuple[Expr, ...]):
        self.role, self.dtype, self.shape = role, dtype, shape
        strides = []
        for i in range(len(shape)):
            rest = shape[i + 1 :]
            if all(not e.names for e in rest):
                size = 1
                for e in rest:
                    size *= e.evaluate({})
                strides.append(parse(str(size)))
            else:
                strides.append(parse(" * ".join(f"({e.text})" for e in rest)))
        self.strides = tuple(strides)


class Flow:
    """Which tensors have been written so far, to catch reads of unwritten scratch; ``at``
    names the bucket when steps run at some buckets only (``when``), checked one by one."""

    def __init__(self, v: Validator, w: str, tensors: Mapping[str, Declared], at: str = ""):
        self.v, self.w, self.tensors, self.at = v, w, tensors, at
        self.written: set[str] = set()

    def access(self, key: str, tensor: str, writes: bool) -> None:
        t = self.tensors[tensor]
        if writes:
            if t.role in ("input", "weight"):
                self.v.fail(key, f"writes {tensor!r}, a pipeline {t.role}; inputs and weights "
                            "are read-only: write a scratch or output tensor")  # fmt: skip
            self.written.add(tensor)
        elif t.role in ("scratch", "output") and tensor not in self.written:
            self.v.fail(key, f"reads {tensor!r} ({t.role}) before any step writes it{self.at}")

    def finish(self) -> None:
        for name, t in self.tensors.items():
            if t.role == "output" and name not in self.written:
                self.v.fail(f"{self.w}.tensors.{name}", f"an output no step writes{self.at}")


def check_flow(
    v: Validator,
    w: str,
    tensors: Mapping[str, Declared],
    buckets: Mapping[str, tuple[int, ...]],
    steps: list[tuple[Expr | None, list[Access]]],
) -> None:
    """Reads before writes, and every output written: once, or at every bucket when some
    steps have ``when``; and every tensor used by some step."""
    conditional = any(when is not None for when, _ in steps)
    used = {t for _, accesses in steps for _, t, _ in accesses}
    for i, env in enumerate(bucket_envs(buckets) if conditional else [{}]):
        at = " at " + ", ".join(f"{d}={x}" for d, x in env.items()) if env else ""
        flow = Flow(v, w, tensors, at)
        for when, accesses in steps:
            if when is None or when.evaluate(env):
                for key, tensor, writes in accesses:
                    flow.access(key, tensor, writes)
        unused = [name for name in tensors if name not in used] if i == 0 else []
        if unused:
            v.fail(f"{w}.tensors.{unused[0]}", "no step uses it; remove it")
        flow.finish()


def bucket_envs(buckets: Mapping[str, tuple[int, ...]]) -> list[dict[str, int]]:
    """Every bucket combination, as dimension -> upper bound."""
    return [dict(zip(buckets, c, strict=True)) for c in itertools.product(*buckets.values())]


def check_step(
    v: Validator,
    s: Mapping[str, Any],
    sw: str,
    kernels: Mapping[str, KernelRecipe],
    tensors: Mapping[str, Declared],
    buckets: Mapping[str, tuple[int, ...]],
) -> tuple[PipelineStep, Expr | None, list[Access]]:
    """The step, its condition (``when``), and how it touches each tensor."""
    v.keys(s, STEP_KEYS, sw)
    kname = v.string(s, "kernel", sw)
    kr = kernels.get(kname)
    if kr is None:
        close = difflib.get_close_matches(kname, list(kernels), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the recipe has {', '.join(kernels)}"
        v.fail(f"{sw}.kernel", f"no kernel named {kname!r}; {hint}")
    sw = f"{sw} ({kname})"
    args = v.table(s, "args", sw)
    sig = kr.signature
    if kr.host:
        v.fail(f"{sw}.kernel", f"{kname} has host values ({', '.join(kr.host)}), which a "
               "service prepares its data for call by call: no step can use it")  # fmt: skip
    for a in args:
        if a not in sig and a not in kr.call:
            known = [*sig, *kr.call]
            close = difflib.get_close_matches(a, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"arguments: {', '.join(known)}"
            v.fail(f"{sw}.args.{a}", f"{kname} has no argument {a!r}; {hint}")
    when = _when(v, s, sw, buckets)
    pointers = {p: _pointer(v, sw, p, args, kr, tensors) for p in sig if sig[p].startswith("*")}
    bound = _bind(v, sw, kr, args, pointers, tensors, set(buckets))
    _check_shapes(v, sw, kr, pointers, bound, tensors, buckets, when)
    _check_dtypes(v, sw, kr, pointers, tensors)
    accesses = [(f"{sw}.args.{p}", t, p in kr.writes) for p, t in pointers.items()]
    out: list[str | float] = []
    for p, ptype in sig.items():
        if p in pointers:
            out.append(pointers[p])
        elif p in bound:
            out.append(bound[p].text)
        else:
            out.append(_number(v, args.get(p), f"{sw}.args.{p}", p, ptype))
    out.extend(e.text for e in _call_values(v, sw, kr, args, pointers, tensors, set(buckets)))
    return PipelineStep(kname, tuple(out), None if when is None else when.text), when, accesses


def _when(
    v: Validator, s: Mapping[str, Any], sw: str, buckets: Mapping[str, tuple[int, ...]]
) -> Expr | None:
    """The step's condition: a predicate of the pipeline's dimensions, true at some bucket
    (the step runs at the buckets where it holds)."""
    if "when" not in s:
        return None
    key = f"{sw}.when"
    if not isinstance(s["when"], str):
        v.fail(key, f'{show(s["when"])}: give a condition of the dimensions, e.g. "T <= 4"')
    when = v.parse_expr(s["when"], key, predicate=True)
    unknown = when.names - set(buckets)
    if unknown:
        v.fail(key, f"unknown name(s) {sorted_names(unknown)}; a step's condition reads the "
               f"pipeline's dimensions {sorted_names(buckets)}")  # fmt: skip
    if not any(when.evaluate(env) for env in bucket_envs(buckets)):
        v.fail(key, f"{when.text!r} holds at no bucket: the step would never run")
    return when


def _int_arg(v: Validator, raw: Any, key: str, dims: set[str]) -> Expr:
    """An integer argument or call value given in a step's args: a number or an
    expression of the pipeline's dimensions."""
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        v.fail(key, f"{raw!r}: give an integer or an expression of {sorted_names(dims)}")
    hint = f"expressions read the pipeline's dimensions {sorted_names(dims)}"
    return v.expr(raw, key, dims, hint)


def _call_values(
    v: Validator,
    sw: str,
    kr: KernelRecipe,
    args: Mapping[str, Any],
    pointers: Mapping[str, str],
    tensors: Mapping[str, Declared],
    dims: set[str],
) -> list[Expr]:
    """Each call value of the kernel (its launch values that are no argument), in the
    order the bundle lists them, as an expression of the pipeline's dimensions: given in
    ``args``, or the dimension (or its stride: the pipeline's tensors are row-major and
    dense) of the tensor its ``shape(ARG, DIM)`` (``stride(ARG, DIM)``) reads."""
    out = []
    for name, cv in kr.call.items():
        key = f"{sw}.args.{name}"
        if name in args:
            out.append(_int_arg(v, args[name], key, dims))
            continue
        if cv.arg is None:
            v.fail(key, f"missing: {name} is a call value of {kr.name} (passed by keyword); give "
                   f"{name} = ... in args")  # fmt: skip
        t = tensors[pointers[cv.arg]]
        if cv.dim >= len(t.shape):
            v.fail(key, f"{name} = {cv.text}, but {pointers[cv.arg]!r} has {len(t.shape)} "
                   f"dimensions; give {name} = ... in args")  # fmt: skip
        out.append((t.strides if cv.of == "stride" else t.shape)[cv.dim])
    return out


def _number(v: Validator, value: Any, key: str, p: str, ptype: str) -> float:
    """A float argument's value: finite, since the manifest stores it as JSON."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        v.fail(key, f"give {p} ({ptype}) a number, e.g. {p} = 1e-5")
    number = float(value) if abs(value) < 2**1023 else math.inf
    if not math.isfinite(number):
        v.fail(key, f"{show(value)}: give {p} ({ptype}) a finite number")
    return number


def _pointer(
    v: Validator,
    sw: str,
    p: str,
    args: Mapping[str, Any],
    kr: KernelRecipe,
    tensors: Mapping[str, Declared],
) -> str:
    key = f"{sw}.args.{p}"
    if p not in kr.shapes:
        v.fail(key, f"[[kernel]] {kr.name} declares no shape for {p}; add shapes.{p} = [...] "
               "to it so that pipelines using it can be checked")  # fmt: skip
    name = args.get(p)
    if name is None:
        v.fail(key, f"missing; name the tensor {p} points to (one of {', '.join(tensors)})")
    if not isinstance(name, str) or name not in tensors:
        close = difflib.get_close_matches(str(name), list(tensors), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"tensors: {', '.join(tensors)}"
        v.fail(key, f"{name!r} is not a tensor of the pipeline; {hint}")
    return name


def _bare(e: Expr | None) -> str | None:
    """The name, if the expression is nothing but one name."""
    if e is None:  # "*": any size
        return None
    return e.text.strip() if len(e.names) == 1 and e.text.strip() in e.names else None


def _bind(
    v: Validator,
    sw: str,
    kr: KernelRecipe,
    args: Mapping[str, Any],
    pointers: Mapping[str, str],
    tensors: Mapping[str, Declared],
    dims: set[str],
) -> dict[str, Expr]:
    """Every integer argument as an expression of the pipeline's dimensions: given in
    ``args``, or read off a tensor where the kernel's shapes or strides name it bare."""
    bound: dict[str, Expr] = {}
    ints = [p for p, t in kr.signature.items() if t in INT_TYPES]
    for p in ints:
        if p in args:
            bound[p] = _int_arg(v, args[p], f"{sw}.args.{p}", dims)
    for p, tname in pointers.items():
        t = tensors[tname]
        declared = kr.shapes[p]
        if len(declared) != len(t.shape):
            v.fail(f"{sw}.args.{p}", f"{tname!r} has {len(t.shape)} dimensions; {kr.name} "
                   f"reads {p} with {len(declared)}")  # fmt: skip
        for mine, theirs in zip(declared, t.shape, strict=True):
            name = _bare(mine)
            if name is not None and name not in bound:
                bound[name] = theirs
        for mine, theirs in zip(kr.strides.get(p, ()), t.strides, strict=False):
            name = _bare(mine)
            if name is not None and name not in bound:
                bound[name] = theirs
    missing = [p for p in ints if p not in bound]
    if missing:
        v.fail(f"{sw}.args", f"{', '.join(missing)} cannot be read off the tensors' shapes; "
               f"give {missing[0]} = ... in args")  # fmt: skip
    return bound


def _check_shapes(
    v: Validator,
    sw: str,
    kr: KernelRecipe,
    pointers: Mapping[str, str],
    bound: Mapping[str, Expr],
    tensors: Mapping[str, Declared],
    buckets: Mapping[str, tuple[int, ...]],
    when: Expr | None,
) -> None:
    """At every bucket where the step runs: each pointer's tensor has the shape and strides
    the kernel reads, and every integer argument fits its type."""
    for env in bucket_envs(buckets):
        if when is None or when.evaluate(env):
            _check_at(v, sw, kr, pointers, bound, tensors, env)


def _check_at(
    v: Validator,
    sw: str,
    kr: KernelRecipe,
    pointers: Mapping[str, str],
    bound: Mapping[str, Expr],
    tensors: Mapping[str, Declared],
    env: Mapping[str, int],
) -> None:
    at = ", ".join(f"{d}={x}" for d, x in env.items())

    def value(e: Expr, values: Mapping[str, int], key: str, what: str = "") -> int:
        try:
            return e.evaluate(values)
        except ZeroDivisionError:
            v.fail(key, f"{what}{e.text!r} divides by zero at {at}; make every divisor "
                   "positive at every bucket")  # fmt: skip

    kv = {p: value(e, env, f"{sw}.args.{p}") for p, e in bound.items()}
    for p, x in kv.items():
        lo, hi = INT_RANGES[kr.signature[p]]
        if not lo <= x <= hi:
            v.fail(f"{sw}.args.{p}", f"{x} at {at} does not fit in {kr.signature[p]}")
    for p, tname in pointers.items():
        t = tensors[tname]
        key = f"{sw}.args.{p}"
        have = [value(e, env, key, f"{tname!r}'s shape: ") for e in t.shape]
        if any(x < 0 for x in have):
            v.fail(key, f"{tname!r} has a negative size {have} at {at}")
        want = [h if e is None else value(e, kv, f"[[kernel]] {kr.name}.shapes.{p}")
                for e, h in zip(kr.shapes[p], have, strict=True)]  # fmt: skip
        if have != want:
            v.fail(key, f"{tname!r} has shape {have} at {at}, but {kr.name} reads {p} as "
                   f"{_show(kr.shapes[p])} = {want} with these arguments")  # fmt: skip
        if p in kr.strides:
            have_s = [value(e, env, key, f"{tname!r}'s strides: ") for e in t.strides]
            want_s = [h if e is None else value(e, kv, f"[[kernel]] {kr.name}.strides.{p}")
                      for e, h in zip(kr.strides[p], have_s, strict=True)]  # fmt: skip
            if have_s != want_s:
                v.fail(key, f"{tname!r} is row-major with strides {have_s} at {at}, but "
                       f"{kr.name} is given strides {want_s} for {p} "
                       f"({_show(kr.strides[p])})")  # fmt: skip


def _check_dtypes(
    v: Validator,
    sw: str,
    kr: KernelRecipe,
    pointers: Mapping[str, str],
    tensors: Mapping[str, Declared],
) -> None:
    binding: dict[str, tuple[str, str]] = {}  # dtype variable -> (dtype, from which param)
    for p, tname in pointers.items():
        elem = kr.signature[p][1:]
        dtype = tensors[tname].dtype
        if elem in kr.dtypes:
            if dtype not in kr.dtypes[elem]:
                v.fail(f"{sw}.args.{p}", f"{tname!r} is {dtype}; {kr.name} is built for {elem} "
                       f"in {list(kr.dtypes[elem])}: add {dtype} to its dtypes")  # fmt: skip
            seen = binding.setdefault(elem, (dtype, p))
            if seen[0] != dtype:
                v.fail(f"{sw}.args.{p}", f"{tname!r} is {dtype} but {seen[1]} is {seen[0]}; "
                       f"both are {elem} in {kr.name}")  # fmt: skip
        elif dtype != elem:
            v.fail(f"{sw}.args.{p}", f"{tname!r} is {dtype}; {kr.name} takes {elem} for {p}")


def _show(exprs: tuple[Expr | None, ...]) -> str:
    return "[" + ", ".join("*" if e is None else e.text for e in exprs) + "]"

"""The ``[[pipeline]]`` table, parsed and checked against the recipe's kernels.

A pipeline is an ordered list of kernel calls over named, row-major tensors whose shapes
are expressions of the pipeline's bucket dimensions. The loader captures it as one CUDA
graph per bucket (loader/pipeline.py), so every mistake must be found here, at build
time, where it can be named: an unknown kernel or tensor, a missing argument, a tensor
whose shape or dtype disagrees with what the kernel reads (from the kernel's ``shapes``,
``strides`` and ``writes``), a scratch tensor read before any step writes it, an input
written to. Integer arguments a kernel's declared shapes and strides determine (``M``,
``K``, ``stride_am``, ...) are inferred from the tensors and need not be written.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping
from typing import Any

from loader.args import INT_RANGES
from loader.expr import Expr, parse
from loader.manifest import ELEMENT_TYPES, INT_TYPES, ROLES, PipelineSpec, PipelineStep
from loader.manifest import PipelineTensor as Tensor

from .kernel import KernelRecipe
from .validate import IDENT, Validator, show, sorted_names

PIPELINE_KEYS = ("name", "buckets", "tensors", "step")
TENSOR_KEYS = ("role", "dtype", "shape")
STEP_KEYS = ("kernel", "args")
# Every bucket combination is checked; past this many, a pipeline is too big to check.
MAX_COMBINATIONS = 4096
MAX_RANK = 16  # dimensions of a tensor (a contiguous stride multiplies all the later ones)


def parse_pipelines(
    v: Validator, raw: Any, kernels: Mapping[str, KernelRecipe]
) -> tuple[PipelineSpec, ...]:
    """Every ``[[pipeline]]`` table, checked against the recipe's (already parsed) kernels."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        v.fail("[[pipeline]]", "must be an array of tables: write [[pipeline]]")
    out: list[PipelineSpec] = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict):
            v.fail(f"[[pipeline]] #{i + 1}", "must be a table")
        spec = check_pipeline(v, p, i, kernels)
        if any(q.name == spec.name for q in out):
            v.fail(f"[[pipeline]] {spec.name}.name", "duplicate pipeline name")
        out.append(spec)
    return tuple(out)


def check_pipeline(
    v: Validator, p: Mapping[str, Any], index: int, kernels: Mapping[str, KernelRecipe]
) -> PipelineSpec:
    raw_name = p.get("name")
    if not isinstance(raw_name, str) or not IDENT.match(raw_name):
        v.fail(f"[[pipeline]] #{index + 1}.name", f"missing or invalid ({raw_name!r}); give "
               "each pipeline an identifier name")  # fmt: skip
    w = f"[[pipeline]] {raw_name}"
    v.keys(p, PIPELINE_KEYS, w)
    buckets = _buckets(v, p, w)
    tensors = _tensors(v, p, w, buckets)
    steps_raw = p.get("step")
    if not isinstance(steps_raw, list) or not steps_raw:
        v.fail(f"{w}.step", "the pipeline has no steps; add [[pipeline.step]] tables")
    flow = _Flow(v, w, tensors)
    steps = []
    for j, s in enumerate(steps_raw):
        if not isinstance(s, dict):
            v.fail(f"{w}.step[{j}]", "must be a table with kernel and args")
        steps.append(_step(v, s, f"{w}.step[{j}]", kernels, tensors, buckets, flow))
    flow.finish()
    return PipelineSpec(
        name=str(raw_name),
        dims=tuple(buckets),
        buckets=tuple(buckets.values()),
        tensors=tuple(
            Tensor(n, t.dtype, tuple(e.text for e in t.shape), t.role) for n, t in tensors.items()
        ),
        steps=tuple(steps),
    )


class _T:
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


def _buckets(v: Validator, p: Mapping[str, Any], w: str) -> dict[str, tuple[int, ...]]:
    raw = v.table(p, "buckets", w, required=True)
    if not raw:
        v.fail(f"{w}.buckets", "give the bucket dimensions, e.g. buckets = { M = [1, 16, 128] }")
    out: dict[str, tuple[int, ...]] = {}
    for dim, bounds in raw.items():
        key = f"{w}.buckets.{dim}"
        if not IDENT.match(dim):
            v.fail(key, "a dimension must be an identifier")
        out[dim] = v.bounds(bounds, key)
    combos = 1
    for b in out.values():
        combos *= len(b)
    if combos > MAX_COMBINATIONS:
        v.fail(f"{w}.buckets", f"{combos} bucket combinations; at most {MAX_COMBINATIONS}")
    return out


def _tensors(
    v: Validator, p: Mapping[str, Any], w: str, buckets: Mapping[str, tuple[int, ...]]
) -> dict[str, _T]:
    raw = v.table(p, "tensors", w, required=True)
    dims = set(buckets)
    out: dict[str, _T] = {}
    for name, t in raw.items():
        key = f"{w}.tensors.{name}"
        if not IDENT.match(name):
            v.fail(key, "a tensor name must be an identifier")
        if not isinstance(t, dict):
            v.fail(key, 'must be a table: { role = "input", dtype = "bf16", shape = ["M", 4096] }')
        v.keys(t, TENSOR_KEYS, key)
        role = v.string(t, "role", key)
        if role not in ROLES:
            v.fail(f"{key}.role", f"{role!r}: use one of {', '.join(ROLES)}")
        dtype = v.string(t, "dtype", key)
        if dtype not in ELEMENT_TYPES:
            v.fail(f"{key}.dtype", f"{dtype!r} is not an element type; use one of "
                   f"{sorted_names(ELEMENT_TYPES)}")  # fmt: skip
        shape_raw = t.get("shape")
        if isinstance(shape_raw, list) and len(shape_raw) > MAX_RANK:
            v.fail(f"{key}.shape", f"has {len(shape_raw)} dimensions; at most {MAX_RANK}")
        if not isinstance(shape_raw, list) or not shape_raw:
            v.fail(f"{key}.shape", 'must be a non-empty list, e.g. ["M", 4096]')
        shape: list[Expr] = []
        for item in shape_raw:
            if isinstance(item, bool) or not isinstance(item, int | str):
                v.fail(f"{key}.shape", f"{item!r}: use integers and dimension names")
            hint = f"the pipeline's dimensions are {sorted_names(dims)}"
            shape.append(v.expr(item, f"{key}.shape", dims, hint))
        _role_shape(v, f"{key}.shape", role, shape, dims)
        try:
            out[name] = _T(role, dtype, tuple(shape))
        except ZeroDivisionError:
            v.fail(f"{key}.shape", f"{show(shape_raw)} divides by zero")
        except ValueError:  # a product of over 4300 digits
            v.fail(f"{key}.shape", f"{show(shape_raw)} is too large")
    if not out:
        v.fail(f"{w}.tensors", "declares no tensors")
    for dim in buckets:
        if not any(t.role == "input" and t.shape[0].text == dim for t in out.values()):
            v.fail(f"{w}.buckets.{dim}", f"no input tensor has {dim} as its first dimension, "
                   "so a call could not tell its size; make it the leading dimension of an "
                   "input")  # fmt: skip
    return out


def _role_shape(v: Validator, key: str, role: str, shape: list[Expr], dims: set[str]) -> None:
    """Inputs and outputs are padded and sliced along their first dimension only, so only
    that one may be a bucket dimension; weights are fixed; scratch may be anything."""
    if role == "scratch":
        return
    if role == "weight" and any(e.names for e in shape):
        v.fail(key, "a weight's shape must be fixed numbers (it is bound once, at load)")
    for i, e in enumerate(shape):
        if not e.names:
            continue
        if i > 0 or e.text not in dims:
            v.fail(key, f"{e.text!r}: an {role}'s only variable dimension is its first, and "
                   "it must be a bare dimension name (it is padded up to the bucket and "
                   "sliced back)")  # fmt: skip


class _Flow:
    """Which tensors have been written so far, to catch reads of unwritten scratch."""

    def __init__(self, v: Validator, w: str, tensors: Mapping[str, _T]):
        self.v, self.w, self.tensors = v, w, tensors
        self.written: set[str] = set()
        self.used: set[str] = set()

    def access(self, key: str, tensor: str, writes: bool) -> None:
        t = self.tensors[tensor]
        self.used.add(tensor)
        if writes:
            if t.role in ("input", "weight"):
                self.v.fail(key, f"writes {tensor!r}, a pipeline {t.role}; inputs and weights "
                            "are read-only: write a scratch or output tensor")  # fmt: skip
            self.written.add(tensor)
        elif t.role in ("scratch", "output") and tensor not in self.written:
            self.v.fail(key, f"reads {tensor!r} ({t.role}) before any step writes it")

    def finish(self) -> None:
        for name, t in self.tensors.items():
            if name not in self.used:
                self.v.fail(f"{self.w}.tensors.{name}", "no step uses it; remove it")
            if t.role == "output" and name not in self.written:
                self.v.fail(f"{self.w}.tensors.{name}", "an output no step writes")


def _step(
    v: Validator,
    s: Mapping[str, Any],
    sw: str,
    kernels: Mapping[str, KernelRecipe],
    tensors: Mapping[str, _T],
    buckets: Mapping[str, tuple[int, ...]],
    flow: _Flow,
) -> PipelineStep:
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
    for a in args:
        if a not in sig:
            close = difflib.get_close_matches(a, list(sig), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"arguments: {', '.join(sig)}"
            v.fail(f"{sw}.args.{a}", f"{kname} has no argument {a!r}; {hint}")
    pointers = {p: _pointer(v, sw, p, args, kr, tensors) for p in sig if sig[p].startswith("*")}
    bound = _bind(v, sw, kr, args, pointers, tensors, set(buckets))
    _check_shapes(v, sw, kr, pointers, bound, tensors, buckets)
    _check_dtypes(v, sw, kr, pointers, tensors)
    for p, t in pointers.items():
        flow.access(f"{sw}.args.{p}", t, p in kr.writes)
    out: list[str | float] = []
    for p, ptype in sig.items():
        if p in pointers:
            out.append(pointers[p])
        elif p in bound:
            out.append(bound[p].text)
        else:
            value = args.get(p)
            if isinstance(value, bool) or not isinstance(value, int | float):
                v.fail(f"{sw}.args.{p}", f"give {p} ({ptype}) a number, e.g. {p} = 1e-5")
            out.append(float(value))
    return PipelineStep(kname, tuple(out))


def _pointer(
    v: Validator,
    sw: str,
    p: str,
    args: Mapping[str, Any],
    kr: KernelRecipe,
    tensors: Mapping[str, _T],
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


def _bare(e: Expr) -> str | None:
    """The name, if the expression is nothing but one name."""
    return e.text.strip() if len(e.names) == 1 and e.text.strip() in e.names else None


def _bind(
    v: Validator,
    sw: str,
    kr: KernelRecipe,
    args: Mapping[str, Any],
    pointers: Mapping[str, str],
    tensors: Mapping[str, _T],
    dims: set[str],
) -> dict[str, Expr]:
    """Every integer argument as an expression of the pipeline's dimensions: given in
    ``args``, or read off a tensor where the kernel's shapes or strides name it bare."""
    bound: dict[str, Expr] = {}
    ints = [p for p, t in kr.signature.items() if t in INT_TYPES]
    for p in ints:
        if p in args:
            raw = args[p]
            if isinstance(raw, bool) or not isinstance(raw, int | str):
                v.fail(f"{sw}.args.{p}", f"{raw!r}: give an integer or an expression of "
                       f"{sorted_names(dims)}")  # fmt: skip
            hint = f"expressions read the pipeline's dimensions {sorted_names(dims)}"
            bound[p] = v.expr(raw, f"{sw}.args.{p}", dims, hint)
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
    tensors: Mapping[str, _T],
    buckets: Mapping[str, tuple[int, ...]],
) -> None:
    """At every bucket: each pointer's tensor has the shape and strides the kernel reads,
    and every integer argument fits its type."""
    dims = list(buckets)
    for combo in itertools.product(*buckets.values()):
        _check_at(v, sw, kr, pointers, bound, tensors, dict(zip(dims, combo, strict=True)))


def _check_at(
    v: Validator,
    sw: str,
    kr: KernelRecipe,
    pointers: Mapping[str, str],
    bound: Mapping[str, Expr],
    tensors: Mapping[str, _T],
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
        want = [value(e, kv, f"[[kernel]] {kr.name}.shapes.{p}") for e in kr.shapes[p]]
        if have != want:
            v.fail(key, f"{tname!r} has shape {have} at {at}, but {kr.name} reads {p} as "
                   f"{_show(kr.shapes[p])} = {want} with these arguments")  # fmt: skip
        if p in kr.strides:
            have_s = [value(e, env, key, f"{tname!r}'s strides: ") for e in t.strides]
            want_s = [value(e, kv, f"[[kernel]] {kr.name}.strides.{p}") for e in kr.strides[p]]
            if have_s != want_s:
                v.fail(key, f"{tname!r} is row-major with strides {have_s} at {at}, but "
                       f"{kr.name} is given strides {want_s} for {p} "
                       f"({_show(kr.strides[p])})")  # fmt: skip


def _check_dtypes(
    v: Validator, sw: str, kr: KernelRecipe, pointers: Mapping[str, str], tensors: Mapping[str, _T]
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


def _show(exprs: tuple[Expr, ...]) -> str:
    return "[" + ", ".join(e.text for e in exprs) + "]"

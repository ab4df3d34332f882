"""What the loader assumes of a kernel or pipeline record, checked once when it is decoded.

A manifest that decodes (loader/manifest.py) must be one the loader can open and call
without a KeyError, an ExprError or an IndexError deep inside: every name a launcher looks
up exists, every type it packs is one it knows, every grid parses and reads only what it
may, and every bucket has its choice. ``aotc verify`` therefore refuses what the loader
would trip over, and the loader reports it at open, as a BundleError naming the field.
"""

from __future__ import annotations

import itertools
import keyword
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .codec import DecodeError
from .expr import ExprError, parse

if TYPE_CHECKING:
    from .manifest import InstanceSpec, KernelSpec, Manifest, PipelineSpec, PipelineTensor

# More parameters than a kernel can take (CUDA passes at most 32 KiB of them; Triton's
# kernels take tens): each launcher compiles code over the whole list, so a bundle with
# thousands would take minutes to open.
MAX_PARAMS = 1024


def _quote(name: str) -> str:
    return '"' + name[:40].replace("\\", "\\\\").replace('"', '\\"') + '"'


# What a check (a recipe's constraint that reads call values) may read of the device.
CHECK_BUILTINS = ("NUM_SMS", "SMEM")
# A variant's launch options, which a check may read as it reads the variant's meta
# (``num_warps == 16 if BLOCK_SIZE >= 8192``: a library's host rule for its warps).
LAUNCH_VALUES = ("num_warps", "num_stages")


def check_kernel(k: KernelSpec) -> None:
    from .manifest import GRID_BUILTINS, INT_TYPES, check_bounds

    types = _params(k)
    call = _call_values(k, types)
    if len(set(k.host)) != len(k.host) or set(k.host) & (set(types) | call):
        raise DecodeError("host", "names a value twice, or a parameter or call value")
    ints = {n for n, t in types.items() if t in INT_TYPES} | call
    grid_reads = _reads(k.grid, "grid", predicate=False)
    for j, key in enumerate(k.bucket_keys):
        if key not in ints:
            raise DecodeError(f"bucket_keys[{j}]", f"{key!r} is not an integer parameter "
                              "or call value")  # fmt: skip
    try:
        check_bounds(k.bucket_keys, k.buckets)
    except ValueError as exc:
        raise DecodeError("buckets", str(exc)) from None
    derived = [d.name for d in k.derived]
    if len(set(derived)) != len(derived) or set(derived) & ints:
        raise DecodeError("derived", "names a value twice, or an integer parameter")
    reads = _reads(tuple(d.expr for d in k.derived), "derived", predicate=True)
    reads |= _reads(k.checks, "checks", predicate=True) - set(CHECK_BUILTINS + LAUNCH_VALUES)
    for j, name in enumerate(k.optional):  # a pointer, or a scalar passed as None
        if name not in types or name in k.bucket_keys or k.nullable.count(name) != 1:
            raise DecodeError(f"optional[{j}]", f"{name!r} is not a parameter, is a bucket "
                              "key, or is listed twice")  # fmt: skip
    for j, name in enumerate(k.always_none):
        if not types.get(name, "").startswith("*") or k.nullable.count(name) != 1:
            raise DecodeError(f"always_none[{j}]", f"{name!r} is not a pointer parameter, or "
                              "is listed twice")  # fmt: skip
    for j, name in enumerate(k.descriptors):
        if not types.get(name, "").startswith("*") or k.descriptors.count(name) != 1:
            raise DecodeError(f"descriptors[{j}]", f"{name!r} is not a pointer parameter, or "
                              "is listed twice")  # fmt: skip
    buckets = math.prod(len(b) for b in k.buckets)
    builtins = set(GRID_BUILTINS)
    free = {
        "the grid": grid_reads - ints - builtins,
            "a derived value or check": reads - set(types) - call - builtins - set(derived),
    }  # fmt: skip
    for i, inst in enumerate(k.instances):
        _instance(k, inst, f"instances[{i}]", types, free, buckets)


def _call_values(k: KernelSpec, types: Mapping[str, str]) -> set[str]:
    names: set[str] = set()
    for j, c in enumerate(k.call):
        if (
            not c.name.isidentifier()
            or keyword.iskeyword(c.name)
            or c.name in types
            or (c.name in names)
        ):
            raise DecodeError(f"call[{j}].name", f"{c.name!r} is not a new identifier")
        if c.arg is not None and c.stride_of is not None:
            raise DecodeError(f"call[{j}]", "reads both a shape (arg) and a stride (stride_of)")
        field = "arg" if c.stride_of is None else "stride_of"
        if c.tensor is not None and not types.get(c.tensor, "").startswith("*"):
            raise DecodeError(f"call[{j}].{field}", f"{c.tensor!r} is not a pointer parameter")
        names.add(c.name)
    return names


def _reads(texts: tuple[str, ...], field: str, *, predicate: bool) -> set[str]:
    reads: set[str] = set()
    for j, text in enumerate(texts):
        try:
            reads |= parse(text, predicate=predicate).names
        except ExprError as exc:
            raise DecodeError(f"{field}[{j}]", str(exc)) from None
    return reads


def _params(k: KernelSpec) -> dict[str, str]:
    """Parameter name -> type, after checking names and types."""
    from .manifest import ELEMENT_TYPES, PARAM_SCALAR_TYPES

    for var, options in k.dtype_vars.items():
        bad = [t for t in options if t not in ELEMENT_TYPES]
        if not options or bad:
            raise DecodeError(f"dtype_vars[{_quote(var)}]", "must list element types")
    if len(k.params) > MAX_PARAMS:
        raise DecodeError(
            "params", f"{len(k.params)} parameters; a kernel takes at most {MAX_PARAMS}"
        )
    types: dict[str, str] = {}
    for j, p in enumerate(k.params):
        at = f"params[{j}]"
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name in types:
            raise DecodeError(f"{at}.name", f"{p.name!r} is not a new identifier")
        elem = p.type[1:] if p.type.startswith("*") else None
        known = elem in ELEMENT_TYPES or elem in k.dtype_vars
        if not (known if elem is not None else p.type in PARAM_SCALAR_TYPES):
            raise DecodeError(
                f"{at}.type",
                f"{p.type!r} is not a parameter type this loader can pass; a pointer to an "
                f"element type or dtype variable, or one of {sorted(PARAM_SCALAR_TYPES)}",
            )
        types[p.name] = p.type
    return types


def _instance(
    k: KernelSpec,
    inst: InstanceSpec,
    at: str,
    types: Mapping[str, str],
    free: Mapping[str, set[str]],
    n: int,
) -> None:
    from .manifest import INT_TYPES

    options = k.binding_options()
    if set(inst.dtypes) != set(options) or any(t not in options[v] for v, t in inst.dtypes.items()):
        raise DecodeError(
            f"{at}.dtypes", f"must bind each of {sorted(options)} to one of its values"
        )
    if len(inst.choices) != n:
        raise DecodeError(f"{at}.choices", f"has {len(inst.choices)} entries for {n} buckets")
    for vid, v in inst.variants.items():
        where = f"{at}.variants[{_quote(vid)}]"
        if len(v.abi) > len(types):
            raise DecodeError(f"{where}.abi", "lists more names than the kernel has parameters")
        for j, name in enumerate(v.abi):
            if name not in types:
                raise DecodeError(f"{where}.abi[{j}]", f"{name!r} is not a parameter")
        if tuple(d.param for d in v.descriptors) != tuple(n for n in v.abi
                                                          if n in k.descriptors):  # fmt: skip
            raise DecodeError(f"{where}.descriptors", "must describe each descriptor "
                              "argument of the ABI once, in order")  # fmt: skip
        for name in v.assume:
            if name in k.descriptors:
                raise DecodeError(f"{where}.assume", f"{name!r} is a descriptor argument")
            t = types.get(name)
            if t is None or not (t.startswith("*") or t in INT_TYPES):
                raise DecodeError(
                    f"{where}.assume", f"{name!r} is not a pointer or integer parameter"
                )
        for what, names in free.items():
            unknown = sorted(names - set(v.meta))
            if unknown:
                raise DecodeError(
                    f"{where}.meta",
                    f"{what} reads {', '.join(unknown)}: neither an integer parameter, a call "
                    "value nor a meta-parameter of this variant",
                )
            bad = sorted(n for n in names if not isinstance(v.meta[n], int))
            if bad:
                raise DecodeError(f"{where}.meta", f"{what} reads {bad[0]}, which is not an "
                                  f"integer here ({v.meta[bad[0]]!r})")  # fmt: skip
        missing = [n for n in [d.name for d in k.derived] + list(k.host) if n not in v.meta]
        if missing:
            raise DecodeError(f"{where}.meta", f"has no value for {missing[0]}")


def _literal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def check_pipeline(p: PipelineSpec) -> None:
    names = [t.name for t in p.tensors]
    if len(set(names)) != len(names):
        raise ValueError("tensor names must be unique")
    led = set()
    for i, t in enumerate(p.tensors):
        at = f"tensors[{i}].shape"
        for s in t.shape:
            try:
                unknown = parse(s).names - set(p.dims)
            except ExprError as exc:
                raise DecodeError(at, str(exc)) from None
            if unknown:
                raise DecodeError(at, f"{s!r} reads {', '.join(sorted(unknown))}, not a dimension")
        if t.role in ("weight", "state") and not all(_literal(s) for s in t.shape):
            raise DecodeError(at, f"a {t.role}'s shape must be fixed sizes")
        if t.role in ("input", "output"):
            if not t.shape or not all(_literal(s) for s in t.shape[1:]):
                raise DecodeError(at, "must be a dimension or size, then fixed sizes")
            if t.shape[0] not in p.dims and not _literal(t.shape[0]):
                raise DecodeError(at, f"{t.shape[0]!r} is neither a dimension nor a size")
            if t.role == "input":
                led.add(t.shape[0])
        _check_pad(t, f"tensors[{i}].pad")
    missing = [d for d in p.dims if d not in led]
    if missing:
        raise ValueError(f"dimension {missing[0]!r} is the leading axis of no input")


def _check_pad(t: PipelineTensor, at: str) -> None:
    """An input's rows past a call's size, when it runs a larger bucket, hold its ``pad``
    (a slot of -1 that writes nothing, a context length of 0); None: earlier data. Only an
    input has one, and its dtype holds it."""
    if t.pad is None:
        return
    from .args import element_bytes

    if t.role != "input":
        raise DecodeError(at, f"a {t.role} has no pad value")
    try:
        element_bytes(t.dtype, t.pad)
    except ValueError as exc:
        raise DecodeError(at, str(exc)) from None


# The most device memory one pipeline tensor may need at a bucket (far beyond any GPU's).
MAX_TENSOR_BYTES = 1 << 40
# Pipelines with more buckets than this are not size-checked bucket by bucket at decode.
_MAX_CHECKED_BUCKETS = 4096


def check_pipeline_sizes(p: PipelineSpec) -> None:
    """Every tensor's size is a non-negative integer at every bucket, within reason: the
    loader computes them when it captures a bucket, and allocates that much."""
    from .args import ITEMSIZE

    if math.prod(len(b) for b in p.buckets) > _MAX_CHECKED_BUCKETS:
        raise ValueError(f"more than {_MAX_CHECKED_BUCKETS} buckets")
    shapes = [(i, t, [parse(s) for s in t.shape]) for i, t in enumerate(p.tensors)]
    for bounds in itertools.product(*p.buckets):
        env = dict(zip(p.dims, bounds, strict=True))
        for i, t, exprs in shapes:
            n = ITEMSIZE[t.dtype]
            try:
                for e in exprs:
                    n *= e.evaluate(env)
            except ArithmeticError as exc:
                raise DecodeError(f"tensors[{i}].shape", f"at {env}: {exc}") from None
            if not 0 <= n <= MAX_TENSOR_BYTES:
                raise DecodeError(f"tensors[{i}].shape", f"at {env}: {n} bytes")


def check_steps(m: Manifest) -> None:
    """Each pipeline step calls a kernel of the bundle with an argument per parameter of
    the kind it takes (a tensor for a pointer, an expression for an integer), then an
    expression per call value; a kernel with host values is no step."""
    from .manifest import INT_TYPES

    kernels = {k.name: k for k in m.kernels}
    for i, p in enumerate(m.pipelines):
        tensors = {t.name for t in p.tensors}
        for j, step in enumerate(p.steps):
            at = f"pipelines[{i}].steps[{j}]"
            k = kernels.get(step.kernel)
            if k is None or k.host or len(step.args) != len(k.params) + len(k.call):
                raise DecodeError(at, f"{step.kernel!r} is not a kernel of the bundle taking "
                                      f"{len(step.args)} arguments")  # fmt: skip
            for n, (param, arg) in enumerate(zip(k.params, step.args, strict=False)):
                pointer = param.type.startswith("*")
                if (pointer and arg not in tensors) or (
                    param.type in INT_TYPES and not isinstance(arg, str)
                ):
                    raise DecodeError(f"{at}.args[{n}]", f"{arg!r} cannot be {param.name}")
            for n, arg in enumerate(step.args[len(k.params) :], len(k.params)):
                if not isinstance(arg, str):
                    raise DecodeError(f"{at}.args[{n}]", f"{arg!r} cannot be a call value")
            if step.when is not None:
                try:
                    unknown = parse(step.when, predicate=True).names - set(p.dims)
                except ExprError as exc:
                    raise DecodeError(f"{at}.when", str(exc)) from None
                if unknown:
                    raise DecodeError(f"{at}.when", f"reads {sorted(unknown)}, not dimensions")


def check_ops(m: Manifest) -> None:
    """Each op's kernels are the bundle's, over one bucket grid, each taking a subset of
    the first one's parameters (same names, same types); its routes cover that grid."""
    kernels = {k.name: k for k in m.kernels}
    names = set(kernels) | {p.name for p in m.pipelines}
    for i, op in enumerate(m.ops):
        at = f"ops[{i}]"
        if op.name in names:
            raise DecodeError(f"{at}.name", f"{op.name!r} is also a kernel or pipeline")
        missing = [k for k in op.kernels if k not in kernels]
        if missing:
            raise DecodeError(f"{at}.kernels", f"{missing[0]!r} is not a kernel of the bundle")
        first = kernels[op.kernels[0]]
        params = {p.name: p.type for p in first.params}
        cells = math.prod(len(bounds) for bounds in first.buckets)
        for name in op.kernels[1:]:
            k = kernels[name]
            if (k.bucket_keys, k.buckets) != (first.bucket_keys, first.buckets) or any(
                params.get(p.name) != p.type for p in k.params
            ):
                raise DecodeError(f"{at}.kernels", f"{name!r} is not interchangeable with "
                                                   f"{first.name!r}")  # fmt: skip
        for j, r in enumerate(op.routes):
            if len(r.kernels) != cells:
                raise DecodeError(f"{at}.routes[{j}]", f"{len(r.kernels)} buckets, not {cells}")

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

from collections.abc import Mapping
from typing import Any

from loader.args import element_bytes
from loader.expr import Expr
from loader.manifest import ELEMENT_TYPES, ROLES, PipelineSpec
from loader.manifest import PipelineTensor as Tensor

from .kernel import KernelRecipe
from .pipeline_steps import Declared, check_flow, check_step
from .validate import IDENT, Validator, show, sorted_names

PIPELINE_KEYS = ("name", "buckets", "tensors", "step")
TENSOR_KEYS = ("role", "dtype", "shape", "pad")
# Every step is checked at every bucket combination; past these, a pipeline (or all of a
# recipe's together) is too big to check.
MAX_COMBINATIONS = 4096
MAX_CHECKS = 65536  # (bucket combination, step) pairs over all the recipe's pipelines
MAX_RANK = 16  # dimensions of a tensor (a contiguous stride multiplies all the later ones)


def parse_pipelines(
    v: Validator, raw: Any, kernels: Mapping[str, KernelRecipe]
) -> tuple[PipelineSpec, ...]:
    """Every ``[[pipeline]]`` table, checked against the recipe's (already parsed) kernels."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        v.fail("[[pipeline]]", "must be an array of tables: write [[pipeline]]")
    checks = sum(_checks(p) for p in raw)
    if checks > MAX_CHECKS:
        v.fail("[[pipeline]]", f"{checks:,} (bucket combination, step) pairs to check; at most "
               f"{MAX_CHECKS:,} in all: use fewer buckets or steps")  # fmt: skip
    out: list[PipelineSpec] = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict):
            v.fail(f"[[pipeline]] #{i + 1}", "must be a table")
        spec = check_pipeline(v, p, i, kernels)
        if any(q.name == spec.name for q in out):
            v.fail(f"[[pipeline]] {spec.name}.name", "duplicate pipeline name")
        out.append(spec)
    return tuple(out)


def _checks(p: Any) -> int:
    """How many (bucket combination, step) pairs checking ``p`` would take, read before
    anything is validated (what is malformed counts as 1 and fails its own check)."""
    if not isinstance(p, dict):
        return 0
    buckets, steps = p.get("buckets"), p.get("step")
    combos = 1
    for bounds in buckets.values() if isinstance(buckets, dict) else ():
        combos *= len(bounds) if isinstance(bounds, list) else 1
    return combos * (len(steps) if isinstance(steps, list) else 1)


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
    pads = _pads(v, p, w, tensors)
    steps_raw = p.get("step")
    if not isinstance(steps_raw, list) or not steps_raw:
        v.fail(f"{w}.step", "the pipeline has no steps; add [[pipeline.step]] tables")
    steps, flows = [], []
    for j, s in enumerate(steps_raw):
        if not isinstance(s, dict):
            v.fail(f"{w}.step[{j}]", "must be a table with kernel and args")
        step, when, accesses = check_step(v, s, f"{w}.step[{j}]", kernels, tensors, buckets)
        steps.append(step)
        flows.append((when, accesses))
    check_flow(v, w, tensors, buckets, flows)
    return PipelineSpec(
        name=str(raw_name),
        dims=tuple(buckets),
        buckets=tuple(buckets.values()),
        tensors=tuple(
            Tensor(n, t.dtype, tuple(e.text for e in t.shape), t.role, pads.get(n))
            for n, t in tensors.items()
        ),
        steps=tuple(steps),
    )


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
) -> dict[str, Declared]:
    raw = v.table(p, "tensors", w, required=True)
    dims = set(buckets)
    out: dict[str, Declared] = {}
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
        out[name] = _tensor(v, f"{key}.shape", role, dtype, t.get("shape"), dims)
    if not out:
        v.fail(f"{w}.tensors", "declares no tensors")
    for dim in buckets:
        if not any(t.role == "input" and t.shape[0].text == dim for t in out.values()):
            v.fail(f"{w}.buckets.{dim}", f"no input tensor has {dim} as its first dimension, "
                   "so a call could not tell its size; make it the leading dimension of an "
                   "input")  # fmt: skip
    return out


def _pads(
    v: Validator, p: Mapping[str, Any], w: str, tensors: Mapping[str, Declared]
) -> dict[str, float]:
    """Each input's ``pad``: the value its rows past a call's size hold in a larger bucket."""
    out: dict[str, float] = {}
    for name, t in p["tensors"].items():
        if "pad" not in t:
            continue
        key = f"{w}.tensors.{name}.pad"
        role, dtype, raw = tensors[name].role, tensors[name].dtype, t["pad"]
        if role != "input":
            v.fail(key, f"only an input is padded (rows past a call's size); {name!r} is a "
                   f"{role}: remove pad")  # fmt: skip
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            v.fail(key, f"{show(raw)}: give a number of {name}'s dtype ({dtype}), e.g. pad = -1")
        try:
            element_bytes(dtype, raw)
        except (ValueError, OverflowError):
            v.fail(key, f"{show(raw)} is not a {dtype} value; give one that {dtype} holds "
                   "exactly")  # fmt: skip
        out[name] = raw
    return out


def _tensor(v: Validator, key: str, role: str, dtype: str, raw: Any, dims: set[str]) -> Declared:
    """A tensor's shape: integers and expressions of the pipeline's dimensions."""
    if isinstance(raw, list) and len(raw) > MAX_RANK:
        v.fail(key, f"has {len(raw)} dimensions; at most {MAX_RANK}")
    if not isinstance(raw, list) or not raw:
        v.fail(key, 'must be a non-empty list, e.g. ["M", 4096]')
    shape: list[Expr] = []
    for item in raw:
        if isinstance(item, bool) or not isinstance(item, int | str):
            v.fail(key, f"{show(item)}: use integers and dimension names")
        hint = f"the pipeline's dimensions are {sorted_names(dims)}"
        shape.append(v.expr(item, key, dims, hint))
    _role_shape(v, key, role, shape, dims)
    try:
        return Declared(role, dtype, tuple(shape))
    except ZeroDivisionError:
        v.fail(key, f"{show(raw)} divides by zero")
    except ValueError:  # a product of over 4300 digits
        v.fail(key, f"{show(raw)} is too large")


def _role_shape(v: Validator, key: str, role: str, shape: list[Expr], dims: set[str]) -> None:
    """Inputs and outputs are padded and sliced along their first dimension only, so only
    that one may be a bucket dimension; weights are fixed; scratch may be anything."""
    if role == "scratch":
        return
    if role in ("weight", "state") and any(e.names for e in shape):
        v.fail(key, f"a {role}'s shape must be fixed numbers (it is bound once, at load)")
    for i, e in enumerate(shape):
        if not e.names:
            continue
        if i > 0 or e.text not in dims:
            v.fail(key, f"{e.text!r}: an {role}'s only variable dimension is its first, and "
                   "it must be a bare dimension name (it is padded up to the bucket and "
                   "sliced back)")  # fmt: skip

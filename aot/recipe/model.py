"""The ``[model]`` table: a PyTorch module compiled per bucket (built by aot/model/).

Parsed without importing torch: only names, shapes, buckets and choices are checked here;
the module itself is first imported by the build.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loader import manifest as mf

from ..dtypes import MODEL_TOLERANCE
from .validate import IDENT, Validator, show

MODEL_KEYS = (
    "name", "source", "kwargs", "dtype", "inputs", "buckets", "pad", "outputs", "mode",
    "options", "tolerance", "seed", "backend", "select",
)  # fmt: skip
# Recipe mode -> Inductor's own mode whose options are applied (torch._inductor
# list_mode_options). No "cudagraphs" variants: the loader captures the graph itself.
MODES = {"default": "default", "max-autotune": "max-autotune-no-cudagraphs"}
# [model].select: "fastest" times the ways to serve each bucket (aot/model/select.py) and
# serves the fastest; "compiled" always serves the artifact.
SELECT = ("fastest", "compiled")
# Relative error allowed against the float64 reference (max |out - ref| / max |ref|).


@dataclass(frozen=True)
class ModelRecipe:
    name: str
    source: Path  # absolute path of the Python file
    factory: str
    source_text: str  # "path:factory" as written
    kwargs: Mapping[str, Any]
    dtype: str
    inputs: tuple[mf.ModelInput, ...]
    dims: tuple[str, ...]
    buckets: tuple[tuple[int, ...], ...]
    pad: tuple[str, ...]
    outputs: tuple[tuple[str | int, ...], ...]
    modes: tuple[str, ...]  # MODES; each bucket is compiled in each (select picks)
    options: Mapping[str, Any]  # extra Inductor config patches, applied over each mode's
    tolerance: float
    seed: int
    backend: str = "aoti"  # loader.manifest.MODEL_BACKENDS; the recipe's default
    select: str = "fastest"  # SELECT

    @property
    def mode(self) -> str:
        """The recipe's modes as the report and the manifest name them: "max-autotune",
        "max-autotune+default"."""
        return "+".join(self.modes)

    def label(self, mode: str) -> str:
        """How labels name ``mode``'s artifact: by its mode only when there are several."""
        return mode if len(self.modes) > 1 else ""

    @property
    def bucket_grid(self) -> list[tuple[int, ...]]:
        """Every bucket, row-major over ``dims`` (the loader's flat_bucket order)."""
        return list(itertools.product(*self.buckets))


def parse_model(v: Validator, raw: Any, root: Path) -> ModelRecipe:
    w = "[model]"
    if not isinstance(raw, dict):
        v.fail(w, "must be a table: write [model]")
    v.keys(raw, MODEL_KEYS, w)
    name = raw.get("name", "model")
    if not isinstance(name, str) or not IDENT.match(name):
        v.fail(f"{w}.name", f"{show(name)} must be an identifier")
    source_text = v.string(raw, "source", w)
    source, factory = v.source(source_text, f"{w}.source", root)
    kwargs = v.table(raw, "kwargs", w)
    dtype = raw.get("dtype")
    if dtype not in mf.MODEL_DTYPES:
        v.fail(f"{w}.dtype", f"{show(dtype)}: use one of {', '.join(mf.MODEL_DTYPES)}")
    dims, buckets = _buckets(v, raw, w)
    inputs = _inputs(v, raw, w, str(dtype), dims)
    pad, outputs = _pad_outputs(v, raw, w, dims)
    modes = _modes(v, raw, w)
    options = v.table(raw, "options", w)
    tol = raw.get("tolerance", MODEL_TOLERANCE[str(dtype)])
    if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 < tol < 1:
        v.fail(f"{w}.tolerance", f"{show(tol)} must be a number between 0 and 1")
    seed = v.int_value(raw.get("seed", 0), f"{w}.seed", minimum=0)
    backend, select = _serving(v, raw, w, modes)
    return ModelRecipe(
        name=name,
        source=source,
        factory=factory,
        source_text=source_text,
        kwargs=dict(kwargs),
        dtype=str(dtype),
        inputs=inputs,
        dims=dims,
        buckets=buckets,
        pad=pad,
        outputs=outputs,
        modes=modes,
        options=dict(options),
        tolerance=float(tol),
        seed=seed,
        backend=backend,
        select=select,
    )


def _buckets(
    v: Validator, raw: Mapping[str, Any], w: str
) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    buckets_raw = v.table(raw, "buckets", w)
    dims = tuple(buckets_raw)
    for d in dims:
        if not IDENT.match(d):
            v.fail(f"{w}.buckets.{d}", "a dimension name must be an identifier")
    return dims, tuple(v.bounds(b, f"{w}.buckets.{d}") for d, b in buckets_raw.items())


def _shape(
    v: Validator, raw: Any, key: str, w: str, dims: tuple[str, ...]
) -> tuple[str | int, ...]:
    """Sizes and dimension names, e.g. ["batch", "seq", 1024]."""
    if not isinstance(raw, list) or not raw:
        v.fail(key, "must be a non-empty list of sizes and dimension names, e.g. "
               '["batch", "seq", 1024]')  # fmt: skip
    out: list[str | int] = []
    for item in raw:
        if isinstance(item, str):
            if item not in dims:
                hint = f"declare it under {w}.buckets" if dims else f"add {w}.buckets"
                v.fail(key, f"dimension {show(item)} has no buckets; {hint}")
            out.append(item)
        else:
            out.append(v.int_value(item, key, minimum=1))
    return tuple(out)


def _inputs(
    v: Validator, raw: Mapping[str, Any], w: str, dtype: str, dims: tuple[str, ...]
) -> tuple[mf.ModelInput, ...]:
    """forward's tensor arguments, in order, each with its shape (and dtype if not the
    model's)."""
    inputs_raw = v.table(raw, "inputs", w, required=True)
    if not inputs_raw:
        v.fail(f"{w}.inputs", "is empty; name forward's tensor arguments in order")
    inputs: list[mf.ModelInput] = []
    for iname, spec in inputs_raw.items():
        key = f"{w}.inputs.{iname}"
        idtype = dtype
        if isinstance(spec, dict):
            v.keys(spec, ("shape", "dtype"), key)
            idtype = spec.get("dtype", dtype)
            if idtype not in mf.MODEL_DTYPES:
                v.fail(f"{key}.dtype", f"{show(idtype)}: use one of "
                       f"{', '.join(mf.MODEL_DTYPES)} (integer inputs are not supported "
                       "yet)")  # fmt: skip
            spec = spec.get("shape")
        inputs.append(mf.ModelInput(iname, str(idtype), _shape(v, spec, key, w, dims)))
    used = {d for i in inputs for d in i.shape if isinstance(d, str)}
    for d in dims:
        if d not in used:
            v.fail(f"{w}.buckets.{d}", "no input uses this dimension; remove it")
    return tuple(inputs)


def _pad_outputs(
    v: Validator, raw: Mapping[str, Any], w: str, dims: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[tuple[str | int, ...], ...]]:
    """The dimensions a call may give smaller than its bucket, and the outputs' shapes
    (needed with pad, to slice the padding back off)."""
    pad = v.choices(raw.get("pad", []), f"{w}.pad", dims, "dimension names", "a dimension",
                    '["batch"]')  # fmt: skip
    if len(set(pad)) != len(pad):
        v.fail(f"{w}.pad", "lists a dimension twice")
    outputs_raw = raw.get("outputs")
    if outputs_raw is None:
        if pad:
            v.fail(f"{w}.outputs", "missing; with pad, give each output's shape (e.g. "
                   '[["batch", "seq", 1024]]) so padded dimensions can be sliced back')  # fmt: skip
        return tuple(pad), ()
    if not isinstance(outputs_raw, list) or not outputs_raw:
        v.fail(f"{w}.outputs", "must be a list of shapes, one per output of forward")
    outputs = tuple(_shape(v, o, f"{w}.outputs[{i}]", w, dims) for i, o in enumerate(outputs_raw))
    return tuple(pad), outputs


def _modes(v: Validator, raw: Mapping[str, Any], w: str) -> tuple[str, ...]:
    mode = raw.get("mode", "max-autotune")
    modes = mode if isinstance(mode, list) else [mode]
    for i, m in enumerate(modes):
        if not isinstance(m, str) or m not in MODES:
            at = f"{w}.mode" + (f"[{i}]" if isinstance(mode, list) else "")
            v.fail(at, f"{show(m)}: use one of {', '.join(MODES)}, or a list of them")
    if not modes or len(set(modes)) != len(modes):
        v.fail(f"{w}.mode", f"{show(mode)}: list each mode once, at least one")
    return tuple(str(m) for m in modes)


def _serving(
    v: Validator, raw: Mapping[str, Any], w: str, modes: tuple[str, ...]
) -> tuple[str, str]:
    """The backend that compiles each bucket, and how a bucket's server is selected."""
    backend = raw.get("backend", "aoti")
    if backend not in mf.MODEL_BACKENDS:
        v.fail(f"{w}.backend", f"{show(backend)}: use one of {', '.join(mf.MODEL_BACKENDS)}")
    if backend == "inductor" and "max-autotune" in modes:
        v.fail(f"{w}.backend", '"inductor" with mode "max-autotune": such artifacts tune '
               "their kernels again at the first call in every new process (on the H200, 22 "
               "autotuning runs for the tiny test model), so serving would not start "
               'tuned. Use backend = "aoti" (the default; its library holds the chosen '
               'configurations), or mode = "default"')  # fmt: skip
    select = raw.get("select", "fastest")
    if select not in SELECT:
        v.fail(f"{w}.select", f"{show(select)}: use one of {', '.join(SELECT)} (fastest: each "
               "bucket serves whichever of the compiled artifact and the module's eager "
               "forward, from a CUDA graph or called directly, measures fastest)")  # fmt: skip
    if select == "compiled" and len(modes) > 1:
        v.fail(f"{w}.select", f'"compiled" with {len(modes)} modes: which mode serves a bucket '
               'is decided by timing them; use select = "fastest", or one mode')  # fmt: skip
    return str(backend), str(select)

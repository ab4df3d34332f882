"""Recipe format v1: TOML in, a validated, frozen ``Recipe`` out.

Everything a build reads from the recipe is checked here, before any compile: each error
names the file, the key path and the fix, and an unknown key gets a "did you mean" hint.
The format is documented, with an annotated example, in ``recipes/README.md``.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from loader.expr import Expr, ExprError, parse
from loader.manifest import ELEMENT_TYPES, INT_TYPES, PipelineSpec

from .errors import RecipeError
from .targets import GPU, UnknownTarget, resolve

if TYPE_CHECKING:
    from .model import ModelRecipe

FORMAT = 1
SCALAR_TYPES = INT_TYPES | {"fp32", "fp64"}
LAUNCH_OPTIONS = ("num_warps", "num_stages")
GRID_BUILTINS = ("NUM_SMS",)
CONSTRAINT_BUILTINS = ("SMEM", "NUM_SMS", "REGS_PER_SM", "MAX_THREADS")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TOP_KEYS = ("format", "bundle", "kernel", "pipeline", "model")
BUNDLE_KEYS = ("name", "version", "targets")
TUNE_KEYS = (
    "strategy", "budget", "patience", "warm_patience", "seed", "finalists", "rounds",
    "flops", "bytes", "baseline", "tolerance",
)  # fmt: skip
STRATEGIES = ("model", "bayes", "random", "grid")
KERNEL_KEYS = (
    "tune",
    "name",
    "source",
    "signature",
    "dtypes",
    "grid",
    "buckets",
    "sizes",
    "fixed",
    "space",
    "default",
    "constraints",
    "specializations",
    "reference",
    "inputs",
    "shapes",
    "strides",
    "writes",
)


@dataclass(frozen=True)
class TuneSettings:
    """How the tuner searches one kernel (``[kernel.tune]``); see recipes/README.md."""

    strategy: str = "model"
    budget: int = 60  # most benchmarks per (target, dtypes, bucket)
    patience: int = 30  # stop after this many benchmarks without a gain above 1%
    warm_patience: int = 15  # the same, for a bucket warm-started from its neighbour
    seed: int = 0
    finalists: int = 5  # re-measured interleaved, and verified, before choosing
    rounds: int = 5
    flops: Expr | None = None  # work per call, for TFLOP/s in the report
    bytes: Expr | None = None  # bytes moved per call, for GB/s
    baseline: str | None = None  # "path.py:function" doing the same work another way
    tolerance: float | None = None  # relative error allowed; default by dtype


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
    # What the kernel reads and writes, for checking pipelines (see aot/pipeline.py):
    # pointer param -> its tensor's shape, and strides, as expressions of integer params
    # (a stride may also be a literal); and the pointer params the kernel writes.
    shapes: Mapping[str, tuple[Expr, ...]] = field(default_factory=dict)
    strides: Mapping[str, tuple[Expr, ...]] = field(default_factory=dict)
    writes: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"[[kernel]] {self.name}"

    @property
    def meta_names(self) -> tuple[str, ...]:
        return tuple(k for k in (*self.fixed, *self.space) if k not in LAUNCH_OPTIONS)


@dataclass(frozen=True)
class Recipe:
    path: Path
    sha256: str
    name: str
    version: str
    targets: tuple[GPU, ...]
    kernels: tuple[KernelRecipe, ...]
    pipelines: tuple[PipelineSpec, ...] = ()
    model: ModelRecipe | None = None  # [model]: a PyTorch module compiled per bucket

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def bundle_filename(self) -> str:
        return f"{self.name}-{self.version}.aotc"


def load(path: str | Path) -> Recipe:
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecipeError(path, "", "no such file") from None
    except IsADirectoryError:
        raise RecipeError(path, "", "is a directory; pass the recipe's .toml file") from None
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecipeError(path, "", "is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(path, "", f"invalid TOML: {exc}") from None
    return parse_recipe(doc, path, hashlib.sha256(data).hexdigest())


def parse_recipe(doc: Mapping[str, Any], path: Path, sha: str = "") -> Recipe:
    v = _Validator(path)
    v.keys(doc, TOP_KEYS, "")
    fmt = doc.get("format", FORMAT)
    if fmt != FORMAT:
        v.fail("format", f"{fmt!r} is not a recipe format this aotc reads; write format = 1")
    bundle = v.table(doc, "bundle", "", required=True)
    v.keys(bundle, BUNDLE_KEYS, "[bundle]")
    name = v.name(bundle, "name", "[bundle]")
    version = v.name(bundle, "version", "[bundle]")
    targets = v.targets(bundle)
    model = None
    if "model" in doc:
        from .model import parse_model

        model = parse_model(v, doc["model"], path.parent)
    kernels_raw = doc.get("kernel", [] if model is not None else None)
    if not isinstance(kernels_raw, list) or (not kernels_raw and model is None):
        v.fail(
            "[[kernel]]",
            "the recipe lists no kernels; add at least one [[kernel]] table (or a [model])",
        )
    kernels: list[KernelRecipe] = []
    seen: set[str] = set()
    for i, k in enumerate(kernels_raw):
        if not isinstance(k, dict):
            v.fail(f"[[kernel]] #{i + 1}", "must be a table")
        kr = _kernel(v, k, i, path.parent)
        if kr.name in seen:
            v.fail(f"[[kernel]] {kr.name}.name", "duplicate kernel name; names must be unique")
        seen.add(kr.name)
        kernels.append(kr)
    pipelines = _pipelines(v, doc.get("pipeline"), {k.name: k for k in kernels})
    return Recipe(path.resolve(), sha, name, version, targets, tuple(kernels), pipelines, model)


def _pipelines(
    v: _Validator, raw: Any, kernels: Mapping[str, KernelRecipe]
) -> tuple[PipelineSpec, ...]:
    from .pipeline import check_pipeline  # needs the kernels parsed; see aot/pipeline.py

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


class _Validator:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, problem: str) -> NoReturn:
        raise RecipeError(self.path, key, problem)

    def keys(self, table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(allowed)}"
                self.fail(_join(where, key), f"unknown key; {hint}")

    def table(
        self, t: Mapping[str, Any], key: str, where: str, required: bool = False
    ) -> dict[str, Any]:
        if key not in t:
            if required:
                self.fail(_join(where, key), f"missing; add a [{key}] table")
            return {}
        value = t[key]
        if not isinstance(value, dict):
            self.fail(_join(where, key), f"must be a table, got {_tname(value)}")
        return value

    def string(self, t: Mapping[str, Any], key: str, where: str, required: bool = True) -> str:
        if key not in t:
            if required:
                self.fail(_join(where, key), "missing")
            return ""
        value = t[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(_join(where, key), f"must be a non-empty string, got {value!r}")
        return str(value).strip()

    def name(self, t: Mapping[str, Any], key: str, where: str) -> str:
        value = self.string(t, key, where)
        if not _NAME.match(value):
            self.fail(
                _join(where, key),
                f"{value!r} must start with a letter or digit and use only letters, digits "
                "and . _ + -",
            )
        return value

    def choices(
        self, raw: Any, key: str, allowed: Sequence[str], names: str, one: str, example: str
    ) -> list[str]:
        """A list of strings, each one of ``allowed``: ``names`` says what the list holds
        ("dimension names"), ``one`` what each must be ("a dimension")."""
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            self.fail(key, f"must be a list of {names}, e.g. {example}")
        for x in raw:
            if x not in allowed:
                self.fail(key, f"{x!r} is not {one}; choose from {list(allowed)}")
        return raw

    def bounds(self, raw: Any, key: str) -> tuple[int, ...]:
        """A list of bucket upper bounds: positive and strictly increasing."""
        if not isinstance(raw, list) or not raw:
            self.fail(key, "must be a non-empty list of upper bounds, e.g. [1, 16, 128, 1024]")
        ints = [self.int_value(b, key, minimum=1) for b in raw]
        if ints != sorted(set(ints)):
            self.fail(key, f"{ints} must be strictly increasing")
        return tuple(ints)

    def expr(self, raw: Any, key: str, names: set[str], hint: str) -> Expr:
        """An integer expression that reads only ``names`` (``hint`` says which they are)."""
        try:
            e = parse(str(raw))
        except ExprError as exc:
            self.fail(key, str(exc))
        if e.names - names:
            self.fail(key, f"unknown name(s) {_sorted(e.names - names)}; {hint}")
        return e

    def int_value(self, value: Any, key: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            self.fail(key, f"{value} is below the minimum {minimum}")
        return int(value)

    def targets(self, bundle: Mapping[str, Any]) -> tuple[GPU, ...]:
        raw = bundle.get("targets")
        if not isinstance(raw, list) or not raw:
            self.fail(
                "[bundle].targets",
                'missing or empty; list GPUs by product or arch, e.g. ["A100", "sm_90"]',
            )
        out: list[GPU] = []
        for i, name in enumerate(raw):
            if not isinstance(name, str):
                self.fail(f"[bundle].targets[{i}]", f"must be a string, got {name!r}")
            try:
                gpu = resolve(name)
            except UnknownTarget as exc:
                self.fail(f"[bundle].targets[{i}]", str(exc))
            if gpu in out:
                self.fail(f"[bundle].targets[{i}]", f"{name!r} is listed twice")
            out.append(gpu)
        return tuple(out)


def _join(where: str, key: str) -> str:
    if not where:
        return key
    return f"{where}.{key}"


def _tname(value: Any) -> str:
    names: dict[type, str] = {dict: "a table", list: "an array", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _kernel(v: _Validator, k: Mapping[str, Any], index: int, root: Path) -> KernelRecipe:
    raw_name = k.get("name")
    if not isinstance(raw_name, str) or not _IDENT.match(raw_name):
        v.fail(
            f"[[kernel]] #{index + 1}.name",
            f"missing or invalid ({raw_name!r}); give each kernel an identifier name",
        )
    name = str(raw_name)
    w = f"[[kernel]] {name}"
    v.keys(k, KERNEL_KEYS, w)

    source_text = v.string(k, "source", w)
    source, function = _source(v, source_text, f"{w}.source", root)

    dtypes: dict[str, tuple[str, ...]] = {}
    for var, types in v.table(k, "dtypes", w).items():
        key = f"{w}.dtypes.{var}"
        if not _IDENT.match(var) or var in ELEMENT_TYPES:
            v.fail(key, "a dtype variable must be an identifier that is not a type name")
        if isinstance(types, str):
            types = [types]
        if not isinstance(types, list) or not types:
            v.fail(key, 'must be a non-empty list of element types, e.g. ["fp16", "bf16"]')
        for t in types:
            if t not in ELEMENT_TYPES:
                v.fail(key, f"{t!r} is not an element type; use one of {_sorted(ELEMENT_TYPES)}")
        if len(set(types)) != len(types):
            v.fail(key, "lists a type twice")
        dtypes[var] = tuple(types)

    signature: dict[str, str] = {}
    sig = v.table(k, "signature", w, required=True)
    if not sig:
        v.fail(f"{w}.signature", "is empty; give each runtime argument its Triton type")
    for pname, ptype in sig.items():
        key = f"{w}.signature.{pname}"
        if not isinstance(ptype, str):
            v.fail(key, f"must be a type string like '*fp16' or 'i32', got {ptype!r}")
        ptype = ptype.strip()
        if ptype.startswith("*"):
            elem = ptype[1:]
            if elem not in ELEMENT_TYPES and elem not in dtypes:
                hint = (
                    f"declare it under {w}.dtypes or use one of {_sorted(ELEMENT_TYPES)}"
                    if _IDENT.match(elem)
                    else f"use one of {_sorted(ELEMENT_TYPES)}"
                )
                v.fail(key, f"unknown element type {elem!r}; {hint}")
        elif ptype == "constexpr":
            v.fail(key, "constexpr parameters go in fixed or space, not in signature")
        elif ptype not in SCALAR_TYPES:
            v.fail(
                key,
                f"unknown scalar type {ptype!r}; use one of {_sorted(SCALAR_TYPES)} "
                "(pass fp16/bf16 scalars as fp32)",
            )
        signature[pname] = ptype
    for var in dtypes:
        if f"*{var}" not in signature.values():
            v.fail(f"{w}.dtypes.{var}", f"no argument in signature has type '*{var}'; remove it")
    int_params = [p for p, t in signature.items() if t in INT_TYPES]

    buckets: dict[str, tuple[int, ...]] = {}
    for key_name, bounds in v.table(k, "buckets", w).items():
        key = f"{w}.buckets.{key_name}"
        if key_name not in int_params:
            v.fail(key, f"bucket keys must be integer arguments; choose from {int_params}")
        buckets[key_name] = v.bounds(bounds, key)

    sizes: dict[str, int] = {}
    for sname, value in v.table(k, "sizes", w).items():
        key = f"{w}.sizes.{sname}"
        if sname not in int_params:
            v.fail(key, f"sizes are for integer arguments; choose from {int_params}")
        if sname in buckets:
            v.fail(key, f"{sname} is a bucket key; its size comes from the bucket")
        sizes[sname] = v.int_value(value, key, minimum=1)

    fixed: dict[str, int] = {}
    for mname, value in v.table(k, "fixed", w).items():
        key = f"{w}.fixed.{mname}"
        if mname in signature:
            v.fail(key, f"{mname} is a runtime argument (in signature), not a constexpr")
        if isinstance(value, bool):
            value = int(value)
        fixed[mname] = v.int_value(value, key)
        if mname in LAUNCH_OPTIONS:
            v.fail(key, f"put {mname} in space (a one-element list is fine)")

    space: dict[str, tuple[int, ...]] = {}
    for mname, values in v.table(k, "space", w).items():
        key = f"{w}.space.{mname}"
        if mname in signature:
            v.fail(key, f"{mname} is a runtime argument (in signature); search constexprs only")
        if mname in fixed:
            v.fail(key, f"{mname} is also in fixed; keep it in one of the two")
        if isinstance(values, int) and not isinstance(values, bool):
            values = [values]
        if not isinstance(values, list) or not values:
            v.fail(key, "must be a non-empty list of integers")
        ints = [v.int_value(x, key) for x in values]
        if len(set(ints)) != len(ints):
            v.fail(key, f"{ints} lists a value twice")
        if mname == "num_warps":
            for x in ints:
                if x < 1 or x > 32 or x & (x - 1):
                    v.fail(key, f"{x} is not a power of two; use 1, 2, 4, 8, 16 or 32")
        if mname == "num_stages":
            for x in ints:
                if x < 1:
                    v.fail(key, f"{x} must be at least 1")
        space[mname] = tuple(ints)
    space.setdefault("num_warps", (4,))
    space.setdefault("num_stages", (3,))

    default: dict[str, int] = {}
    for dname, value in v.table(k, "default", w).items():
        key = f"{w}.default.{dname}"
        if dname not in space:
            v.fail(key, f"defaults apply to searched parameters; choose from {list(space)}")
        value = v.int_value(value, key)
        if value not in space[dname]:
            v.fail(key, f"{value} is not in space.{dname} {list(space[dname])}")
        default[dname] = value

    meta = set(fixed) | set(space)
    grid = _grid(v, k.get("grid"), f"{w}.grid", set(int_params) | meta | set(GRID_BUILTINS))

    for g in grid:
        unsized = sorted((g.names & set(int_params)) - set(buckets) - set(sizes))
        if unsized:
            v.fail(
                f"{w}.grid",
                f"reads {', '.join(unsized)}, which is neither a bucket key nor in sizes; "
                f"give it a representative value under {w}.sizes",
            )

    constraints: list[Expr] = []
    raw_cons = k.get("constraints", [])
    if not isinstance(raw_cons, list):
        v.fail(f"{w}.constraints", "must be a list of boolean expressions")
    allowed = meta | set(sizes) | set(CONSTRAINT_BUILTINS)
    for i, text in enumerate(raw_cons):
        key = f"{w}.constraints[{i}]"
        try:
            e = parse(text, predicate=True)
        except ExprError as exc:
            v.fail(key, str(exc))
        unknown = e.names - allowed
        if unknown:
            v.fail(key, f"unknown name(s) {_sorted(unknown)}; constraints read {_sorted(allowed)}")
        constraints.append(e)

    specializations = _specializations(v, k.get("specializations"), w, signature, buckets)

    shapes, strides, writes = _access(v, k, w, signature)

    reference = _optional_ref(v, k, "reference", w, root)
    inputs = _optional_ref(v, k, "inputs", w, root)
    if reference and not inputs:
        v.fail(
            f"{w}.inputs",
            "a reference needs inputs: inputs makes the arguments, reference the expected "
            "outputs (inputs alone is fine: the kernel is tuned but not verified)",
        )

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
        constraints=tuple(constraints),
        specializations=specializations,
        tune=_tune(v, k, w, root, set(signature) | meta),
        reference=reference,
        inputs=inputs,
        shapes=shapes,
        strides=strides,
        writes=writes,
    )


def _access(
    v: _Validator, k: Mapping[str, Any], w: str, signature: Mapping[str, str]
) -> tuple[dict[str, tuple[Expr, ...]], dict[str, tuple[Expr, ...]], tuple[str, ...]]:
    """``shapes``, ``strides`` and ``writes``: how the kernel touches its pointers."""
    pointers = [p for p, t in signature.items() if t.startswith("*")]
    ints = {p for p, t in signature.items() if t in INT_TYPES}

    def dims(table: str) -> dict[str, tuple[Expr, ...]]:
        out: dict[str, tuple[Expr, ...]] = {}
        for pname, raw in v.table(k, table, w).items():
            key = f"{w}.{table}.{pname}"
            if pname not in pointers:
                close = difflib.get_close_matches(pname, pointers, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"choose from {pointers}"
                v.fail(key, f"not a pointer argument; {hint}")
            if not isinstance(raw, list) or not raw:
                v.fail(key, 'must be a non-empty list of expressions, e.g. ["M", "K"]')
            hint = f"use integer arguments of the signature: {_sorted(ints)}"
            out[pname] = tuple(v.expr(item, key, ints, hint) for item in raw)
        return out

    shapes, strides = dims("shapes"), dims("strides")
    for pname, st in strides.items():
        if pname not in shapes:
            v.fail(f"{w}.strides.{pname}", f"give {pname}'s shape under {w}.shapes too")
        if len(st) != len(shapes[pname]):
            v.fail(f"{w}.strides.{pname}", f"has {len(st)} entries; shapes.{pname} has "
                   f"{len(shapes[pname])}")  # fmt: skip
    raw_writes = v.choices(k.get("writes", []), f"{w}.writes", pointers, "pointer arguments",
                           "a pointer argument", '["c_ptr"]')  # fmt: skip
    return shapes, strides, tuple(raw_writes)


def _tune(v: _Validator, k: Mapping[str, Any], w: str, root: Path, names: set[str]) -> TuneSettings:
    t = v.table(k, "tune", w)
    v.keys(t, TUNE_KEYS, f"{w}.tune")
    key = f"{w}.tune"
    out: dict[str, Any] = {}
    if "strategy" in t:
        if t["strategy"] not in STRATEGIES:
            close = difflib.get_close_matches(str(t["strategy"]), STRATEGIES, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            v.fail(f"{key}.strategy", f"{t['strategy']!r} is unknown; {hint}use one of "
                   f"{', '.join(STRATEGIES)}")  # fmt: skip
        out["strategy"] = t["strategy"]
    for name, minimum in (("budget", 1), ("patience", 1), ("warm_patience", 1), ("seed", 0),
                          ("finalists", 1),
                          ("rounds", 1)):  # fmt: skip
        if name in t:
            out[name] = v.int_value(t[name], f"{key}.{name}", minimum=minimum)
    for name in ("flops", "bytes"):
        if name in t:
            try:
                e = parse(str(t[name]))
            except ExprError as exc:
                v.fail(f"{key}.{name}", str(exc))
            unknown = e.names - names
            if unknown:
                v.fail(f"{key}.{name}", f"unknown name(s) {_sorted(unknown)}")
            out[name] = e
    if "baseline" in t:
        out["baseline"] = _optional_ref(v, t, "baseline", key, root)
    if "tolerance" in t:
        tol = t["tolerance"]
        if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 < tol < 1:
            v.fail(f"{key}.tolerance", f"{tol!r} must be a number between 0 and 1")
        out["tolerance"] = float(tol)
    return TuneSettings(**out)


def _source(v: _Validator, text: str, key: str, root: Path) -> tuple[Path, str]:
    file, sep, func = text.rpartition(":")
    if not sep or not file or not _IDENT.match(func):
        v.fail(key, f"{text!r} must be 'path/to/file.py:function_name'")
    path = (root / file).resolve()
    if not path.is_file():
        v.fail(key, f"{file} does not exist (paths are relative to the recipe's folder)")
    return path, func


def _optional_ref(
    v: _Validator, k: Mapping[str, Any], field: str, w: str, root: Path
) -> str | None:
    if field not in k:
        return None
    text = v.string(k, field, w)
    _source(v, text, f"{w}.{field}", root)
    return text


def _grid(v: _Validator, raw: Any, key: str, allowed: set[str]) -> tuple[Expr, Expr, Expr]:
    if raw is None:
        v.fail(key, 'missing; give the launch grid, e.g. "cdiv(M, BLOCK_M)"')
    items = [raw] if isinstance(raw, str | int) else raw
    if not isinstance(items, list) or not 1 <= len(items) <= 3:
        v.fail(key, "must be an expression or a list of 1 to 3 expressions")
    exprs: list[Expr] = []
    for i, item in enumerate(items):
        sub = f"{key}[{i}]" if isinstance(raw, list) else key
        try:
            e = parse(str(item))
        except ExprError as exc:
            v.fail(sub, str(exc))
        unknown = e.names - allowed
        if unknown:
            v.fail(
                sub,
                f"unknown name(s) {_sorted(unknown)}; a grid reads integer arguments, "
                f"meta-parameters and {', '.join(GRID_BUILTINS)}",
            )
        exprs.append(e)
    while len(exprs) < 3:
        exprs.append(parse("1"))
    return exprs[0], exprs[1], exprs[2]


def _specializations(
    v: _Validator,
    raw: Any,
    w: str,
    signature: Mapping[str, str],
    buckets: Mapping[str, tuple[int, ...]],
) -> tuple[Mapping[str, int], ...]:
    specializable = [p for p, t in signature.items() if t.startswith("*") or t in INT_TYPES]
    if raw is None:
        # Default: pointers 16-byte aligned and every non-bucket integer divisible by 16.
        raw = [{"*": 16, **{b: 0 for b in buckets}}]
    if not isinstance(raw, list):
        v.fail(f"{w}.specializations", "must be a list of tables, e.g. [{ '*' = 16 }]")
    out: list[Mapping[str, int]] = []
    for i, prof in enumerate(raw):
        key = f"{w}.specializations[{i}]"
        if not isinstance(prof, dict):
            v.fail(key, "must be a table mapping arguments to 16, 1 or 0")
        star = prof.get("*", 0)
        resolved: dict[str, int] = {}
        for pname, value in prof.items():
            if pname != "*" and pname not in specializable:
                close = difflib.get_close_matches(pname, specializable, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"choose from {specializable}"
                v.fail(f"{key}.{pname}", f"not a pointer or integer argument; {hint}")
            if value not in (0, 1, 16) or isinstance(value, bool):
                v.fail(
                    f"{key}.{pname}",
                    f"{value!r}: use 16 (divisible by 16), 1 (equal to 1) or 0 (no assumption)",
                )
            if value == 1 and (pname == "*" or signature[pname].startswith("*")):
                v.fail(f"{key}.{pname}", "only integer arguments can be assumed equal to 1")
        for pname in specializable:
            value = prof.get(pname, star)
            if value:
                resolved[pname] = value
        if not resolved:
            v.fail(key, "assumes nothing; the generic variant is always built, drop this entry")
        if resolved in out:
            v.fail(key, "repeats an earlier specialization")
        out.append(resolved)
    return tuple(out)


def _sorted(items: Any) -> str:
    return ", ".join(sorted(items))

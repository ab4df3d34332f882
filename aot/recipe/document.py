"""A recipe file as a whole: TOML in, a validated, frozen ``Recipe`` out.

The file is read and decoded here, its nesting bounded, and each table handed to the
module that knows it: ``[bundle]`` (bundle.py), ``[[kernel]]`` (kernel.py),
``[[pipeline]]`` (pipeline.py, after the kernels it checks against) and ``[model]``
(model.py).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader.manifest import PipelineSpec

from ..errors import RecipeError
from ..targets import GPU
from .bundle import MAX_PLAN_SIZE, parse_bundle
from .kernel import KernelRecipe, parse_kernels
from .model import ModelRecipe, parse_model
from .op import OpRecipe, parse_ops
from .pipeline import parse_pipelines
from .placeholders import check as check_placeholders
from .validate import Validator

FORMAT = 1
TOP_KEYS = ("format", "bundle", "kernel", "pipeline", "model", "op")
# The deepest nesting of arrays and tables a recipe may have. Real recipes nest four or
# five levels ([[pipeline]] -> step -> args); the cap keeps every later stage that walks
# the data (messages, hashing, JSON) clear of Python's recursion limit.
MAX_DEPTH = 32
# tomllib's time grows with the square of a dotted key's length (a.b.c... = 1), so keys of
# more parts than MAX_DEPTH are refused before it reads them; they would be too deep anyway.
_LONG_KEY = re.compile(
    r"(?:^|[\[{,])[ \t]*(?:(?:[A-Za-z0-9_-]+|\"[^\"\\\n]*\"|'[^'\n]*')[ \t]*\.[ \t]*)"
    rf"{{{MAX_DEPTH},}}",
    re.M,
)
MAX_BYTES = 4 << 20  # a recipe is a few KiB; this bounds the parser's time


@dataclass(frozen=True)
class Recipe:
    path: Path
    sha256: str
    name: str
    version: str
    targets: tuple[GPU, ...]
    kernels: tuple[KernelRecipe, ...]
    pipelines: tuple[PipelineSpec, ...] = ()
    ops: tuple[OpRecipe, ...] = ()  # [[op]]: interchangeable kernels behind one name
    model: ModelRecipe | None = None  # [model]: a PyTorch module compiled per bucket
    max_plan_size: int = MAX_PLAN_SIZE  # [bundle].max_plan_size; see aot/plan.py
    given: Path | None = field(default=None, compare=False)  # the path as the user gave it

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def shown(self) -> Path:
        """The path messages name: as the user gave it (``path`` is resolved)."""
        return self.given if self.given is not None else self.path

    @property
    def bundle_filename(self) -> str:
        return f"{self.name}-{self.version}.aotc"


def load(path: str | Path) -> Recipe:
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise RecipeError(path, "", "no such file") from None
    except IsADirectoryError:
        raise RecipeError(path, "", "is a directory; pass the recipe's .toml file") from None
    except OSError as exc:
        raise RecipeError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise RecipeError(path, "", f"is over {MAX_BYTES >> 20} MiB; a recipe is a few KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecipeError(path, "", "is not UTF-8 text") from None
    long_key = _LONG_KEY.search(text)
    if long_key is not None:
        line = text.count("\n", 0, long_key.start()) + 1
        raise RecipeError(path, f"line {line}", f"a dotted key of more than {MAX_DEPTH} parts "
                          "nests tables too deep; a recipe needs a handful of levels: shorten "
                          "it")  # fmt: skip
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(path, "", f"invalid TOML: {exc}") from None
    except RecursionError:
        raise RecipeError(path, "", _too_deep()) from None
    except ValueError as exc:  # tomllib's own int(): a number of over 4300 digits
        raise RecipeError(path, "", f"invalid TOML: {exc}") from None
    return parse_recipe(doc, path, hashlib.sha256(data).hexdigest())


def parse_recipe(doc: Mapping[str, Any], path: Path, sha: str = "") -> Recipe:
    v = Validator(path)
    key = _deepest(doc)
    if key is not None:
        v.fail(key, _too_deep())
    v.keys(doc, TOP_KEYS, "")
    fmt = doc.get("format", FORMAT)
    if type(fmt) is not int or fmt != FORMAT:  # not True or 1.0, which compare equal to 1
        v.fail("format", f"{fmt!r} is not a recipe format this aotc reads; write format = 1")
    bundle = parse_bundle(v, doc)
    model = parse_model(v, doc["model"], path.parent) if "model" in doc else None
    kernels_raw = doc.get("kernel", [] if model is not None else None)
    if not isinstance(kernels_raw, list) or (not kernels_raw and model is None):
        v.fail(
            "[[kernel]]",
            "the recipe lists no kernels; add at least one [[kernel]] table (or a [model])",
        )
    check_placeholders(v, kernels_raw)  # a draft from `aotc init`: say what to fill in
    kernels = parse_kernels(v, kernels_raw, path.parent)
    by_name = {k.name: k for k in kernels}
    pipelines = parse_pipelines(v, doc.get("pipeline"), by_name)
    ops = parse_ops(v, doc.get("op"), by_name, set(by_name) | {p.name for p in pipelines})
    return Recipe(
        path=path.resolve(),
        sha256=sha,
        name=bundle.name,
        version=bundle.version,
        targets=bundle.targets,
        kernels=kernels,
        pipelines=pipelines,
        ops=ops,
        model=model,
        max_plan_size=bundle.max_plan_size,
        given=path,
    )


def _deepest(doc: Mapping[str, Any]) -> str | None:
    """Where the first value nested deeper than MAX_DEPTH starts, or None. Walked with an
    explicit stack: the point is not to recurse."""
    Chain = tuple[str, Any] | None  # (this step, the chain to the parent)
    stack: list[tuple[Any, int, Chain]] = [(doc, 0, None)]
    while stack:
        value, depth, chain = stack.pop()
        if depth > MAX_DEPTH:
            steps: list[str] = []
            while chain is not None:
                steps.append(chain[0])
                chain = chain[1]
            top = "".join(reversed(steps[-4:])).lstrip(".")
            return f"{top}..." if len(steps) > 4 else top
        if isinstance(value, dict):
            stack.extend((v, depth + 1, (f".{k}", chain)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, (f"[{i}]", chain)) for i, v in enumerate(value))
    return None


def _too_deep() -> str:
    return (f"arrays or tables are nested more than {MAX_DEPTH} levels deep; a recipe needs a "
            "handful: flatten the value")  # fmt: skip

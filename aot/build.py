"""The build: recipe → products → bundle and report, written atomically.

Every product the recipe has (kernels, pipelines, a model; aot/product.py) is planned for
the build's slice, then built, and what each contributes is packed into one bundle and
one report. Products are planned before anything is built, so that a recipe, a slice or
an output that cannot be built is refused before minutes of work.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader.format import write_atomic

from . import report
from .env import Environment
from .kernels import TuneOptions, plan_kernels, run_tuning
from .model import ModelOptions, plan_model
from .output import check_output
from .pack import bundle_payloads, encode_bundle, make_manifest
from .pipelines import plan_pipelines
from .product import Context, Product, Summary
from .recipe import Recipe, load
from .shard import Slice
from .tune.tuner import TuneStats

__all__ = ["BuildResult", "TuneOptions", "build", "default_output", "plan_products", "run_tuning"]


@dataclass(frozen=True)
class BuildResult:
    bundle: Path
    report: Path
    size: int
    sha256: str
    seconds: float
    products: Mapping[str, Summary] = field(default_factory=dict)  # product name -> summary
    shard: dict[str, Any] | None = None  # the partial bundle's slice; None for a full build

    # The kernel product's numbers, and the model's, as the command prints them.
    @property
    def plan_size(self) -> int:
        return self._kernels.possible

    @property
    def compiled(self) -> int:
        return self._kernels.compiled

    @property
    def cached(self) -> int:
        return self._kernels.cached

    @property
    def failed(self) -> int:
        return self._kernels.failed

    @property
    def decided(self) -> Mapping[str, int]:  # buckets measured/transferred/...
        return self._kernels.decided

    @property
    def tuning(self) -> TuneStats | None:
        return self._kernels.tuning

    @property
    def db(self) -> Path | None:
        return self._kernels.db

    @property
    def unread(self) -> Mapping[str, int]:  # kernel -> its records under other sources
        return self._kernels.unread

    @property
    def model_buckets(self) -> int:  # [model] buckets packed (over every target)
        return self.products.get("model", Summary()).packed

    @property
    def model_cached(self) -> int:  # of which taken from the compile cache
        return self.products.get("model", Summary()).cached

    @property
    def _kernels(self) -> Summary:
        return self.products.get("kernels", Summary())


def default_output(recipe: Recipe, cwd: Path, sl: Slice | None = None) -> Path:
    """``artifacts/<name>-<version>.aotc``; a slice adds its label: ``….sm_90.shard1of3.aotc``."""
    name = recipe.bundle_filename
    label = sl.label if sl is not None else ""
    if label:
        name = f"{name.removesuffix('.aotc')}.{label}.aotc"
    return cwd / "artifacts" / name


def plan_products(
    recipe: Recipe, sl: Slice, tune: TuneOptions, model: ModelOptions
) -> list[Product]:
    """Every product the recipe has, planned for the slice ``sl``, in manifest order."""
    planned = (
        plan_kernels(recipe, sl, tune),
        plan_pipelines(recipe, sl),
        plan_model(recipe, sl, model),
    )
    return [p for p in planned if p is not None]


def build(
    recipe_path: Path,
    output: Path | None,
    env: Environment,
    cwd: Path,
    tune: TuneOptions | None = None,
    sl: Slice | None = None,
    model: ModelOptions | None = None,
) -> BuildResult:
    """Build the recipe, or only the slice ``sl`` of it (a partial bundle; see shard.py)."""
    start = time.monotonic()
    recipe = load(recipe_path)
    sl = sl or Slice()
    products = plan_products(recipe, sl, tune or TuneOptions(), model or ModelOptions())
    shard = {k: v for p in products for k, v in (p.shard or {}).items()} or None
    out = output if output is not None else default_output(recipe, cwd, sl if shard else None)
    check_output(out, example=recipe.bundle_filename)  # before minutes of work, not after
    ctx = Context(env, out)
    parts = {p.name: p.build(ctx) for p in products}
    data = encode_bundle(make_manifest(recipe, parts.values()), bundle_payloads(parts.values()))
    sections = [part.report for part in parts.values()]
    text = report.document(recipe, out.name, sections)
    report_path = out.with_suffix(".report.md")
    # The report first: if writing the bundle fails, no bundle claims to exist.
    for s in sections:
        for path, picture in s.files.items():
            write_atomic(path, picture.encode())
    write_atomic(report_path, text.encode())
    write_atomic(out, data)
    return BuildResult(
        bundle=out,
        report=report_path,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        seconds=time.monotonic() - start,
        products={name: part.summary for name, part in parts.items()},
        shard=shard,
    )

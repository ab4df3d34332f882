"""The build: recipe → plan → tune → decide → compile → select → pack, written atomically.

Targets whose GPU kind is on this machine are tuned first (into the tuning database);
decisions come from that database, then from a measured target of the same arch family,
then from the heuristic. Only what will be packed is compiled here: each bucket's first
choice, then the next one for buckets whose choice failed, until every bucket has a config
that compiled and fits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader.format import write_atomic

from . import heuristic, report
from .cache import CompileCache
from .compile import Compiled, CompilePool, compile_variants
from .env import Environment
from .errors import BuildError
from .model import ModelOptions, build_model
from .output import check_output
from .pack import encode_bundle, make_manifest, rel_path
from .plan import Config, Instance, Plan, Variant, make_plan
from .recipe import Recipe, load
from .select import (
    Chooser,
    Ranker,
    Selection,
    heuristic_chooser,
    select,
    wanted_variants,
)
from .shard import Slice, apply
from .tune import decide
from .tune.db import TuningDB
from .tune.gpu import GpuInfo, GpuWorker, detect, matches
from .tune.tuner import Tuner, TuneStats


@dataclass(frozen=True)
class TuneOptions:
    """Tuning for ``build``: on by default wherever a GPU of a target's kind is present."""

    enabled: bool = True
    db: Path | None = None  # default: <bundle>.tunedb.jsonl next to the bundle
    gpus: list[GpuInfo] | None = None  # None: ask the driver
    timeout: float = 120.0  # seconds a benchmark may take before it counts as a hang
    worker_factory: Callable[[GpuInfo], GpuWorker] | None = None  # tests use a fake GPU


@dataclass(frozen=True)
class BuildResult:
    bundle: Path
    report: Path
    size: int
    sha256: str
    plan_size: int
    compiled: int
    cached: int
    failed: int
    seconds: float
    decided: Mapping[str, int] = field(default_factory=dict)  # buckets measured/transferred/...
    tuning: TuneStats | None = None
    db: Path | None = None
    shard: dict[str, Any] | None = None  # the partial bundle's slice; None for a full build
    model_buckets: int = 0  # [model] buckets packed (over every target)
    model_cached: int = 0  # of which taken from the compile cache


def default_output(recipe: Recipe, cwd: Path, sl: Slice | None = None) -> Path:
    """``artifacts/<name>-<version>.aotc``; a slice adds its label: ``….sm_90.shard1of3.aotc``."""
    name = recipe.bundle_filename
    label = sl.label if sl is not None else ""
    if label:
        name = f"{name.removesuffix('.aotc')}.{label}.aotc"
    return cwd / "artifacts" / name


def cached_ranker(plan: Plan) -> Ranker:
    memo: dict[tuple[object, tuple[int, ...]], list[Config]] = {}

    def ranker(inst: Instance, bucket: tuple[int, ...]) -> list[Config]:
        key = (inst.key, bucket)
        if key not in memo:
            memo[key] = heuristic.rank(inst, bucket)
        return memo[key]

    return ranker


def compile_selected(plan: Plan, chooser: Chooser, env: Environment) -> dict[Variant, Compiled]:
    """Compile until every bucket's first viable choice is known."""
    cache = CompileCache(env.cache_dir)
    compiled: dict[Variant, Compiled] = {}
    while True:
        wanted = wanted_variants(plan, chooser, compiled)
        if not wanted:
            return compiled
        compiled.update(
            compile_variants(plan, wanted, cache=cache, jobs=env.jobs, progress=env.progress)
        )


def run_tuning(plan: Plan, db: TuningDB, env: Environment, opts: TuneOptions) -> TuneStats | None:
    """Tune every instance whose GPU kind is here; None when no GPU can tune anything."""
    gpus = detect() if opts.gpus is None else opts.gpus
    if not any(matches(inst.target, g) for inst in plan.instances for g in gpus):
        return None
    with CompilePool(plan, CompileCache(env.cache_dir), env.jobs) as pool:
        tuner = Tuner(plan, db, pool, gpus, progress=env.progress, timeout=opts.timeout,
                      worker_factory=opts.worker_factory)  # fmt: skip
        return tuner.run()


def build(
    recipe_path: Path,
    output: Path | None,
    env: Environment,
    cwd: Path,
    tune: TuneOptions | None = None,
    sl: Slice | None = None,
    model: ModelOptions | None = None,
) -> BuildResult:
    """Build the recipe, or only the slice ``sl`` of it (a partial bundle; see shard.py):
    then only the slice's instances are tuned, compiled and packed."""
    start = time.monotonic()
    tune = tune or TuneOptions()
    recipe = load(recipe_path)
    whole = make_plan(recipe)
    plan, shard = apply(whole, sl or Slice())
    if recipe.model is not None and shard is not None:
        raise BuildError("[model]: sharded builds (--shard/--targets) do not build models yet; "
                         "build the recipe whole")  # fmt: skip
    out = output if output is not None else default_output(recipe, cwd, sl if shard else None)
    check_output(out, example=recipe.bundle_filename)  # before minutes of work, not after
    db_path = tune.db or out.with_suffix(".tunedb.jsonl")
    db = TuningDB(db_path)
    stats = run_tuning(plan, db, env, tune) if tune.enabled else None
    # Decided over the whole plan, so that a slice chooses as a full build does: a target
    # without measurements takes those of its arch family, which may lie in another slice.
    chooser = decide.chooser(whole, db, heuristic_chooser(cached_ranker(whole)))
    decided = decide.count(plan, chooser)
    compiled = compile_selected(plan, chooser, env)
    selection: Selection = select(plan, chooser, compiled)
    manifest, payloads = make_manifest(plan, selection, compiled)
    if shard is not None:
        manifest = dataclasses.replace(manifest, build={**manifest.build, "shard": shard})
    model_report: list[str] = []
    model_counts = (0, 0)
    if recipe.model is not None:
        mo = model or ModelOptions()
        if mo.cache is None:
            mo = dataclasses.replace(mo, cache=CompileCache(env.cache_dir), progress=env.progress)
        mb = build_model(recipe, mo)
        model_source = rel_path(recipe.model.source, recipe.root)
        sources = {**manifest.provenance.get("sources", {}), model_source: mb.source_sha256}
        provenance = {**manifest.provenance, "sources": sources,
                      "torch": mb.spec.artifacts[0].torch if mb.spec.artifacts else ""}  # fmt: skip
        manifest = dataclasses.replace(manifest, model=mb.spec, provenance=provenance)
        payloads = {**payloads, **mb.payloads}
        model_report = mb.report
        model_counts = (sum(len(a.buckets) for a in mb.spec.artifacts), mb.cached)
    data = encode_bundle(manifest, payloads)
    report_path = out.with_suffix(".report.md")
    text, images = report.render(
        plan, selection, compiled, out.name, db, out.with_suffix(".report")
    )
    if model_report:
        text = text.rstrip("\n") + "\n\n" + "\n".join(model_report) + "\n"
    # The report first: if writing the bundle fails, no bundle claims to exist.
    for path, picture in images.items():
        write_atomic(path, picture.encode())
    write_atomic(report_path, text.encode())
    write_atomic(out, data)
    return BuildResult(
        bundle=out,
        report=report_path,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        plan_size=plan.size,
        compiled=sum(1 for c in compiled.values() if not c.cached),
        cached=sum(1 for c in compiled.values() if c.cached),
        failed=sum(1 for c in compiled.values() if not c.ok),
        seconds=time.monotonic() - start,
        decided=decided,
        tuning=stats,
        db=db_path if db_path.exists() else None,
        shard=shard,
        model_buckets=model_counts[0],
        model_cached=model_counts[1],
    )

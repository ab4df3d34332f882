"""The model product: runs the model's stages for every place and bucket.

For each place (aot/model/plan.py) every bucket is compiled in every mode the recipe lists,
or taken from the compile cache, and verified (compile.py, verify.py); the buckets not in
the cache compile in worker processes when the place has several devices, else here. All
buckets must agree on the weights the export graph lifts: the service binds one module.
Then each bucket's servings are timed and the fastest chosen (select.py), and the choices
become manifest records, payloads (pack.py) and the report's section (report.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loader import manifest as mf

from ..cache import CompileCache
from ..errors import BuildError
from ..pack import rel_path
from ..product import Context, Contribution, Provenance, ReportSection, Summary
from ..progress import Progress
from ..recipe import ModelRecipe, Recipe
from ..shard import Slice
from .compile import Artifact, cached, compile_bucket, compile_in_workers, store
from .factory import Factory, Module, check_options, load_factory
from .pack import artifacts_record, bucket_record, model_record
from .plan import (
    BucketJob,
    ModelOptions,
    Place,
    bucket_key,
    grid,
    job_name,
    jobs,
    places,
    source_digest,
    where_of,
    worker_devices,
)
from .report import section
from .select import Outcome, serve, time_bucket


@dataclass(frozen=True)
class ModelProduct:
    """The recipe's ``[model]``, built whole (it cannot be sharded yet)."""

    recipe: Recipe
    opts: ModelOptions
    name: str = "model"
    shard: Mapping[str, Any] | None = None

    def build(self, ctx: Context) -> Contribution:
        opts = self.opts
        if opts.cache is None:
            opts = replace(opts, cache=CompileCache(ctx.env.cache_dir), progress=ctx.env.progress)
        mb = build_model(self.recipe, opts)
        source = rel_path(mb.source, self.recipe.root)
        torch = mb.spec.artifacts[0].torch if mb.spec.artifacts else ""
        n = sum(len(a.buckets) for a in mb.spec.artifacts)
        return Contribution(
            records={"model": mb.spec},
            payloads=mb.payloads,
            provenance=Provenance({source: mb.source_sha256}, {"torch": torch}),
            report=ReportSection(body=mb.report),
            summary=Summary(possible=n, compiled=n - mb.cached, cached=mb.cached, packed=n),
        )


def plan_model(recipe: Recipe, sl: Slice, opts: ModelOptions) -> ModelProduct | None:
    """The model product of ``recipe``, if it has a ``[model]``; only a whole build."""
    if recipe.model is None:
        return None
    if not sl.covers(recipe.targets):
        raise BuildError("[model]: sharded builds (--shard/--targets) do not build models yet; "
                         "build the recipe whole")  # fmt: skip
    return ModelProduct(recipe, opts)


@dataclass(frozen=True)
class ModelBuild:
    spec: mf.ModelSpec
    payloads: dict[str, bytes]
    report: str  # the report's Markdown section
    source: Path  # the factory's file
    source_sha256: str
    cached: int = 0  # buckets taken from the compile cache (every mode of them)


@dataclass
class _Run:
    """One model build: what every place and bucket shares."""

    recipe: Path
    mr: ModelRecipe
    factory: Factory
    opts: ModelOptions
    cache: CompileCache
    sources: str  # source_digest
    torch: str  # torch's version
    bar: Progress
    weights: tuple[mf.ModelWeight, ...] | None = None  # the first bucket's
    single_output: bool = True

    def agree(self, art: Artifact, where: str) -> None:
        """Every bucket lifts the weights the first one did."""
        if self.weights is None:
            self.weights, self.single_output = art.weights, art.single_output
        elif art.weights != self.weights:
            raise BuildError(f"[model] at {where}: the export graph's parameters differ "
                             "from the first bucket's; the module must not depend on "
                             "shapes for which weights it uses")  # fmt: skip


@dataclass(frozen=True)
class _Jobs:
    """One place's compilations: their cache keys, those found in the cache, and those
    the worker processes compiled."""

    keys: Mapping[BucketJob, str]
    hits: Mapping[BucketJob, Artifact | None]
    fresh: Mapping[BucketJob, Artifact] = field(default_factory=dict)


def build_model(recipe: Recipe, opts: ModelOptions) -> ModelBuild:
    """Compile, verify and serialize every bucket of ``recipe.model`` for every place.

    A bucket whose key (``bucket_key``) is in ``opts.cache`` is taken from there, already
    verified, instead of compiled again: rebuilding an unchanged model costs nothing, and a
    build that stopped halfway resumes where it stopped."""
    import torch

    mr = recipe.model
    if mr is None:
        raise BuildError(f"{recipe.shown}: the recipe has no [model]")
    where = places(recipe, opts)
    check_options(mr, torch)
    bar = Progress(len(jobs(mr)) * len(where), f"model {mr.name}", enabled=opts.progress)
    run = _Run(recipe.path, mr, load_factory(mr), opts, opts.cache or CompileCache(None),
               source_digest(mr.source), str(torch.__version__), bar)  # fmt: skip
    built = [(place, _build_place(run, place)) for place in where]
    bar.close()
    payloads: dict[str, bytes] = {}
    artifacts = []
    for place, outcomes in built:
        buckets = []
        for o in outcomes:
            record, data = bucket_record(mr, place, o)
            buckets.append(record)
            if record.entry:
                payloads[record.entry] = data
        artifacts.append(artifacts_record(mr, place, buckets, run.torch))
    spec = model_record(mr, run.weights or (), run.single_output, artifacts)
    cached_buckets = sum(all(o.cached.values()) for _, outcomes in built for o in outcomes)
    sha = hashlib.sha256(mr.source.read_bytes()).hexdigest()
    return ModelBuild(spec, payloads, section(mr, built), mr.source, sha, cached_buckets)


def _build_place(run: _Run, place: Place) -> list[Outcome]:
    mr = run.mr
    todo = jobs(mr)
    keys = {j: bucket_key(mr, run.sources, place, j.bucket, run.torch, j.mode) for j in todo}
    hits = {j: cached(run.cache, keys[j]) for j in todo}
    missing = [j for j in todo if hits[j] is None]
    devices = worker_devices(run.opts, place, len(missing))
    fresh: dict[BucketJob, Artifact] = {}
    if len(devices) > 1:

        def landed(job: BucketJob, art: Artifact) -> None:
            store(run.cache, keys[job], art)
            run.bar.advance(job_name(mr, job))

        fresh = compile_in_workers(mr, run.recipe, place, devices, missing, landed)
    module = Module(mr, run.factory, place)
    found = _Jobs(keys, hits, fresh)
    return [_build_bucket(run, place, module, bucket, found) for bucket in grid(mr)]


def _build_bucket(
    run: _Run, place: Place, module: Module, bucket: tuple[int, ...], found: _Jobs
) -> Outcome:
    """The bucket's artifact in each mode (from the cache, a worker, or compiled here),
    and how it is served."""
    mr = run.mr
    where = where_of(mr, bucket)
    arts: dict[str, Artifact] = {}
    for mode in mr.modes:
        job = BucketJob(bucket, mode)
        art = found.hits[job] or found.fresh.get(job)
        if art is None:
            model, reference = module.get()
            art = compile_bucket(mr, model, reference, place, job)
            store(run.cache, found.keys[job], art)
        if job not in found.fresh:
            run.bar.advance(job_name(mr, job) + (" (cached)" if found.hits[job] else ""))
        run.agree(art, where)
        arts[mode] = art
    choice = None
    if mr.select == "fastest":  # measured at every build, never cached
        choice = time_bucket(mr, module.get()[0], place, bucket, arts, where)
    hit = {m: found.hits[BucketJob(bucket, m)] is not None for m in mr.modes}
    return serve(mr, place, bucket, arts, hit, choice)

"""The kernel product: the recipe's Triton kernels through plan → tune → decide → compile →
select → pack, each stage one module (plan.py, tune/, tune/decide.py, compile.py,
select.py, pack.py).

Targets whose GPU kind is on this machine are tuned first (into the tuning database);
decisions come from that database, then from a measured target of the same arch family,
then from the heuristic. Only what will be packed is compiled here: each bucket's first
choice, then the next one for buckets whose choice failed, until every bucket has a config
that compiled and fits.

A slice of the build (aot/shard.py) tunes, compiles and packs only its instances, but
decides over the whole plan, so that it chooses exactly as a full build does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import heuristic
from .cache import CompileCache
from .compile import Compiled, CompilePool, compile_variants
from .costmodel import predict
from .env import Environment
from .errors import UsageError
from .ops import op_records, report_lines
from .pack import failures, kernel_records, kernel_sources
from .plan import Config, Instance, Plan, Variant, make_plan
from .product import Context, Contribution, Provenance, Summary
from .recipe import Recipe
from .report import kernel_section
from .select import Chooser, Ranker, heuristic_chooser, select, wanted_variants
from .shard import Slice, apply
from .tune import decide
from .tune.db import TuningDB
from .tune.gpu import GpuInfo, GpuWorker, detect, matches
from .tune.measure import unread
from .tune.tuner import Tuner, TuneStats


@dataclass(frozen=True)
class TuneOptions:
    """Tuning for ``build``: on by default wherever a GPU of a target's kind is present."""

    enabled: bool = True
    # Only these kernels are tuned (None: all); the others take what the database holds,
    # as with enabled=False: a resumed build that must not time the rest again.
    only: frozenset[str] | None = None
    db: Path | None = None  # default: <bundle>.tunedb.jsonl next to the bundle
    gpus: list[GpuInfo] | None = None  # None: ask the driver
    timeout: float = 120.0  # seconds a benchmark may take before it counts as a hang
    worker_factory: Callable[[GpuInfo], GpuWorker] | None = None  # tests use a fake GPU


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


def check_only(recipe: Recipe, only: frozenset[str] | None) -> None:
    """Refuse kernels to tune (``--tune-only``) that the recipe does not have."""
    if only is not None and (unknown := only - {k.name for k in recipe.kernels}):
        raise UsageError(
            f"--tune-only names {', '.join(sorted(unknown))}, which {recipe.path} does not "
            f"have; its kernels: {', '.join(k.name for k in recipe.kernels) or 'none'}"
        )


def run_tuning(plan: Plan, db: TuningDB, env: Environment, opts: TuneOptions) -> TuneStats | None:
    """Tune every instance (of ``opts.only``'s kernels) whose GPU kind is here; None when
    no GPU can tune anything."""
    if opts.only is not None:
        plan = replace(plan, instances=tuple(i for i in plan.instances
                                             if i.kernel.name in opts.only))  # fmt: skip
    gpus = detect() if opts.gpus is None else opts.gpus
    if not any(matches(inst.target, g) for inst in plan.instances for g in gpus):
        return None
    with CompilePool(plan, CompileCache(env.cache_dir), env.jobs) as pool:
        tuner = Tuner(plan, db, pool, gpus, progress=env.progress, timeout=opts.timeout,
                      worker_factory=opts.worker_factory, cost_model=env.cost_model,
                      predict=env.predict)  # fmt: skip
        return tuner.run()


@dataclass(frozen=True)
class KernelProduct:
    """The recipe's kernels: the whole plan (what decisions are made over) and the part of
    it this build builds. Every recipe has one, with no kernels at all for a model
    alone: a manifest always lists its kernels."""

    whole: Plan
    plan: Plan
    tune: TuneOptions
    shard: Mapping[str, Any] | None = None
    name: str = "kernels"

    def build(self, ctx: Context) -> Contribution:
        import triton

        plan, env = self.plan, ctx.env
        db_path = self.tune.db or ctx.bundle.with_suffix(".tunedb.jsonl")
        db = TuningDB(db_path)
        stats = run_tuning(plan, db, env, self.tune) if self.tune.enabled else None
        # Decided over the whole plan, so that a slice chooses as a full build does: a
        # target without measurements takes those of its arch family, which may lie in
        # another slice.
        fallback = heuristic_chooser(cached_ranker(self.whole))
        # Kernels whose recipe asks for the learned cost model get its picks instead,
        # calibrated on what the database measured at their other buckets.
        found = decide.outcomes(self.whole, db)
        predictor = predict.chooser(self.whole, env, fallback, found)
        chooser = decide.chooser(self.whole, found, predictor)
        decided = decide.count(plan, chooser)
        compiled = compile_selected(plan, chooser, env)
        selection = select(plan, chooser, compiled)
        kernels, payloads = kernel_records(plan, selection)
        build: dict[str, Any] = {"failed": failures(compiled)}
        if self.shard is not None:
            build["shard"] = dict(self.shard)
        summary = Summary(
            possible=plan.size,
            compiled=sum(1 for c in compiled.values() if not c.cached),
            cached=sum(1 for c in compiled.values() if c.cached),
            failed=sum(1 for c in compiled.values() if not c.ok),
            packed=sum(len(row) for row in selection.choices.values()),
            decided=decided,
            tuning=stats,
            db=db_path if db_path.exists() else None,
            unread=unread(self.whole, db),
        )
        records: dict[str, Any] = {"kernels": kernels, "build": build}
        ops = op_records(plan.recipe.ops, kernels)
        if ops:
            records["ops"] = ops
        return Contribution(
            records=records,
            payloads=payloads,
            provenance=Provenance(kernel_sources(plan), {"triton": triton.__version__}),
            report=kernel_section(
                plan, selection, compiled, db, ctx.report_dir, report_lines(ops, kernels)
            ),
            summary=summary,
        )


def plan_kernels(recipe: Recipe, sl: Slice, tune: TuneOptions) -> KernelProduct:
    """The kernel product of ``recipe``, restricted to the slice ``sl``."""
    check_only(recipe, tune.only)
    whole = make_plan(recipe)
    part, shard = apply(whole, sl)
    return KernelProduct(whole, part, tune, shard)
